"""The shared shape of the heuristic schedulers: a policy (request stream) plus a mechanism per mode."""

from __future__ import annotations

from dl2.core import Allocation, ClusterView
from dl2.schedulers.fill import fill_first_failure, fill_with_placer
from dl2.schedulers.load_balance import LoadBalancePlacer
from dl2.schedulers.placement import Placer
from dl2.schedulers.requests import Counts, RequestStream


class HeuristicScheduler:
    """Subclasses implement `requests`; this class runs it through the mode's mechanism.

    `compat=True` selects the authors' mechanism (least-loaded server, stop at the first failure);
    otherwise requests are granted against free capacity and placed by `placer`, sticky across slots.
    """

    name = "heuristic"
    progress_oblivious = False
    """True when the decision depends only on which jobs are active, not on their progress: the last
    allocation can then be reused while the set of jobs is unchanged."""

    def __init__(self, compat: bool = False, placer: Placer | None = None) -> None:
        self.compat = compat
        self.placer = placer or LoadBalancePlacer()
        self._memo_key: tuple[str, ...] | None = None
        self._memo: Allocation | None = None

    def reset(self) -> None:
        self._memo_key = None
        self._memo = None

    def requests(self, view: ClusterView, counts: Counts) -> RequestStream:
        raise NotImplementedError

    def schedule(self, view: ClusterView) -> Allocation:
        if self.progress_oblivious:
            key = tuple(job.spec.job_id for job in view.jobs)
            if key == self._memo_key and self._memo is view.previous:
                return self._memo
        counts: Counts = [[0, 0] for _ in view.jobs]
        stream = self.requests(view, counts)
        if self.compat:
            allocation = fill_first_failure(view, stream, counts)
        else:
            allocation = fill_with_placer(view, stream, counts, self.placer)
        if self.progress_oblivious:
            self._memo_key, self._memo = key, allocation
        return allocation
