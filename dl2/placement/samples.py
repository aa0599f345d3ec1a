"""Samples of the speed-prediction model: placements and the speeds observed with them.

The source is the decision log (`DecisionRecord`, one per job per slot, with the applied placement): the
records of one slot say which jobs shared which servers, and a job's observed progress over the slot is its
speed, observed_epochs x samples_per_epoch / slot_s. A record counts when the speed is that of a whole slot at
one placement: the job had the same placement in the previous slot (no rescale pause in this one) and is still
there in the next (it did not finish part-way). The same records come from a real cluster's controller or from
the simulator (`record_run`); the interference the simulator applies stays inside it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dl2.core import Allocation, ClusterSpec, DecisionRecord, JobAllocation, Scheduler, Workload, drawn_propensities
from dl2.placement.features import Encoded, Placed, SlotPlacement
from dl2.schedulers.placement import Placer
from dl2.sim.config import SimConfig
from dl2.sim.decision_log import decision_record
from dl2.sim.simulator import Simulation
from dl2.workload.calibration import is_steady, nodes_of
from dl2.workload.interference import InterferenceModel
from dl2.workload.speed import SpeedModel


@dataclass(frozen=True, slots=True)
class SpeedSamples:
    """Encoded placements with the logarithm of the observed throughput (samples/s)."""

    encoded: Encoded
    log_throughput: np.ndarray
    """(num_samples,) float64."""
    group: np.ndarray
    """(num_samples,) int64: which run (workload and seed) a sample comes from, for held-out splits."""
    placer: tuple[str, ...]
    """Per sample, the placer of its run ('' when unknown)."""
    slots: int = 0
    """Slots the logs behind the samples cover (the simulator steps they cost)."""

    def __len__(self) -> int:
        return len(self.log_throughput)

    @classmethod
    def concatenate(cls, parts: Sequence[SpeedSamples]) -> SpeedSamples:
        return cls(
            Encoded.concatenate([part.encoded for part in parts]),
            np.concatenate([part.log_throughput for part in parts]) if parts else np.zeros(0),
            np.concatenate([part.group for part in parts]) if parts else np.zeros(0, np.int64),
            tuple(name for part in parts for name in part.placer),
            sum(part.slots for part in parts),
        )

    def subset(self, rows: np.ndarray) -> SpeedSamples:
        return SpeedSamples(
            self.encoded.subset(rows), self.log_throughput[rows], self.group[rows], tuple(self.placer[i] for i in rows)
        )


def record_run(
    workload: Workload,
    scheduler: Scheduler,
    config: SimConfig,
    speed: SpeedModel,
    interference: InterferenceModel | None,
    on_slot: Callable[[Simulation], None] | None = None,
) -> list[DecisionRecord]:
    """Simulate `workload` under `scheduler` and return its decision log (mode 'simulated', placements included)."""
    simulation = Simulation(workload, config, speed, interference)
    scheduler.reset()
    records: list[DecisionRecord] = []
    while not simulation.done:
        view = simulation.begin_slot()
        allocation = scheduler.schedule(view)
        outcome = simulation.apply(allocation)
        drawn = drawn_propensities(scheduler)
        for job in view.jobs:
            placed = allocation.get(job.spec.job_id)
            records.append(
                decision_record(
                    view,
                    job,
                    placed,
                    placed,
                    (placed.num_workers, placed.num_ps),
                    scheduler.name,
                    scheduler.name,
                    "simulated",
                    outcome.progress_epochs.get(job.spec.job_id, 0.0),
                    worker_nodes=placed.worker_nodes,
                    ps_nodes=placed.ps_nodes,
                    propensity=drawn.get(job.spec.job_id, 1.0),
                )
            )
        if on_slot is not None:
            on_slot(simulation)
    return records


def samples_from_records(
    records: Sequence[DecisionRecord], cluster: ClusterSpec, group: int = 0, placer: str = "", every: int = 1
) -> SpeedSamples:
    """The samples of one cluster's log: every steady record of every `every`-th slot (`every` thins out
    samples of consecutive slots, which are nearly copies of each other)."""
    by_slot: dict[float, list[DecisionRecord]] = defaultdict(list)
    for record in records:
        if record.cluster != cluster.name:
            raise ValueError(f"a record of cluster {record.cluster!r} in a log of {cluster.name!r}")
        by_slot[record.time_s].append(record)
    times = sorted(by_slot)
    placements = [{r.job_id: nodes_of(r) for r in by_slot[t]} for t in times]
    parts: list[Encoded] = []
    targets: list[float] = []
    for k in range(1, len(times) - 1, every):
        slot_records = by_slot[times[k]]
        placed: list[Placed] = []
        chosen: list[int] = []
        for record in slot_records:
            nodes = placements[k][record.job_id]
            if not nodes[0]:
                continue
            if is_steady(record, nodes, placements[k - 1], placements[k + 1], times[k] - times[k - 1]):
                chosen.append(len(placed))
                targets.append(math.log(record.observed_epochs * record.samples_per_epoch / record.slot_s))
            placed.append((record.job_spec(), JobAllocation(*nodes)))
        if chosen:
            parts.append(SlotPlacement(placed, cluster).encode(chosen))
    encoded = Encoded.concatenate(parts)
    return SpeedSamples(
        encoded, np.array(targets), np.full(len(targets), group, dtype=np.int64), (placer,) * len(targets), len(times)
    )


def allocation_of(records: Sequence[DecisionRecord]) -> Allocation:
    """The applied allocation that one slot's records describe."""
    return Allocation({r.job_id: JobAllocation(*nodes_of(r)) for r in records if r.applied_worker_nodes})


@dataclass(frozen=True, slots=True)
class LoggedRun:
    """One logged run: a workload (source and seed) under an allocation policy and a placer."""

    source: str
    seed: int
    scheduler: str
    placer: str
    """A placer name, 'mixed' (`dl2.placement.mixing`) or a Harmony placer folder."""


def log_samples(run: LoggedRun, group: int, every: int = 2) -> SpeedSamples:
    """Simulate `run` in realistic mode (its seed also seeds the simulation) and turn its log into samples."""
    from dl2.placement.mixing import MixedPlacer
    from dl2.schedulers.registry import PLACERS, SCHEDULERS
    from dl2.sim.run import interference_model, speed_model
    from dl2.workload.source import workload

    config = SimConfig.realistic(run.seed)
    speed = speed_model(config.mode)
    placer: Placer
    if run.placer == "mixed":
        placer = MixedPlacer(run.seed)
    elif run.placer in PLACERS:
        placer = PLACERS[run.placer]()
    else:  # a Harmony placer folder
        from dl2.placement.policy import HarmonyPlacer

        placer = HarmonyPlacer.from_dir(run.placer)
    job_workload = workload(run.source, run.seed)
    records = record_run(
        job_workload, SCHEDULERS[run.scheduler](speed, False, placer), config, speed, interference_model()
    )
    return samples_from_records(records, job_workload.cluster, group, run.placer, every)


def collect(
    runs: Sequence[LoggedRun], every: int = 2, on_run: Callable[[LoggedRun], None] | None = None
) -> SpeedSamples:
    """The samples of every run, each run its own group."""
    parts = []
    for group, run in enumerate(runs):
        parts.append(log_samples(run, group, every))
        if on_run is not None:
            on_run(run)
    return SpeedSamples.concatenate(parts)


def relative_errors(predicted_log: np.ndarray, observed_log: np.ndarray) -> np.ndarray:
    """|predicted - observed| / observed per sample, from the logarithms of both."""
    result: np.ndarray = np.abs(np.expm1(predicted_log - observed_log))
    return result
