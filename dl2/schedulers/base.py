"""The shared shape of the heuristic schedulers: a policy (request stream) plus a mechanism per mode."""

from __future__ import annotations

import math
from collections.abc import Hashable

from dl2.core import Allocation, ClusterView
from dl2.schedulers.fill import fill_first_failure, fill_with_placer
from dl2.schedulers.load_balance import LoadBalancePlacer
from dl2.schedulers.placement import Placer, place_sticky
from dl2.schedulers.requests import Counts, Demand, RequestStream, RoleDemands, bundle_caps, role_demands


class HeuristicScheduler:
    """Subclasses implement `requests`; this class runs it through the mode's mechanism.

    `compat=True` selects the authors' mechanism (least-loaded server, stop at the first failure);
    otherwise requests are granted against free capacity and placed by `placer`, sticky across slots.
    """

    name = "heuristic"
    gives_bundles_to_caps = False
    """True for policies whose requests are bundles, each job asking until `below_caps` fails (DRF, FIFO,
    SRTF): when every job's bundles fit the cluster at once, the order does not matter and realistic mode
    skips the request stream (on a big cluster that is most slots once arrivals stop)."""
    placement_speed: object | None = None
    """The speed model placement reads a job's per-accelerator-type speeds from (`place_sticky`'s `speed`): set by
    the policies that read speeds (Optimus, `speedup-hull`), so that one handed a calibration or a truth places on
    the types those say, not the profile's; None (the type-agnostic ones): the profile's."""

    def __init__(self, compat: bool = False, placer: Placer | None = None) -> None:
        self.compat = compat
        self.placer = placer or LoadBalancePlacer()
        self.reset()

    def reset(self) -> None:
        """Forget what the last run cached (subclasses extend it with their own per-run state)."""
        self._memo_key: Hashable | None = None
        self._memo: Allocation | None = None
        self._demands: dict[str, RoleDemands] = {}
        self._smallest: tuple[float, float, float] = (math.inf, math.inf, math.inf)
        self._at_caps: dict[str, tuple[tuple[int, int], Demand]] = {}

    def _targets_if_all_fit(self, view: ClusterView) -> list[tuple[int, int]] | None:
        """Every job's bundle caps, if together they fit the cluster's total capacity (else None)."""
        cache = self._at_caps
        targets = []
        gpu, cpu, mem = view.cluster.total_capacity.as_tuple()
        for job in view.jobs:
            entry = cache.get(job.spec.job_id)
            if entry is None:
                workers, ps = bundle_caps(job.spec)
                (wg, wc, wm), (pg, pc, pm) = role_demands(job.spec)[:2]
                entry = cache[job.spec.job_id] = (
                    (workers, ps),
                    (workers * wg + ps * pg, workers * wc + ps * pc, workers * wm + ps * pm),
                )
            target, (need_gpu, need_cpu, need_mem) = entry
            gpu -= need_gpu
            cpu -= need_cpu
            mem -= need_mem
            # the request stream grants `demand <= free` without tolerance: so does this test (and what is left
            # only shrinks, so an overloaded cluster is known as soon as it shows)
            if gpu < 0.0 or cpu < 0.0 or mem < 0.0:
                return None
            targets.append(target)
        return targets

    def _role_demands(self, view: ClusterView) -> list[RoleDemands]:
        """Per rank, the job's worker/PS/bundle demands (computed once per job and run)."""
        cache = self._demands
        demands = []
        for job in view.jobs:
            entry = cache.get(job.spec.job_id)
            if entry is None:
                entry = cache[job.spec.job_id] = role_demands(job.spec)
                (wg, wc, wm), (pg, pc, pm) = entry[:2]
                sg, sc, sm = self._smallest
                self._smallest = (min(sg, wg, pg), min(sc, wc, pc), min(sm, wm, pm))
            demands.append(entry)
        return demands

    def requests(self, view: ClusterView, counts: Counts) -> RequestStream:
        raise NotImplementedError

    def direct_counts(self, view: ClusterView, demands: list[RoleDemands]) -> Counts | None:
        """Realistic mode: the counts the request stream would give, computed without it where a policy can
        (None: run the stream)."""
        return None

    def decision_key(self, view: ClusterView) -> Hashable | None:
        """What this slot's decision depends on besides the cluster and the previous allocation, if that is
        cheap to state (e.g. the ordered job ids for DRF, FIFO and SRTF); None when it depends on more.

        While the key and the previous allocation are unchanged, the last allocation is reused: a slot in
        which no job arrives or finishes costs almost nothing."""
        return None

    def schedule(self, view: ClusterView) -> Allocation:
        key = self.decision_key(view)
        if key is not None and key == self._memo_key and self._memo is view.previous:
            return self._memo
        if not self.compat and self.gives_bundles_to_caps:
            targets = self._targets_if_all_fit(view)
            if targets is not None:
                allocation = place_sticky(view, targets, self.placer, speed=self.placement_speed)
                self._memo_key, self._memo = key, allocation
                return allocation
        demands = self._role_demands(view)
        direct = None if self.compat else self.direct_counts(view, demands)
        counts: Counts = [[0, 0] for _ in view.jobs]
        if direct is not None:
            allocation = place_sticky(view, [(w, p) for w, p in direct], self.placer, speed=self.placement_speed)
        elif self.compat:
            allocation = fill_first_failure(view, self.requests(view, counts), counts, demands)
        else:
            allocation = fill_with_placer(
                view, self.requests(view, counts), counts, demands, self.placer, self._smallest, self.placement_speed
            )
        self._memo_key, self._memo = key, allocation
        return allocation
