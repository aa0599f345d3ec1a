"""Harmony's placer (NumPy inference): a policy network scores every server that could host a job's next task.

Harmony §4 (INFOCOM'19) places a job's workers and PS with a policy network that sees the job and the
cluster's current placement. Ours scores candidate servers one decision at a time with shared weights (the
same function for every server, so one network serves any cluster size): each candidate server is a row (the
job's own tasks there, the other jobs there by type, what is free), paired with the job's row (type, role,
targets, what it already holds), and a softmax over the rows picks the server. The chosen server then takes
the job's next tasks as long as they fit, so a decision is taken per server rather than per task (a 16-worker
job usually needs two). The rows are built in `dl2.placement.candidates`, once per round and then server by
server as tasks land. Optionally (`PlacerConfig.skip`, off by default) one more row means "leave this role's
remaining tasks unplaced in this slot" (only for a job that already holds a task of that role, so it keeps
running): with interference, an extra worker on a crowded server can slow the job, or its neighbours, more than
it helps. The allocation policy's counts are then an upper bound, not held.

`HarmonyPlacer` implements the `Placer` protocol (with `needs_tenancy`), so any allocation policy can use it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from dl2.core import InputError
from dl2.nn.numpy_inference import Layers, dense, linear_layers
from dl2.placement.candidates import SKIP_COLUMN, RoundCandidates, candidates, job_inputs
from dl2.placement.config import SERVER_INPUTS, PlacerConfig
from dl2.schedulers.placement import Demand, NodeState, Placer
from dl2.schedulers.tenancy import Tenancy

WEIGHTS = "policy.pt"
_SINGLE_THREAD_PRODUCT = 1 << 18
"""OpenBLAS multiplies on the calling thread up to this many multiply-adds (m * n * k) per product."""
__all__ = ["SKIP_COLUMN", "WEIGHTS", "HarmonyPlacer", "NumpyPlacementPolicy", "candidates", "job_inputs"]


class NumpyPlacementPolicy:
    """The scorer: logits of candidate rows given the job's row.

    Rows are scored in blocks of at most `block_rows`: OpenBLAS hands a product of more than 2^18 multiply-adds to
    its thread pool, whose hand-off costs milliseconds on a shared machine (a 300-server decision took 3 ms instead
    of 70 us); below that it runs on the calling thread, and the per-row arithmetic is the same either way."""

    def __init__(self, layers: Layers) -> None:
        (first, self._bias), *self._rest = layers
        self._server = np.ascontiguousarray(first[:SERVER_INPUTS])
        self._job = np.ascontiguousarray(first[SERVER_INPUTS:])
        widest = max(weight.shape[0] * weight.shape[1] for weight, _ in layers)
        self.block_rows = max(1, _SINGLE_THREAD_PRODUCT // widest)

    @classmethod
    def from_state_dict(cls, state: Mapping[str, object]) -> NumpyPlacementPolicy:
        return cls(linear_layers(state, "scorer."))

    def logits(self, rows: np.ndarray, job: np.ndarray) -> np.ndarray:
        # the job's part of the first layer is one product, broadcast to every row
        offset = job @ self._job + self._bias
        block = self.block_rows
        if len(rows) <= block:
            return self._block(rows, offset)
        return np.concatenate(
            [self._block(rows[start : start + block], offset) for start in range(0, len(rows), block)]
        )

    def _block(self, rows: np.ndarray, offset: np.ndarray) -> np.ndarray:
        hidden = rows @ self._server + offset
        np.maximum(hidden, 0.0, out=hidden)
        result: np.ndarray = dense(hidden, self._rest, final_activation=False)[:, 0]
        return result


class DecisionHook(Protocol):
    """What training attaches to a placer: every decision, and the end of each job's placement."""

    def decided(self, job: np.ndarray, rows: np.ndarray, choice: int, probability: float) -> None: ...

    def job_placed(self, state: NodeState, rank: int, kept: dict[int, tuple[int, int]]) -> None:
        """Job `rank` is placed for this round; `kept`: node -> (workers, PS) it held before the round's tasks."""
        ...


class HarmonyPlacer:
    needs_tenancy = True

    def __init__(
        self,
        policy: NumpyPlacementPolicy,
        config: PlacerConfig,
        greedy: bool = True,
        seed: int = 0,
        name: str = "harmony",
    ) -> None:
        self.policy = policy
        self.config = config
        self.greedy = greedy
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.hook: DecisionHook | None = None
        self.epsilon = 0.0
        """Chance that a job's placement in a round follows one of `explorers` instead (training only)."""
        self.explorers: Sequence[Placer] = ()
        self.teacher: Placer | None = None
        """A heuristic that labels the decisions the policy takes (training's DAgger episodes): the hook is told
        the server it would have chosen, while the policy's choice is the one carried out."""
        self.decisions = 0
        """Network evaluations so far."""
        self.tasks_asked = 0
        """Tasks it was asked to place so far, and those it left unplaced (by choice or for want of room)."""
        self.tasks_left = 0
        self._state: NodeState | None = None
        self._rank = -1
        self._current = -1
        self._stopped = [False, False]
        self._explorer: Placer | None = None
        self._kept: dict[int, tuple[int, int]] = {}
        self._round: RoundCandidates | None = None
        """The candidate rows of the round being placed."""

    @classmethod
    def from_dir(cls, directory: str | Path, greedy: bool = True, seed: int = 0) -> HarmonyPlacer:
        from dl2.nn.state_io import load_weights
        from dl2.placement.model_files import read_config

        data = read_config(Path(directory), "placer")
        config = PlacerConfig.from_json_dict(data, str(Path(directory) / "config.json"))
        try:
            policy = NumpyPlacementPolicy.from_state_dict(load_weights(Path(directory) / WEIGHTS))
        except (KeyError, ValueError) as error:
            raise InputError(str(directory), f"weights do not match the configured network ({error})") from None
        return cls(policy, config, greedy, seed, name=Path(directory).name)

    def choose(self, state: NodeState, demand: Demand, job_nodes: Sequence[int]) -> int:
        tenancy = state.tenancy
        if tenancy is None:
            raise ValueError("HarmonyPlacer needs the tenancy that place_sticky provides")
        rank, is_ps = tenancy.placing, tenancy.placing_ps
        self.tasks_asked += 1
        if state is not self._state or rank != self._rank:
            self.finish_job()
            self._start_job(state, tenancy, rank)
        if self._stopped[is_ps]:
            self.tasks_left += 1
            return -1
        current = self._current
        if current >= 0 and state.fits(current, demand):
            return current
        node = self._decide(state, tenancy, rank, is_ps, demand, job_nodes)
        if node < 0:
            self._stopped[is_ps] = True
            self.tasks_left += 1
        else:
            self._current = node
        return node

    def finish_job(self) -> None:
        """Tell the hook that the job being placed is done (called at the next job, and by training after a round)."""
        if self.hook is not None and self._state is not None and self._rank >= 0:
            self.hook.job_placed(self._state, self._rank, self._kept)
        self._state, self._rank = None, -1

    def _start_job(self, state: NodeState, tenancy: Tenancy, rank: int) -> None:
        self._state, self._rank, self._current = state, rank, -1
        self._stopped = [False, False]
        self._kept = {node: (held[0], held[1]) for node, held in tenancy.holdings(rank).items()}
        explore = self.explorers and self.epsilon > 0 and self.rng.random() < self.epsilon
        self._explorer = self.explorers[int(self.rng.integers(len(self.explorers)))] if explore else None

    def _decide(
        self, state: NodeState, tenancy: Tenancy, rank: int, is_ps: bool, demand: Demand, job_nodes: Sequence[int]
    ) -> int:
        may_skip = self.may_skip(tenancy, rank, is_ps)
        nodes, rows = self._candidates(state, rank, demand, may_skip)
        if len(rows) == 0:
            return -1
        job = job_inputs(tenancy, rank, is_ps)
        logits = self.policy.logits(rows, job)
        self.decisions += 1
        if self._explorer is not None:
            node = self._explorer.choose(state, demand, job_nodes)
            if node < 0 and not may_skip:
                return -1
            choice = _row_of(nodes, node, may_skip)
            if choice < 0:
                raise ValueError(f"explorer {self._explorer.name} chose server {node}, which does not fit the task")
        elif self.greedy:
            choice = int(np.argmax(logits))
        else:
            probabilities = _softmax(logits)
            choice = min(int(np.searchsorted(np.cumsum(probabilities), self.rng.random(), side="right")), len(rows) - 1)
        if self.hook is not None:
            label = choice
            if self.teacher is not None and self._explorer is None:
                label = _row_of(nodes, self.teacher.choose(state, demand, job_nodes), may_skip)
            if label >= 0:
                self.hook.decided(job, rows, label, float(_softmax(logits)[label]))
        return int(nodes[choice]) if choice < len(nodes) else -1

    def may_skip(self, tenancy: Tenancy, rank: int, is_ps: bool) -> bool:
        """Whether the "leave unplaced" row is offered: skipping on, and the job already runs a task of the role
        (so it keeps running)."""
        return self.config.skip and tenancy.holds_role(rank, is_ps)

    def _candidates(self, state: NodeState, rank: int, demand: Demand, may_skip: bool) -> tuple[np.ndarray, np.ndarray]:
        """`candidates(...)`, from rows kept up to date through the round."""
        round_rows = self._round
        if round_rows is None or round_rows.state is not state:
            round_rows = self._round = RoundCandidates(state)
        return round_rows.rows(rank, demand, may_skip)


def _row_of(nodes: np.ndarray, node: int, may_skip: bool) -> int:
    """The candidate row of server `node` (-1: not a candidate), or the skip row (the last) for `node` -1."""
    if node < 0:
        return len(nodes) if may_skip else -1
    position = int(np.searchsorted(nodes, node))
    return position if position < len(nodes) and nodes[position] == node else -1


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max())
    result: np.ndarray = shifted / shifted.sum()
    return result
