"""Compiled forward passes of the per-job policies for greedy decisions (numba).

A slot of the authors' contended setting takes about 150 decisions; with NumPy each decision costs some 25 array
calls whose fixed overhead, not their size (40 jobs x 64 units), dominates. One compiled function does the same
arithmetic and returns the masked argmax:

- `per-job-local` (`_greedy_local`): finds the window columns whose features changed since the last call,
  re-encodes only those (a column's embedding depends on its own job alone), pools, and scores every action.
- `per-job` (`_greedy_shared`): the encoder also sees the cluster-wide features, which change with every task
  granted, so every column is re-encoded each call; only the product of a column's own features with the first
  layer is kept between calls. The matrix products go to BLAS (numba's `np.dot`); a slot of 2,000 Philly jobs
  takes some 5,000 decisions (`benchmarks/kube_controller.py`). `LearnedScheduler` plays a greedy realistic-mode
  slot of a `per-job` policy through `dl2.rl.compiled_slot` instead (the whole window in one compiled call).

DL2 §6.3 makes a slot's decisions in milliseconds; `benchmarks/bench_decision_speed.py` measures ours.

numba is optional and imported on first use (it takes most of a second to import): `greedy_kernel()` returns
None without it, and `inference.NumpyPolicy` then falls back to NumPy. Both paths compute the same function (a
test compares them with torch). The compiled code is cached on disk (numba's `cache=True`), so only the first
process on a machine pays the compilation (a few seconds).
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

import numpy as np


def _refresh_column(x: np.ndarray, j: int, features: int, cached_jobs: np.ndarray, occupied: np.ndarray) -> bool:
    """Whether window column `j` of `x` differs from the cached one; if so the cache and `occupied[j]` (some
    feature nonzero) take the new column."""
    start = j * features
    changed = False
    for f in range(features):
        if x[start + f] != cached_jobs[j, f]:
            changed = True
            break
    if not changed:
        return False
    any_feature = False
    for f in range(features):
        value = x[start + f]
        cached_jobs[j, f] = value
        if value != 0.0:
            any_feature = True
    occupied[j] = any_feature
    return True


def _pooled_mean(embeddings: np.ndarray, occupied: np.ndarray) -> np.ndarray:
    """The mean of the occupied columns' embeddings, as torch's sum / max(count, 1)."""
    count = 0
    pooled = np.zeros(embeddings.shape[1], dtype=np.float32)
    for j in range(embeddings.shape[0]):
        if occupied[j]:
            count += 1
            pooled += embeddings[j]
    if count > 1:
        pooled /= np.float32(count)
    return pooled


def _best_allowed(logits: np.ndarray, mask: np.ndarray) -> int:
    """The first action of highest logit that `mask` allows; 0 when none is (as np.argmax over all-masked logits)."""
    best, best_logit = -1, np.float32(0.0)
    for action in range(logits.shape[0]):
        if mask[action] != 0 and (best < 0 or logits[action] > best_logit):
            best, best_logit = action, logits[action]
    return max(best, 0)


def _greedy_local(
    x: np.ndarray,
    mask: np.ndarray,
    window: int,
    features: int,
    cached_jobs: np.ndarray,
    embeddings: np.ndarray,
    head_part: np.ndarray,
    occupied: np.ndarray,
    encoder_weights: Any,
    encoder_biases: Any,
    head_jobs: np.ndarray,
    context_pooled: np.ndarray,
    context_tail: np.ndarray,
    context_bias: np.ndarray,
    context_out: np.ndarray,
    context_out_bias: np.ndarray,
    last: np.ndarray,
    last_bias: np.ndarray,
    logits: np.ndarray,
) -> int:
    """Writes every action's logit into `logits` (unmasked: sampling masks them) and returns the best action
    that `mask` allows. `cached_jobs`, `embeddings`,
    `head_part` and `occupied` carry the columns between calls and are updated in place."""
    width = embeddings.shape[1]
    for j in range(window):
        if not _refresh_column(x, j, features, cached_jobs, occupied):
            continue
        h = cached_jobs[j].copy()
        for layer in range(len(encoder_weights)):
            weight = encoder_weights[layer]
            bias = encoder_biases[layer]
            out = bias.copy()
            for i in range(weight.shape[0]):
                value = h[i]
                if value != 0.0:
                    for k in range(weight.shape[1]):
                        out[k] += value * weight[i, k]
            for k in range(out.shape[0]):
                if out[k] < 0.0:
                    out[k] = 0.0
            h = out
        for k in range(width):
            embeddings[j, k] = h[k]
        for k in range(head_part.shape[1]):
            head_part[j, k] = 0.0
        for i in range(width):
            value = h[i]
            if value != 0.0:
                for k in range(head_part.shape[1]):
                    head_part[j, k] += value * head_jobs[i, k]
    pooled = _pooled_mean(embeddings, occupied)
    context = context_bias.copy()
    for i in range(width):
        value = pooled[i]
        if value != 0.0:
            for k in range(context.shape[0]):
                context[k] += value * context_pooled[i, k]
    tail_start = window * features
    for i in range(context_tail.shape[0]):
        value = x[tail_start + i]
        if value != 0.0:
            for k in range(context.shape[0]):
                context[k] += value * context_tail[i, k]
    for k in range(context.shape[0]):
        if context[k] < 0.0:
            context[k] = 0.0
    out = context_out_bias.copy()
    for i in range(context.shape[0]):
        value = context[i]
        if value != 0.0:
            for k in range(out.shape[0]):
                out[k] += value * context_out[i, k]
    hidden_width = out.shape[0] - 1
    heads = last.shape[1]
    hidden = np.empty(hidden_width, dtype=np.float32)
    for j in range(window):
        for k in range(hidden_width):
            value = head_part[j, k] + out[k]
            hidden[k] = value if value > 0.0 else 0.0
        for a in range(heads):
            value = last_bias[a]
            for k in range(hidden_width):
                value += hidden[k] * last[k, a]
            logits[j * heads + a] = value
    logits[window * heads] = out[hidden_width]
    return _best_allowed(logits, mask)


def _greedy_shared(
    x: np.ndarray,
    mask: np.ndarray,
    window: int,
    features: int,
    cached_jobs: np.ndarray,
    first_jobs: np.ndarray,
    occupied: np.ndarray,
    encoder_jobs: np.ndarray,
    encoder_tail: np.ndarray,
    encoder_bias: np.ndarray,
    encoder_weights: Any,
    encoder_biases: Any,
    head_jobs: np.ndarray,
    context_pooled: np.ndarray,
    context_tail: np.ndarray,
    context_bias: np.ndarray,
    context_out: np.ndarray,
    context_out_bias: np.ndarray,
    last: np.ndarray,
    last_bias: np.ndarray,
    logits: np.ndarray,
) -> int:
    """`_greedy_local` for the `per-job` network: `cached_jobs`, `first_jobs` (each column's features times the
    encoder's first layer) and `occupied` carry the columns between calls; the first layer is split into
    `encoder_jobs` and `encoder_tail`, so of `encoder_weights`/`encoder_biases` (all the encoder's layers: never an
    empty tuple, which numba cannot type) the first is skipped."""
    tail = x[window * features :]
    for j in range(window):
        if not _refresh_column(x, j, features, cached_jobs, occupied):
            continue
        first_jobs[j] = np.dot(cached_jobs[j], encoder_jobs)
    h = first_jobs + (np.dot(tail, encoder_tail) + encoder_bias)
    np.maximum(h, 0.0, h)
    for layer in range(1, len(encoder_weights)):
        h = np.dot(h, encoder_weights[layer]) + encoder_biases[layer]
        np.maximum(h, 0.0, h)
    pooled = _pooled_mean(h, occupied)
    context = np.dot(pooled, context_pooled) + np.dot(tail, context_tail) + context_bias
    np.maximum(context, 0.0, context)
    out = np.dot(context, context_out) + context_out_bias
    hidden_width = out.shape[0] - 1
    hidden = np.dot(h, head_jobs) + out[:hidden_width]
    np.maximum(hidden, 0.0, hidden)
    job_logits = np.dot(hidden, last) + last_bias
    logits[: job_logits.size] = job_logits.ravel()
    logits[job_logits.size] = out[hidden_width]
    return _best_allowed(logits, mask)


KERNELS: dict[str, Callable[..., int]] = {"per-job-local": _greedy_local, "per-job": _greedy_shared}
"""The network kinds that have a compiled greedy pass, and its Python source."""
HELPERS = (_refresh_column, _pooled_mean, _best_allowed)
"""What the kernels call: compiled first, then bound in place of their Python source."""


@functools.cache
def _compiled_helpers() -> dict[str, Any]:
    import numba

    return {helper.__name__: numba.njit(cache=True, nogil=True)(helper) for helper in HELPERS}


@functools.cache
def greedy_kernel(kind: str = "per-job-local") -> Callable[..., int] | None:
    """The compiled greedy pass of a network kind, or None where numba is not installed or the kind has none."""
    if kind not in KERNELS:
        return None
    try:
        import numba
    except ImportError:  # an optional accelerator: everything works without it, only slower
        return None
    source = KERNELS[kind]
    # numba resolves a kernel's globals when it compiles it: the helpers it sees must be compiled ones
    bound = types.FunctionType(source.__code__, {**source.__globals__, **_compiled_helpers()}, source.__name__)
    kernel: Callable[..., int] = numba.njit(cache=True, nogil=True)(bound)
    return kernel
