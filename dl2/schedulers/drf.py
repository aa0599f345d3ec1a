"""Dominant Resource Fairness (Ghodsi et al., NSDI'11), as DL2's baseline.

Every slot all jobs start at share 0; repeatedly the job with the smallest dominant share (ties: earlier
arrival, then workload order) receives one worker+PS bundle, until it reaches its cap or a request fails.

Jobs with the same demands gain the same share per bundle, so at equal counts they tie and take turns in rank
order. The heap therefore holds one entry per such class (its next job) instead of one per job: the order of
grants is the same, and a cluster with thousands of jobs pays no log-of-jobs factor per bundle.

Realistic mode grants against the cluster's free capacity in total, so the outcome of the request stream can be
computed without it: `water_fill` walks the same order tier by tier (all classes whose next level has the same
share, their jobs in rank order) with the same float arithmetic, in a plain loop instead of a generator round
trip per bundle (a 100k-job cluster asks ~44k bundles per reallocation). A refused bundle ends its class: free
capacity only shrinks, so every later bundle of the same demand is refused too. A property test checks that it
gives the stream's counts.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Hashable
from itertools import chain

from dl2.core import ClusterView, JobSpec
from dl2.schedulers.base import HeuristicScheduler
from dl2.schedulers.requests import Counts, Demand, RequestStream, Role, RoleDemands, below_caps, bundle_caps


class DRF(HeuristicScheduler):
    name = "drf"
    gives_bundles_to_caps = True

    def decision_key(self, view: ClusterView) -> Hashable:
        # every job starts each slot at share 0: only which jobs are active matters, not their progress
        return tuple(job.spec.job_id for job in view.jobs)

    def direct_counts(self, view: ClusterView, demands: list[RoleDemands]) -> Counts | None:
        return self.water_fill(view, demands, self._smallest)

    def requests(self, view: ClusterView, counts: Counts) -> RequestStream:
        totals = _totals(view)
        jobs = view.jobs
        demands = [(job.spec.worker_demand.as_tuple(), job.spec.ps_demand.as_tuple()) for job in jobs]
        # an all-reduce job (no PS) is capped by its workers only
        caps = [(job.spec.max_workers, job.spec.max_ps if job.spec.max_ps > 0 else math.inf) for job in jobs]
        members = _classes(view, demands)
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
            heapq.heapreplace(heap, (_share(workers, ps, demands[front], totals), front, index))

    def reset(self) -> None:
        super().reset()
        self._fill_info: dict[str, tuple[Hashable | None, int, bool]] = {}

    def water_fill(self, view: ClusterView, demands: list[RoleDemands], smallest: tuple[float, float, float]) -> Counts:
        """The per-job counts that `requests` run through `fill.fill_with_placer` gives (realistic mode);
        `demands` and `smallest` as that mechanism takes them."""
        totals = _totals(view)
        jobs = view.jobs
        num_jobs = len(jobs)
        # per job, fixed for the run: its class key (None: no bundle at all), bundle cap and whether it has PS
        info = self._fill_info
        classes: dict[Hashable, list[int]] = {}
        caps = [0] * num_jobs
        has_ps = [False] * num_jobs
        for rank, job in enumerate(jobs):
            entry = info.get(job.spec.job_id)
            if entry is None:
                entry = info[job.spec.job_id] = _fill_entry(job.spec, (demands[rank][0], demands[rank][1]), totals)
            key, caps[rank], has_ps[rank] = entry
            if key is not None:
                classes.setdefault(rank if key is _WEIGHTLESS else key, []).append(rank)
        members = list(classes.values())  # per class: its jobs at its current level, in rank order
        weightless = [not isinstance(key, tuple) for key in classes]
        bundles = [demands[ranks[0]][Role.BUNDLE] for ranks in members]
        pairs = [(demands[ranks[0]][0], demands[ranks[0]][1]) for ranks in members]
        class_of = [0] * num_jobs
        for index, ranks in enumerate(members):
            for rank in ranks:
                class_of[rank] = index
        refused = [False] * len(members)
        workers = [0] * num_jobs  # bundles granted: a job's PS count is the same, or 0 without PS
        free_g, free_c, free_m = view.cluster.total_capacity.as_tuple()
        low_g, low_c, low_m = smallest
        heap = [(0.0, index) for index in range(len(members))]
        heapq.heapify(heap)
        while heap:
            share = heap[0][0]
            tier = []
            while heap and heap[0][0] == share:
                tier.append(heapq.heappop(heap)[1])
            # the classes of a tier take turns in rank order, as the stream's heap of (share, rank) has them
            order = members[tier[0]] if len(tier) == 1 else sorted(chain.from_iterable(members[i] for i in tier))
            advanced: dict[int, list[int]] = {index: [] for index in tier}
            for rank in order:
                index = class_of[rank]
                if refused[index]:
                    continue  # free capacity only shrinks: the class's later bundles are refused too
                gpu, cpu, mem = bundles[index]
                while True:  # one bundle; a weightless job keeps the lowest share, so it takes all in a row
                    if not (gpu <= free_g and cpu <= free_c and mem <= free_m):
                        refused[index] = True
                        break
                    free_g -= gpu
                    free_c -= cpu
                    free_m -= mem
                    count = workers[rank] = workers[rank] + 1
                    if free_g < low_g or free_c < low_c or free_m < low_m:
                        return _counts(workers, has_ps)  # nothing can be granted any more
                    if count >= caps[rank]:
                        break
                    if not weightless[index]:
                        advanced[index].append(rank)
                        break
            for index in tier:
                if refused[index] or not advanced[index]:
                    continue
                members[index] = ranks = advanced[index]
                count = workers[ranks[0]]  # the class's jobs now hold equal counts: its next level
                heapq.heappush(heap, (_share(count, count if has_ps[ranks[0]] else 0, pairs[index], totals), index))
        return _counts(workers, has_ps)


_WEIGHTLESS = "weightless"
"""`_fill_entry`'s class key of a job whose bundle adds no share (a class of its own, keyed by its rank)."""


def _fill_entry(
    spec: JobSpec, pair: tuple[Demand, Demand], totals: tuple[float, float, float]
) -> tuple[Hashable | None, int, bool]:
    """A job's class key (None when it cannot take a bundle; `_WEIGHTLESS` for a class of its own), its bundle
    cap and whether it has PS. A class holds the jobs of equal bundle weight: equal demands, and both with or
    both without PS."""
    cap = bundle_caps(spec)[0]
    has_ps = spec.max_ps > 0
    if not below_caps(spec, 0, 0):
        return None, cap, has_ps
    (wg, wc, wm), (pg, pc, pm) = pair
    g_total, c_total, m_total = totals
    weightless = (wg + pg) / g_total == (wc + pc) / c_total == (wm + pm) / m_total == 0.0
    return (_WEIGHTLESS if weightless else (pair, has_ps)), cap, has_ps


def _counts(workers: list[int], has_ps: list[bool]) -> Counts:
    return [[count, count if with_ps else 0] for count, with_ps in zip(workers, has_ps, strict=True)]


def _share(workers: int, ps: int, pair: tuple[Demand, Demand], totals: tuple[float, float, float]) -> float:
    """A job's dominant share holding these tasks. The same arithmetic as the authors' code, (w * worker +
    p * ps) / total, so that ties break the same way in `requests` and `water_fill`."""
    (wg, wc, wm), (pg, pc, pm) = pair
    g_total, c_total, m_total = totals
    return max(
        (workers * wg + ps * pg) / g_total, (workers * wc + ps * pc) / c_total, (workers * wm + ps * pm) / m_total
    )


def _totals(view: ClusterView) -> tuple[float, float, float]:
    """The cluster's capacity per resource; a resource it lacks contributes no share (dividing by infinity)."""
    g_total, c_total, m_total = (t if t > 0 else math.inf for t in view.cluster.total_capacity.as_tuple())
    return g_total, c_total, m_total


def _classes(view: ClusterView, demands: list[tuple[Demand, Demand]]) -> dict[Hashable, list[int]]:
    """Ranks (in order) of the jobs below their caps per class of equal bundle weight (`_fill_entry`). A job whose
    bundle adds no share is a class of its own, keyed by its rank (it keeps the lowest share while it grows, so it
    must take its bundles in a row, as a heap of jobs does)."""
    totals = _totals(view)
    members: dict[Hashable, list[int]] = {}
    for rank, job in enumerate(view.jobs):
        key = _fill_entry(job.spec, demands[rank], totals)[0]
        if key is not None:
            members.setdefault(rank if key is _WEIGHTLESS else key, []).append(rank)
    return members
