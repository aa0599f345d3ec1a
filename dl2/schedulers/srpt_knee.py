"""Shortest remaining processing time first, each job sized at the knee of its speed curve (ours).

For each job type the speed function gives, for every task count, the fastest (PS, workers) split; the knee is
the smallest task count reaching `efficiency` x the job's best speed: beyond it, extra tasks buy little.
Jobs are served in order of remaining time at their knee (SRPT, which minimises average completion time on one
machine), each up to its knee configuration. In compatibility mode a job's workers are requested before its
PS: the authors' least-loaded placement otherwise fills servers' CPUs with PS tasks, and a CPU-full server
with little load then blocks every later task. Like Optimus, it uses the simulator's speed function (an oracle).
`efficiency` was chosen on validation workloads (`benchmarks/`), never on test workloads.
"""

from __future__ import annotations

from functools import cache

from dl2.core import Architecture, ClusterView, JobSpec
from dl2.schedulers.base import HeuristicScheduler
from dl2.schedulers.placement import Placer
from dl2.schedulers.requests import Counts, RequestStream, Role
from dl2.workload.speed import SpeedModel

DEFAULT_EFFICIENCY = 0.7


class SRPTKnee(HeuristicScheduler):
    name = "srpt-knee"

    def __init__(
        self,
        speed: SpeedModel,
        compat: bool = False,
        placer: Placer | None = None,
        efficiency: float = DEFAULT_EFFICIENCY,
    ) -> None:
        super().__init__(compat, placer)
        if not 0 < efficiency <= 1:
            raise ValueError(f"efficiency must be in (0, 1], got {efficiency}")
        self.speed = speed
        self.efficiency = efficiency
        self._knee = cache(self._find_knee)

    def _find_knee(
        self, model: str, architecture: Architecture, max_workers: int, max_ps: int
    ) -> tuple[int, int, float]:
        """(PS, workers, throughput) at the knee of this job type's speed curve within its caps."""
        fastest: dict[int, tuple[float, int, int]] = {}
        ps_range = range(1, max_ps + 1) if architecture is Architecture.PS else range(0, 1)
        for ps in ps_range:
            for workers in range(1, max_workers + 1):
                throughput = self.speed.throughput(model, ps, workers)
                tasks = ps + workers
                if tasks not in fastest or throughput > fastest[tasks][0]:
                    fastest[tasks] = (throughput, ps, workers)
        best = max(entry[0] for entry in fastest.values())
        tasks = min(t for t, entry in fastest.items() if entry[0] >= self.efficiency * best)
        throughput, ps, workers = fastest[tasks]
        return ps, workers, throughput

    def knee(self, spec: JobSpec) -> tuple[int, int, float]:
        return self._knee(spec.model, spec.architecture, spec.max_workers, spec.max_ps)

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
