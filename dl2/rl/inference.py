"""Torch-free inference for the policy network: the same computation with NumPy.

At batch size one a NumPy forward pass is several times cheaper than a torch call, which matters when a slot
takes a hundred decisions (DL2 §6.3 reports decisions in milliseconds), and rollout workers need no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from dl2.env.observation import InputShape
from dl2.nn.numpy_inference import Layers, dense, linear_layers, single_linear
from dl2.rl import compiled
from dl2.rl.config import MASKED_LOGIT, NetworkConfig


class NumpyPolicy:
    """A `PolicyNetwork` evaluated with NumPy."""

    def __init__(self, kind: str, shape: InputShape, parts: dict[str, Layers], use_compiled: bool = True) -> None:
        self.kind = kind
        self.shape = shape
        self.parts = {name: [(np.ascontiguousarray(w), b) for w, b in layers] for name, layers in parts.items()}
        if kind != "mlp":
            self._split_concatenations()
        self._rows: _RowCache | None = None
        self._kernel: _KernelState | None = None
        if use_compiled and (kernel := compiled.greedy_kernel(kind)) is not None:
            self._kernel = _KernelState.build(self, kernel)

    @property
    def uses_compiled(self) -> bool:
        """Whether greedy decisions go through a numba kernel (asked for, numba installed, a kind that has one)."""
        return self._kernel is not None

    def __getstate__(self) -> dict[str, object]:
        """Pickled without what it carries between calls (rollout workers rebuild it): Ray hands a worker read-only
        arrays, and the kernel and the row cache update theirs in place."""
        state = dict(self.__dict__)
        state["_compiled"] = state.pop("_kernel") is not None
        state["_rows"] = None
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        use_compiled = bool(state.pop("_compiled", False))
        self.__dict__.update(state)
        self._kernel = None
        if use_compiled and (kernel := compiled.greedy_kernel(self.kind)) is not None:
            self._kernel = _KernelState.build(self, kernel)

    def _split_concatenations(self) -> None:
        """Each layer fed a concatenation [a, b] computes a @ W_a + b @ W_b: the broadcast global features and
        context then cost one small product per decision instead of J copies (a slot takes ~150 decisions)."""
        features = self.shape.job_features
        (first, first_bias), *self._encoder_rest = self.parts["encoder"]
        self._encoder_jobs, self._encoder_tail = np.ascontiguousarray(first[:features]), first[features:]
        self._encoder_bias = first_bias
        ((context, self._context_bias),) = self.parts["context"]
        width = context.shape[0] - self.shape.global_features
        self._context_pooled, self._context_tail = np.ascontiguousarray(context[:width]), context[width:]
        (head, self._head_bias), *self._head_rest = self.parts["job_head"]
        self._head_jobs, self._head_context = np.ascontiguousarray(head[:width]), head[width:]
        ((self._stop, self._stop_bias),) = self.parts["stop_head"]
        # the context feeds the job head and the stop head: one product for both, biases included
        self._context_out = np.ascontiguousarray(np.concatenate([self._head_context, self._stop], axis=1))
        self._context_out_bias = np.concatenate([self._head_bias, self._stop_bias])

    @classmethod
    def from_state_dict(
        cls, state: Mapping[str, object], shape: InputShape, config: NetworkConfig, use_compiled: bool = True
    ) -> NumpyPolicy:
        """`use_compiled`: a per-job network's decisions (greedy, and the logits of sampled ones) go through the
        numba kernel when numba is installed (`dl2.rl.compiled`)."""
        if config.kind == "mlp":
            parts = {"trunk": linear_layers(state, "trunk."), "head": single_linear(state, "head")}
        else:
            parts = {
                "encoder": linear_layers(state, "jobs.encoder."),
                "context": linear_layers(state, "jobs.context."),
                "job_head": linear_layers(state, "job_head."),
                "stop_head": single_linear(state, "stop_head"),
            }
        return cls(config.kind, shape, parts, use_compiled)

    @property
    def input_size(self) -> int:
        if self.kind == "mlp":
            return int(self.parts["trunk"][0][0].shape[0])
        return self.shape.size

    def logits(self, observation: np.ndarray) -> np.ndarray:
        x = observation.astype(np.float32, copy=False)
        parts = self.parts
        if self.kind == "mlp":
            return dense(dense(x, parts["trunk"], True), parts["head"], False)
        if self.kind == "per-job-local":
            return self._local_logits(x)
        shape = self.shape
        split = shape.window * shape.job_features
        jobs = x[:split].reshape(shape.window, shape.job_features)
        tail = x[split:]
        # the per-job network of `networks.PolicyNetwork`, with each concatenation split into two products
        embeddings = jobs @ self._encoder_jobs
        embeddings += tail @ self._encoder_tail + self._encoder_bias
        np.maximum(embeddings, 0.0, out=embeddings)
        if self._encoder_rest:
            embeddings = dense(embeddings, self._encoder_rest, True)
        occupied = jobs.any(axis=1)
        count = np.count_nonzero(occupied)
        pooled = occupied.astype(np.float32) @ embeddings
        if count > 1:
            pooled /= count
        context = pooled @ self._context_pooled + tail @ self._context_tail + self._context_bias
        np.maximum(context, 0.0, out=context)
        hidden = embeddings @ self._head_jobs
        hidden += context @ self._head_context + self._head_bias
        if self._head_rest:
            np.maximum(hidden, 0.0, out=hidden)
            hidden = dense(hidden, self._head_rest, False)
        logits = np.empty(3 * shape.window + 1, dtype=np.float32)
        logits[:-1] = hidden.ravel()
        logits[-1:] = context @ self._stop + self._stop_bias
        return logits

    def _local_logits(self, x: np.ndarray) -> np.ndarray:
        """`per-job-local`: job embeddings and their share of the head's first layer depend on the job's own
        row only, so they are kept from the previous call and recomputed for the rows that changed (within a
        slot, the job that received the latest task). Equal to a full pass up to float rounding."""
        shape = self.shape
        split = shape.window * shape.job_features
        jobs = x[:split].reshape(shape.window, shape.job_features)
        tail = x[split:]
        rows = self._rows
        if rows is None:
            rows = self._rows = _RowCache(jobs.copy(), *self._encode_rows(jobs))
        else:
            changed = np.flatnonzero((jobs != rows.jobs).any(axis=1))
            if changed.size == 1:
                row = int(changed[0])
                rows.jobs[row] = jobs[row]
                rows.embeddings[row], rows.head_part[row] = self._encode_rows(jobs[row : row + 1])
                if bool(jobs[row].any()) != bool(rows.occupied[row]):
                    rows.occupied[row] = not rows.occupied[row]
                    rows.rescale()
            elif changed.size:
                rows.jobs[changed] = jobs[changed]
                rows.embeddings[changed], rows.head_part[changed] = self._encode_rows(jobs[changed])
                rows.occupied[changed] = jobs[changed].any(axis=1)
                rows.rescale()
        pooled = rows.mean_weights @ rows.embeddings  # the mean over occupied columns
        context = pooled @ self._context_pooled
        context += tail @ self._context_tail
        context += self._context_bias
        np.maximum(context, 0.0, out=context)
        out = context @ self._context_out
        out += self._context_out_bias
        hidden = rows.head_part + out[:-1]
        logits = np.empty(3 * shape.window + 1, dtype=np.float32)
        if self._head_rest:
            np.maximum(hidden, 0.0, out=hidden)
            *inner, (last, last_bias) = self._head_rest
            if inner:
                hidden = dense(hidden, inner, True)
            job_logits = logits[:-1].reshape(shape.window, -1)
            np.dot(hidden, last, out=job_logits)
            job_logits += last_bias
        else:
            logits[:-1] = hidden.ravel()
        logits[-1] = out[-1]
        return logits

    def _encode_rows(self, jobs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Embeddings of these job rows and their product with the head's first layer."""
        embeddings = dense(jobs, self.parts["encoder"], True)
        return embeddings, embeddings @ self._head_jobs

    def greedy_action(self, observation: np.ndarray, mask: np.ndarray) -> int:
        """The most likely possible action (what `act` returns without `rng`), without computing probabilities."""
        if self._kernel is not None:
            return self._kernel.greedy(observation.astype(np.float32, copy=False), mask)
        logits = self.logits(observation)
        logits[mask == 0] = MASKED_LOGIT
        return int(np.argmax(logits))

    def act(
        self, observation: np.ndarray, mask: np.ndarray, rng: np.random.Generator | None = None
    ) -> tuple[int, float]:
        """An action and its log-probability: the most likely possible action, or a sample when `rng` is given."""
        if self._kernel is not None:  # the kernel's logits serve sampling too
            action = self._kernel.greedy(observation.astype(np.float32, copy=False), mask)
            raw = self._kernel.logits
        else:
            raw = self.logits(observation)
        logits = np.where(mask > 0, raw, MASKED_LOGIT)
        shifted = logits - logits.max()
        probabilities = np.exp(shifted)
        probabilities /= probabilities.sum()
        if rng is None:
            if self._kernel is None:
                action = int(np.argmax(logits))
        else:
            drawn = int(np.searchsorted(np.cumsum(probabilities), rng.random(), side="right"))
            action = min(drawn, len(logits) - 1)
            if mask[action] == 0:  # rounding at the very end of the cumulative sum
                action = int(np.argmax(logits))
        return action, float(np.log(max(probabilities[action], 1e-30)))


@dataclass(slots=True)
class _KernelState:
    """A compiled kernel (`dl2.rl.compiled`) with its arguments: the window columns it carries between calls,
    then the weights."""

    kernel: Callable[..., int]
    arguments: tuple[object, ...]
    logits: np.ndarray

    @classmethod
    def build(cls, policy: NumpyPolicy, kernel: Callable[..., int]) -> _KernelState:
        shape = policy.shape
        encoder = policy.parts["encoder"]
        width = encoder[-1][0].shape[1]
        ((last, last_bias),) = policy._head_rest  # the job head is [2 x width, width, 3]
        head = (
            np.ascontiguousarray(policy._head_jobs),
            np.ascontiguousarray(policy._context_pooled),
            np.ascontiguousarray(policy._context_tail),
            np.ascontiguousarray(policy._context_bias),
            policy._context_out,
            np.ascontiguousarray(policy._context_out_bias),
            np.ascontiguousarray(last),
            np.ascontiguousarray(last_bias),
        )
        columns = np.full((shape.window, shape.job_features), np.nan, dtype=np.float32)  # NaN: every column is new
        occupied = np.zeros(shape.window, dtype=np.bool_)
        if policy.kind == "per-job-local":
            carried: tuple[object, ...] = (
                columns,
                np.zeros((shape.window, width), dtype=np.float32),  # embeddings
                np.zeros((shape.window, policy._head_jobs.shape[1]), dtype=np.float32),  # their head products
                occupied,
                tuple(np.ascontiguousarray(w) for w, _ in encoder),
                tuple(np.ascontiguousarray(b) for _, b in encoder),
            )
        else:  # per-job: the first layer split in two products, then the encoder's other layers
            first_width = policy._encoder_jobs.shape[1]
            carried = (
                columns,
                np.zeros((shape.window, first_width), dtype=np.float32),  # columns x first layer
                occupied,
                policy._encoder_jobs,
                np.ascontiguousarray(policy._encoder_tail),
                np.ascontiguousarray(policy._encoder_bias),
                tuple(np.ascontiguousarray(w) for w, _ in encoder),  # the kernel skips the first
                tuple(np.ascontiguousarray(b) for _, b in encoder),
            )
        logits = np.empty(3 * shape.window + 1, dtype=np.float32)
        return cls(kernel, (shape.window, shape.job_features, *carried, *head), logits)

    def greedy(self, x: np.ndarray, mask: np.ndarray) -> int:
        return self.kernel(x, mask, *self.arguments, self.logits)


@dataclass(slots=True)
class _RowCache:
    """Per window column, what `_local_logits` keeps between calls."""

    jobs: np.ndarray
    embeddings: np.ndarray
    head_part: np.ndarray
    occupied: np.ndarray = field(init=False)
    mean_weights: np.ndarray = field(init=False)
    """1 / (occupied columns) for each occupied column, else 0 (all 1 if none or one is occupied, as torch's
    sum / max(count, 1))."""

    def __post_init__(self) -> None:
        self.occupied = np.asarray(self.jobs.any(axis=1), dtype=np.float32)
        self.rescale()

    def rescale(self) -> None:
        count = np.count_nonzero(self.occupied)
        self.mean_weights = self.occupied / np.float32(count) if count > 1 else self.occupied.copy()
