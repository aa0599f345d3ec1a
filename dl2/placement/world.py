"""Where the placer learns its speeds: the speed-prediction model, or the simulator's own speed function.

Harmony §4 trains its placer against the reward-prediction model instead of a live cluster: the model says
how fast each job would run under a placement. `PredictedSpeeds` is that; `SimulatorSpeeds` is the
simulator's speed function and interference (the ablation that learns from the simulator directly).
`PredictedSimulation` is the simulator with the speed model in place of its speed function and interference:
jobs arrive, are allocated, placed and progress exactly as in the simulator, at predicted speeds (noise
included), so a placer can be trained and selected without a step of the true simulator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

import numpy as np

from dl2.core import Architecture, JobAllocation, JobSpec, Workload
from dl2.placement.features import Change, Encoded, SlotPlacement
from dl2.placement.speed_model import NumpySpeedModel
from dl2.sim.config import SimConfig
from dl2.sim.simulator import Simulation
from dl2.workload.interference import InterferenceModel
from dl2.workload.speed import SpeedModel


class SpeedSource(Protocol):
    """Throughput (samples/s, before noise) of jobs of one slot's placement, as it is or with some tasks less."""

    def throughputs(self, slot: SlotPlacement, which: Sequence[int]) -> np.ndarray:
        """Throughput of job `i` of `slot.placed` for each i in `which`."""
        ...

    def throughputs_without_each(self, slot: SlotPlacement, changes: Sequence[Change]) -> list[np.ndarray]:
        """Per change (job, removed, gone, which): the throughput of the jobs `which` had `job` not placed the
        tasks `removed` (node -> workers, PS), on the nodes `gone` then holding nothing (`which` excludes `job`)."""
        ...


class PredictedSpeeds:
    """The speed-prediction model as a speed source."""

    def __init__(self, model: NumpySpeedModel) -> None:
        self.model = model

    def throughputs(self, slot: SlotPlacement, which: Sequence[int]) -> np.ndarray:
        if not len(which):
            return np.zeros(0)
        return self.model.throughput(slot.encode(which))

    def throughputs_without_each(self, slot: SlotPlacement, changes: Sequence[Change]) -> list[np.ndarray]:
        if not changes:
            return []
        # one forward pass for every change of the round
        values = self.model.throughput(Encoded.concatenate([slot.without(*change) for change in changes]))
        return np.split(values, np.cumsum([len(change[3]) for change in changes])[:-1])


class SimulatorSpeeds:
    """The simulator's speed function and interference (what `Simulation` computes, without noise): a job's
    placed throughput divided by the largest slowdown any other job on one of its servers inflicts on it."""

    def __init__(self, speed: SpeedModel, interference: InterferenceModel | None) -> None:
        self.speed = speed
        self.interference = interference

    def throughputs(self, slot: SlotPlacement, which: Sequence[int]) -> np.ndarray:
        return self._without(slot, -1, set(), which)

    def throughputs_without_each(self, slot: SlotPlacement, changes: Sequence[Change]) -> list[np.ndarray]:
        # interference depends on who shares a server, not on how many tasks: only the nodes left matter
        return [self._without(slot, job, gone, which) for job, _, gone, which in changes]

    def _without(self, slot: SlotPlacement, job: int, gone: set[int], which: Sequence[int]) -> np.ndarray:
        placed = slot.placed
        values = np.array([self.speed.placed_throughput(*placed[i]) for i in which], dtype=float)
        if self.interference is None:
            return values
        interference = self.interference
        table = interference.table
        kinds = [interference.type_index(spec) for spec, _ in placed]
        for position, victim in enumerate(which):
            row = table[kinds[victim]]
            factor = 1.0
            for node in slot.nodes_of(victim):
                for other in slot.jobs_on(node):
                    if other != victim and not (other == job and node in gone):
                        factor = max(factor, row[kinds[other]])
            values[position] /= factor
        return values


class PredictedSimulation(Simulation):
    """The simulator with each job's speed taken from a speed source (noise and everything else unchanged)."""

    def __init__(self, workload: Workload, config: SimConfig, speed: SpeedModel, source: SpeedSource) -> None:
        """`speed`: what oracle schedulers (Optimus) consult; the jobs themselves run at `source`'s speeds."""
        super().__init__(workload, replace(config, interference=False), speed, None)
        self.source = source
        self._speeds: dict[int, float] = {}
        self._stale = True

    def _noiseless_throughputs(self, active: list[int], moved: list[int]) -> list[float]:
        # speeds change only when a job's servers or its neighbours change: some job moved, started, stopped or left
        if moved or self._finished_since or self._stale:
            specs, allocation = self.specs, self.allocation
            running = [i for i in active if runnable(specs[i], allocation[i])]
            slot = SlotPlacement([(specs[i], allocation[i]) for i in running], self.cluster)
            values = self.source.throughputs(slot, range(len(running)))
            self._speeds = dict(zip(running, values.tolist(), strict=True))
            self._finished_since = []
            self._stale = False
        speeds = self._speeds
        return [speeds.get(i, 0.0) for i in active]


def runnable(spec: JobSpec, allocation: JobAllocation) -> bool:
    """A job makes progress with workers, and with a PS too unless it is all-reduce."""
    return allocation.num_workers > 0 and (spec.architecture is Architecture.ALLREDUCE or allocation.num_ps > 0)
