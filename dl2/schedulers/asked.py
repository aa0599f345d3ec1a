"""Asked sizes: every job runs with the workers and PS it was submitted with, as on a cluster with no scheduler
that resizes jobs.

This is what a cluster does when dl2 is off or in shadow mode: the cluster twin (`testbed.twin.cluster`) places what
each job's object asks for with `place_sticky`, in arrival order, and what fits nowhere stays Pending. It is the
row a resizing scheduler has to beat for turning it on to pay.
"""

from __future__ import annotations

from dl2.core import Allocation, Architecture, ClusterView
from dl2.schedulers.load_balance import LoadBalancePlacer
from dl2.schedulers.placement import Placer, place_sticky


class AskedSizes:
    name = "asked-sizes"

    def __init__(self, placer: Placer | None = None) -> None:
        self.placer = placer or LoadBalancePlacer()

    def reset(self) -> None:
        pass

    def schedule(self, view: ClusterView) -> Allocation:
        targets = []
        for job in view.jobs:
            spec = job.spec
            ps = min(spec.requested_ps, spec.max_ps) if spec.architecture is Architecture.PS else 0
            targets.append((min(spec.requested_workers, spec.max_workers), ps))
        return place_sticky(view, targets, self.placer)
