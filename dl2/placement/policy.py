"""Harmony's placer (NumPy inference): a policy network scores every server that could host a job's next task.

Harmony §4 (INFOCOM'19) places a job's workers and PS with a policy network that sees the job and the
cluster's current placement. Ours scores candidate servers one decision at a time with shared weights (the
same function for every server, so one network serves any cluster size): each candidate server is a row (the
job's own tasks there, the other jobs there by type, what is free), paired with the job's row (type, role,
targets, what it already holds), and a softmax over the rows picks the server. The chosen server then takes
the job's next tasks as long as they fit, so a decision is taken per server rather than per task (a 16-worker
job usually needs two). One more row means "leave this role's remaining tasks unplaced in this slot" (only
for a job that already holds a task of that role, so it keeps running): with interference, an extra worker on
a crowded server can slow the job, or its neighbours, more than it helps. The allocation policy's counts are
then an upper bound.

`HarmonyPlacer` implements the `Placer` protocol (with `needs_tenancy`), so any allocation policy can use it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from dl2.core import Architecture, InputError
from dl2.placement.config import JOB_INPUTS, SERVER_INPUTS, PlacerConfig
from dl2.placement.features import NUM_TYPES, SCALE_TASKS
from dl2.rl.inference import Layers, _dense, _linear_layers
from dl2.schedulers.placement import Demand, NodeState, Placer
from dl2.schedulers.tenancy import Tenancy

WEIGHTS = "policy.pt"
SKIP_COLUMN = SERVER_INPUTS - 1
"""The column that flags the 'leave unplaced' row."""


class NumpyPlacementPolicy:
    """The scorer: logits of candidate rows given the job's row."""

    def __init__(self, layers: Layers) -> None:
        (first, self._bias), *self._rest = layers
        self._server = np.ascontiguousarray(first[:SERVER_INPUTS])
        self._job = np.ascontiguousarray(first[SERVER_INPUTS:])

    @classmethod
    def from_state_dict(cls, state: Mapping[str, object]) -> NumpyPlacementPolicy:
        return cls(_linear_layers(state, "scorer."))

    def logits(self, rows: np.ndarray, job: np.ndarray) -> np.ndarray:
        # the job's part of the first layer is one product, broadcast to every row
        hidden = rows @ self._server + (job @ self._job + self._bias)
        np.maximum(hidden, 0.0, out=hidden)
        result: np.ndarray = _dense(hidden, self._rest, final_activation=False)[:, 0]
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

    @classmethod
    def from_dir(cls, directory: str | Path, greedy: bool = True, seed: int = 0) -> HarmonyPlacer:
        from dl2.placement.model_files import read_config
        from dl2.rl.model_io import load_state

        data = read_config(Path(directory), "placer")
        config = PlacerConfig.from_json_dict(data, str(Path(directory) / "config.json"))
        try:
            policy = NumpyPlacementPolicy.from_state_dict(load_state(Path(directory), WEIGHTS))
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
        self._kept = {node: (held[0], held[1]) for node, held in tenancy.held_by[rank].items()}
        explore = self.explorers and self.epsilon > 0 and self.rng.random() < self.epsilon
        self._explorer = self.explorers[int(self.rng.integers(len(self.explorers)))] if explore else None

    def _decide(
        self, state: NodeState, tenancy: Tenancy, rank: int, is_ps: bool, demand: Demand, job_nodes: Sequence[int]
    ) -> int:
        held = tenancy.held_by[rank]
        may_skip = self.config.skip and any(counts[is_ps] for counts in held.values())
        nodes, rows = candidates(state, tenancy, rank, demand, may_skip)
        if len(rows) == 0:
            return -1
        job = job_inputs(tenancy, rank, is_ps)
        logits = self.policy.logits(rows, job)
        self.decisions += 1
        if self._explorer is not None:
            node = self._explorer.choose(state, demand, job_nodes)
            choice = int(np.searchsorted(nodes, node)) if node >= 0 else len(rows) - 1
            if node < 0 and not may_skip:
                return -1
        elif self.greedy:
            choice = int(np.argmax(logits))
        else:
            probabilities = _softmax(logits)
            choice = min(int(np.searchsorted(np.cumsum(probabilities), self.rng.random(), side="right")), len(rows) - 1)
        if self.hook is not None:
            self.hook.decided(job, rows, choice, float(_softmax(logits)[choice]))
        return int(nodes[choice]) if choice < len(nodes) else -1


def candidates(
    state: NodeState, tenancy: Tenancy, rank: int, demand: Demand, may_skip: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(fitting nodes, one input row per fitting node plus the 'leave unplaced' row when `may_skip`)."""
    nodes = state.fitting_nodes(demand)
    count = len(nodes)
    rows = np.zeros((count + int(may_skip), SERVER_INPUTS), np.float32)
    others = rows[:count, 2 : 2 + NUM_TYPES]
    others[:] = tenancy.jobs_of_type[nodes]
    workers, ps = tenancy.targets[rank]
    own_type = tenancy.type_of[rank]
    for node, (held_workers, held_ps) in tenancy.held_by[rank].items():
        position = int(np.searchsorted(nodes, node))
        if position < count and nodes[position] == node:
            rows[position, 0] = held_workers / max(workers, 1)
            rows[position, 1] = held_ps / max(ps, 1)
            others[position, own_type] -= 1.0
    total = others.sum(axis=1)
    rows[:count, 2 + NUM_TYPES] = total
    rows[:count, 3 + NUM_TYPES] = total == 0
    rows[:count, 4 + NUM_TYPES : 7 + NUM_TYPES] = state.free_fractions()[nodes]
    if may_skip:
        rows[count, SKIP_COLUMN] = 1.0
    return nodes, rows


def job_inputs(tenancy: Tenancy, rank: int, is_ps: bool) -> np.ndarray:
    """The job's row: type, architecture, role, targets, the shares of its targets it holds, its servers and the
    other jobs on them."""
    spec = tenancy.jobs[rank].spec
    workers, ps = tenancy.targets[rank]
    held = tenancy.held_by[rank]
    neighbours = {other for node in held for other in tenancy.on_node[node] if other != rank}
    job = np.zeros(JOB_INPUTS, np.float32)
    job[tenancy.type_of[rank]] = 1.0
    job[NUM_TYPES:] = (
        float(spec.architecture is Architecture.ALLREDUCE),
        float(is_ps),
        workers / SCALE_TASKS,
        ps / SCALE_TASKS,
        sum(counts[0] for counts in held.values()) / max(workers, 1),
        sum(counts[1] for counts in held.values()) / max(ps, 1),
        len(held) / 4.0,
        len(neighbours) / 4.0,
    )
    return job


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max())
    result: np.ndarray = shifted / shifted.sum()
    return result
