"""Shortest remaining processing time first, each job sized at the knee of its speed curve (ours).

For each job type the speed function gives, for every task count, the fastest (PS, workers) split; the knee is
the smallest task count reaching `efficiency` x the job's best speed: beyond it, extra tasks buy little.
Jobs are served in order of remaining time at their knee (SRPT, which minimises average completion time on one
machine), each up to its knee configuration. In compatibility mode a job's workers are requested before its
PS: the authors' least-loaded placement otherwise fills servers' CPUs with PS tasks, and a CPU-full server
with little load then blocks every later task. Like Optimus, it uses the simulator's speed function (an oracle).

`srpt-knee-fill` adds a second pass: once every job has asked for its knee, jobs are topped up in the same SRPT
order towards the configuration reaching `fill_efficiency` of their best speed. A cluster that the knees leave
partly idle (the tail of a workload, or between arrivals) then speeds up the shortest jobs instead of idling.

`srpt-knee-ladder` fills in several passes, every job a step at a time: after the knees, jobs are topped up in
SRPT order towards each of `LADDER_FILLS` of their best speed in turn. Climbing in steps shares what the knees
leave among more jobs before the shortest take it all, the way optimal schedules for jobs with concave speed-ups
give every job a share that grows as it nears the front of the queue (heSRPT: Berg, Vesilo & Harchol-Balter,
SIGMETRICS 2020).

Every level here was chosen on the validation workloads `authors-small` seeds 5000-5009, never on test
workloads; the candidates and their figures are in `docs/results.md`.
"""

from __future__ import annotations

from functools import cache

from dl2.core import Architecture, ClusterView, JobSpec
from dl2.schedulers.base import HeuristicScheduler
from dl2.schedulers.placement import Placer
from dl2.schedulers.requests import Counts, RequestStream, Role
from dl2.workload.speed import SpeedModel

DEFAULT_EFFICIENCY = 0.7
FILL_KNEE_EFFICIENCY = 0.6
"""The knee of `srpt-knee-fill` (its first pass)."""
DEFAULT_FILL_EFFICIENCY = 0.9
LADDER_FILLS = (0.7, 0.8, 0.9, 1.0)
"""The fill levels of `srpt-knee-ladder`, climbed one pass each after the knees (at `FILL_KNEE_EFFICIENCY`)."""


class SRPTKnee(HeuristicScheduler):
    name = "srpt-knee"

    def __init__(
        self,
        speed: SpeedModel,
        compat: bool = False,
        placer: Placer | None = None,
        efficiency: float = DEFAULT_EFFICIENCY,
        fill_efficiency: tuple[float, ...] = (),
    ) -> None:
        """`fill_efficiency`: the target of each pass after the knees, in order: none for `srpt-knee`, one for
        `srpt-knee-fill`, several for `srpt-knee-ladder`."""
        super().__init__(compat, placer)
        fills = tuple(fill_efficiency)
        for name, value in (("efficiency", efficiency), *(("fill_efficiency", fill) for fill in fills)):
            if not 0 < value <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {value}")
        self.speed = speed
        self.efficiency = efficiency
        self.fills = fills
        self.name = "srpt-knee" if not fills else "srpt-knee-fill" if len(fills) == 1 else "srpt-knee-ladder"
        self._knee = cache(self._find_knee)

    def _find_knee(
        self, model: str, architecture: Architecture, max_workers: int, max_ps: int, efficiency: float
    ) -> tuple[int, int, float]:
        """(PS, workers, throughput) of the fewest tasks reaching `efficiency` x this job type's best speed
        within its caps."""
        fastest: dict[int, tuple[float, int, int]] = {}
        ps_range = range(1, max_ps + 1) if architecture is Architecture.PS else range(0, 1)
        for ps in ps_range:
            for workers in range(1, max_workers + 1):
                throughput = self.speed.throughput(model, ps, workers)
                tasks = ps + workers
                if tasks not in fastest or throughput > fastest[tasks][0]:
                    fastest[tasks] = (throughput, ps, workers)
        best = max(entry[0] for entry in fastest.values())
        tasks = min(t for t, entry in fastest.items() if entry[0] >= efficiency * best)
        throughput, ps, workers = fastest[tasks]
        return ps, workers, throughput

    def knee(self, spec: JobSpec, efficiency: float | None = None) -> tuple[int, int, float]:
        """(PS, workers, throughput) at the knee (or at `efficiency` of the best speed, if given)."""
        target = self.efficiency if efficiency is None else efficiency
        return self._knee(spec.model, spec.architecture, spec.max_workers, spec.max_ps, target)

    def requests(self, view: ClusterView, counts: Counts) -> RequestStream:
        plan = []
        for rank, job in enumerate(view.jobs):
            ps, workers, throughput = self.knee(job.spec)
            remaining_s = (
                job.remaining_epochs * job.spec.samples_per_epoch / throughput if throughput > 0 else float("inf")
            )
            plan.append((remaining_s, job.spec.arrival_s, rank, ps, workers))
        plan.sort()
        for _, _, rank, ps, workers in plan:
            yield from self._up_to(view, counts, rank, ps, workers)
        for fill in self.fills:
            for _, _, rank, _, _ in plan:
                ps, workers, _ = self.knee(view.jobs[rank].spec, fill)
                yield from self._up_to(view, counts, rank, ps, workers)

    def _up_to(self, view: ClusterView, counts: Counts, rank: int, ps: int, workers: int) -> RequestStream:
        """Requests that take job `rank` up to `workers` and `ps` (each role stops at its first refusal)."""
        has_ps = view.jobs[rank].spec.architecture is Architecture.PS
        if not self.compat and has_ps:
            while counts[rank][0] < workers and counts[rank][1] < ps:
                if not (yield rank, Role.BUNDLE):
                    break
        while counts[rank][0] < workers:
            if not (yield rank, Role.WORKER):
                break
        while has_ps and counts[rank][1] < ps:
            if not (yield rank, Role.PS):
                break
