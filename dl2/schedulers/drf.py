"""Dominant Resource Fairness (Ghodsi et al., NSDI'11), as DL2's baseline.

Every slot all jobs start at share 0; repeatedly the job with the smallest dominant share (ties: earlier
arrival, then workload order) receives one worker+PS bundle, until it reaches its cap or a request fails.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable

from dl2.core import ClusterView
from dl2.schedulers.base import HeuristicScheduler
from dl2.schedulers.requests import Counts, RequestStream, Role, below_caps


class DRF(HeuristicScheduler):
    name = "drf"
    gives_bundles_to_caps = True

    def decision_key(self, view: ClusterView) -> Hashable:
        # every job starts each slot at share 0: only which jobs are active matters, not their progress
        return tuple(job.spec.job_id for job in view.jobs)

    def requests(self, view: ClusterView, counts: Counts) -> RequestStream:
        # a resource the cluster lacks contributes no share: dividing by infinity gives 0
        g_total, c_total, m_total = (t if t > 0 else math.inf for t in view.cluster.total_capacity.as_tuple())
        jobs = view.jobs
        demands = [(job.spec.worker_demand.as_tuple(), job.spec.ps_demand.as_tuple()) for job in jobs]
        # an all-reduce job (no PS) is capped by its workers only
        caps = [(job.spec.max_workers, job.spec.max_ps if job.spec.max_ps > 0 else math.inf) for job in jobs]
        heap = [(0.0, rank) for rank, job in enumerate(jobs) if below_caps(job.spec, 0, 0)]
        bundle = Role.BUNDLE
        while heap:
            rank = heap[0][1]
            granted = yield rank, bundle
            workers, ps = counts[rank]
            max_workers, max_ps = caps[rank]
            if not granted or workers >= max_workers or ps >= max_ps:
                heapq.heappop(heap)
                continue
            (wg, wc, wm), (pg, pc, pm) = demands[rank]
            # the same arithmetic as theirs, (w * worker + p * ps) / total, so ties break the same way
            share = max(
                (workers * wg + ps * pg) / g_total,
                (workers * wc + ps * pc) / c_total,
                (workers * wm + ps * pm) / m_total,
            )
            heapq.heapreplace(heap, (share, rank))
