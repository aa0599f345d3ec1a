"""First in, first out: jobs in arrival order each receive worker+PS bundles up to their cap."""

from __future__ import annotations

from collections.abc import Hashable

from dl2.core import ClusterView
from dl2.schedulers.base import HeuristicScheduler
from dl2.schedulers.requests import Counts, RequestStream, Role, below_caps


def bundles_in_order(view: ClusterView, counts: Counts, order: list[int]) -> RequestStream:
    """Give each job of `order` bundles up to its cap before moving to the next (FIFO and SRTF)."""
    for rank in order:
        spec = view.jobs[rank].spec
        while below_caps(spec, *counts[rank]):
            granted = yield rank, Role.BUNDLE
            if not granted:
                break


class FIFO(HeuristicScheduler):
    name = "fifo"
    gives_bundles_to_caps = True

    def decision_key(self, view: ClusterView) -> Hashable:
        return tuple(job.spec.job_id for job in view.jobs)

    def requests(self, view: ClusterView, counts: Counts) -> RequestStream:
        return bundles_in_order(view, counts, list(range(len(view.jobs))))
