"""Dominant Resource Fairness (Ghodsi et al., NSDI'11), as DL2's baseline.

Every slot all jobs start at share 0; repeatedly the job with the smallest dominant share (ties: earlier
arrival, then workload order) receives one worker+PS bundle, until it reaches its cap or a request fails.

Jobs with the same demands gain the same share per bundle, so at equal counts they tie and take turns in rank
order. The heap therefore holds one entry per such class (its next job) instead of one per job: the order of
grants is the same, and a cluster with thousands of jobs pays no log-of-jobs factor per bundle.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
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
        # classes of jobs whose bundles weigh the same; a job whose bundle adds no share is a class of its own
        # (it keeps the lowest share while it grows, so it must take its bundles in a row, as a heap of jobs does)
        members: dict[Hashable, list[int]] = {}
        for rank, job in enumerate(jobs):
            if below_caps(job.spec, 0, 0):
                (wg, wc, wm), (pg, pc, pm) = demands[rank]
                weightless = (wg + pg) / g_total == (wc + pc) / c_total == (wm + pm) / m_total == 0.0
                members.setdefault(rank if weightless else demands[rank], []).append(rank)
        # per class: ranks at its current count (in rank order) and those that took a bundle at that count
        levels = [(deque(ranks), list[int]()) for ranks in members.values()]
        heap = [(0.0, ranks[0], index) for index, ranks in enumerate(members.values())]
        heapq.heapify(heap)
        bundle = Role.BUNDLE
        while heap:
            _, rank, index = heap[0]
            granted = yield rank, bundle
            current, advanced = levels[index]
            current.popleft()
            workers, ps = counts[rank]
            max_workers, max_ps = caps[rank]
            if granted and workers < max_workers and ps < max_ps:
                advanced.append(rank)
            if not current:
                if not advanced:
                    heapq.heappop(heap)
                    continue
                current = deque(advanced)
                levels[index] = (current, [])
            front = current[0]
            workers, ps = counts[front]
            (wg, wc, wm), (pg, pc, pm) = demands[front]
            # the same arithmetic as theirs, (w * worker + p * ps) / total, so ties break the same way
            share = max(
                (workers * wg + ps * pg) / g_total,
                (workers * wc + ps * pc) / c_total,
                (workers * wm + ps * pm) / m_total,
            )
            heapq.heapreplace(heap, (share, front, index))
