"""Each job's own speed, learned online from its progress: a world corrected job by job.

A model world (the catalogue's speeds, or those a cluster's records calibrate) knows job types. A job can run
otherwise than its type: one whose input pipeline feeds a single worker stops gaining past it, whatever its type's
fit says (`dl2.truth.model.ScalingKnee` plays such jobs). Optimus as it really works (EuroSys'18 §4.2) and Pollux
(OSDI'21) fit each job's speed from its own observed progress; `JobFittedSpeedModel` does that in the
simplest way that changes a decision:

- each slot it reads what a deployment has of every active job, the throughput it showed in the previous slot
  (`JobView.last_throughput`) at the allocation it held, beside what the world predicts for that allocation;
- it keeps, per job and per worker count, the mean of observed / predicted, where the prediction includes the
  slowdown the world's interference model gives the servers the job shared (so a shortfall is the job's own, not
  its neighbours'); a slot beside a job that has since finished, whose type the view no longer shows, or any
  shared slot when no interference model is given, teaches it nothing;
- a mean within `TOLERANCE` of 1 is read as 1 (noise: the job runs as its type), one outside it is the job's
  correction at that worker count;
- a worker count never observed takes the correction of the largest observed count below it (a job that fell
  short at two workers is not expected to recover at three), and the world's prediction below every observed count.

So a job given two workers that runs 15% short of its type is predicted to run 15% short there, and a scheduler
reading the model (`dl2.rl.fitted_lookahead`) sees that its second worker buys nothing; had the job been slow at
any size instead, the next slot at one worker shows it, and the two corrections compare the sizes fairly again.
It reads observed throughputs only, never a truth. A job given many workers from its first slot shows a shortfall
there only, not where its knee is: the fit then expects it to run as its type at fewer, and the slots after, at
fewer, show where the knee is (growing jobs one worker at a time, as Optimus's marginal gains do, shows it soonest).
A job that never ran past its knee is never corrected: the fit learns a job only from the sizes it was given.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Protocol, runtime_checkable

from dl2.core import ClusterSpec, ClusterView, JobAllocation, JobSpec
from dl2.workload.accelerated_speed import PerAcceleratorSpeeds, on_accelerators
from dl2.workload.interference import InterferenceModel
from dl2.workload.speed import SpeedModel

TOLERANCE = 0.06
"""A job's mean observed / predicted throughput at a worker count departs from its type only beyond 1 ± this: the
simulator's speed noise is a uniform ±5%, so a job that runs as its type is never corrected."""


@runtime_checkable
class JobSpeedModel(SpeedModel, Protocol):
    """A speed model that may know a job otherwise than its type: what a job-aware scheduler reads."""

    def job_throughput(self, spec: JobSpec, num_ps: int, num_workers: int) -> float:
        """This job's throughput with this many PS and workers, placement ignored."""
        ...

    def job_key(self, spec: JobSpec) -> Hashable | None:
        """None where the job runs as its type (`throughput(spec.model, ...)` holds for it); else a value that
        changes whenever what the model knows of the job changes (a scheduler may cache per job under it)."""
        ...


class JobFittedSpeedModel:
    """`base`'s speeds, corrected per job and worker count by what each job's progress showed (module docstring)."""

    def __init__(
        self, base: SpeedModel, interference: InterferenceModel | None = None, tolerance: float = TOLERANCE
    ) -> None:
        """`base`: the world's speeds; `interference`: the world's interference (None: learn only from slots a job
        ran on servers of its own)."""
        self.base = base
        self.interference = interference
        self.tolerance = tolerance
        self._base_per_job = base if isinstance(base, JobSpeedModel) else None
        """`base` where it knows jobs too (checked once: a protocol check costs microseconds, and Optimus's greedy
        loop asks a speed hundreds of thousands of times a slot)."""
        self._base_per_type = base if isinstance(base, PerAcceleratorSpeeds) else None
        """`base` where it knows jobs per accelerator type (a calibration from records), which this model passes on."""
        self._placed: tuple[ClusterSpec, SpeedModel] | None = None
        """The last cluster observed and `base` on its accelerators (`on_accelerators`: `base` itself on a cluster
        of one type), what a job's observed speed is compared with."""
        self.reset()

    def reset(self) -> None:
        """Forget every job (a new run)."""
        self.observed: dict[str, dict[int, tuple[float, int]]] = {}
        """Job id -> worker count -> (sum of observed / predicted, observations)."""
        self.corrections: dict[str, tuple[tuple[int, float], ...]] = {}
        """Job id -> (worker count, correction) for every observed count, ascending; only jobs with a departure."""
        self.observations = 0
        """Observations used so far."""
        self.last_ratios: list[tuple[JobSpec, JobAllocation, float]] = []
        """The last `observe`'s (job, allocation it held, observed / predicted throughput), for what learns from the
        same ratios per server (`dl2.workload.node_fit`)."""

    def observe(self, view: ClusterView) -> int:
        """Learn from a slot boundary's view: each job that ran the previous slot (module docstring). Returns how
        many jobs it learned from."""
        specs = {job.spec.job_id: job.spec for job in view.jobs}
        holders: dict[int, set[str]] = {}
        held = [(job.spec.job_id, job.allocation) for job in view.jobs]
        for job_id, allocation in (*held, *view.previous.jobs.items()):  # previous: jobs that finished in it too
            for node in (*allocation.worker_nodes, *allocation.ps_nodes):
                holders.setdefault(node, set()).add(job_id)
        used = 0
        self.last_ratios = []
        world = self._on(view.cluster)
        for job in view.jobs:
            allocation = job.allocation
            if job.last_throughput <= 0 or not allocation.worker_nodes:
                continue
            nodes = {*allocation.worker_nodes, *allocation.ps_nodes}
            if all(len(holders[node]) == 1 for node in nodes):  # most jobs, under isolation: nothing to unite
                slowdown = 1.0
            else:
                neighbours = set().union(*(holders[node] for node in nodes))
                slowdown = self._slowdown(job.spec, neighbours - {job.spec.job_id}, specs)
            if slowdown == 0:
                continue
            predicted = world.placed_throughput(job.spec, allocation) / slowdown
            if predicted <= 0:
                continue
            ratio = job.last_throughput / predicted
            self.last_ratios.append((job.spec, allocation, ratio))
            samples = self.observed.setdefault(job.spec.job_id, {})
            total, count = samples.get(allocation.num_workers, (0.0, 0))
            samples[allocation.num_workers] = (total + ratio, count + 1)
            self._refit(job.spec.job_id)
            used += 1
        self.observations += used
        return used

    def _slowdown(self, victim: JobSpec, neighbours: set[str], specs: dict[str, JobSpec]) -> float:
        """The world's slowdown of a job by the jobs that shared its servers (the largest any of them inflicts, as
        the simulator plays it); 0 where it cannot be told (no interference model, or a neighbour since gone)."""
        if not neighbours:
            return 1.0
        if self.interference is None or not neighbours <= specs.keys():
            return 0.0
        row = self.interference.table[self.interference.type_index(victim)]
        return max(row[self.interference.type_index(specs[other])] for other in neighbours)

    def _refit(self, job_id: str) -> None:
        means = sorted((workers, total / count) for workers, (total, count) in self.observed[job_id].items())
        corrections = tuple((w, m if abs(m - 1.0) > self.tolerance else 1.0) for w, m in means)
        if any(c != 1.0 for _, c in corrections):
            self.corrections[job_id] = corrections
        else:
            self.corrections.pop(job_id, None)

    def _on(self, cluster: ClusterSpec) -> SpeedModel:
        """`base` on `cluster`'s accelerators: on a cluster of several types a job's speed depends on the types it
        ran on, which is no departure of the job's own (nor of a server's)."""
        if self._placed is None or self._placed[0] is not cluster:
            self._placed = (cluster, on_accelerators(self.base, cluster))
        return self._placed[1]

    def accelerator_speedups(self, spec: JobSpec) -> tuple[str, Mapping[str, float]]:
        """`base`'s per-type speedups of the job (`PerAcceleratorSpeeds`; none where it has none), so that on a
        cluster of several types the corrected world keeps what the records calibrated per type."""
        if self._base_per_type is None:
            return spec.model, {}
        return self._base_per_type.accelerator_speedups(spec)

    def correction(self, job_id: str, num_workers: int) -> float:
        """The factor on the world's throughput of this job at this many workers (module docstring)."""
        value = 1.0
        for workers, factor in self.corrections.get(job_id, ()):
            if workers > num_workers:
                break
            value = factor
        return value

    def throughput(self, model: str, num_ps: int, num_workers: int) -> float:
        """A type's throughput: the world's (what is learned is per job)."""
        return self.base.throughput(model, num_ps, num_workers)

    def placed_throughput(self, spec: JobSpec, allocation: JobAllocation) -> float:
        value = self.base.placed_throughput(spec, allocation)
        return value * self.correction(spec.job_id, allocation.num_workers) if value > 0 else value

    def job_throughput(self, spec: JobSpec, num_ps: int, num_workers: int) -> float:
        if self._base_per_job is not None:
            value = self._base_per_job.job_throughput(spec, num_ps, num_workers)
        else:
            value = self.base.throughput(spec.model, num_ps, num_workers)
        return value * self.correction(spec.job_id, num_workers)

    def job_key(self, spec: JobSpec) -> Hashable | None:
        corrections = self.corrections.get(spec.job_id)
        base_key = None if self._base_per_job is None else self._base_per_job.job_key(spec)
        if corrections is None and base_key is None:
            return None
        return (base_key, corrections)
