"""Tiresias (Gu et al., NSDI'19): discretised two-dimensional least-attained-service, no duration knowledge.

A job's attained service is GPUs x time received so far. Jobs sit in priority queues by attained service
(thresholds `queue_thresholds_gpu_s`); higher queues go first and, within a queue, earlier arrivals. Each job
is gang-scheduled with exactly the workers and PS it requested, or not at all this slot; a job that does not
fit is skipped and later ones may run (work conservation). Allocations are recomputed every slot, so a job
demoted below newer ones is preempted. Placement is the configured placer, sticky across slots.
"""

from __future__ import annotations

from dl2.core import Allocation, ClusterView
from dl2.schedulers.load_balance import LoadBalancePlacer
from dl2.schedulers.placement import Placer, place_sticky

DEFAULT_THRESHOLDS_GPU_S = (3_600.0, 36_000.0)
"""Queue boundaries: under 1 GPU-hour, under 10 GPU-hours, the rest (Tiresias §4 uses a few coarse queues)."""


class Tiresias:
    name = "tiresias"

    def __init__(
        self, placer: Placer | None = None, queue_thresholds_gpu_s: tuple[float, ...] = DEFAULT_THRESHOLDS_GPU_S
    ) -> None:
        self.placer = placer or LoadBalancePlacer()
        self.thresholds = tuple(sorted(queue_thresholds_gpu_s))

    def reset(self) -> None:
        pass

    def _queue(self, attained_gpu_s: float) -> int:
        return sum(attained_gpu_s >= threshold for threshold in self.thresholds)

    def schedule(self, view: ClusterView) -> Allocation:
        jobs = view.jobs
        order = sorted(
            range(len(jobs)), key=lambda r: (self._queue(jobs[r].attained_service_gpu_s), jobs[r].spec.arrival_s, r)
        )
        free = list(view.cluster.total_capacity.as_tuple())
        targets = [(0, 0)] * len(jobs)
        for rank in order:
            spec = jobs[rank].spec
            workers, ps = spec.requested_workers, spec.requested_ps
            need = [
                workers * w + ps * p
                for w, p in zip(spec.worker_demand.as_tuple(), spec.ps_demand.as_tuple(), strict=True)
            ]
            if all(n <= f + 1e-9 for n, f in zip(need, free, strict=True)):
                free = [f - n for f, n in zip(free, need, strict=True)]
                targets[rank] = (workers, ps)
        return place_sticky(view, targets, self.placer)
