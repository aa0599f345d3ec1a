"""Shortest remaining time first, as DL2's code defines it: by remaining *fraction* of declared epochs
(1 - progress / epochs), ties by arrival; each job in turn receives bundles up to its cap."""

from __future__ import annotations

from collections.abc import Hashable

from dl2.core import ClusterView
from dl2.schedulers.base import HeuristicScheduler
from dl2.schedulers.fifo import bundles_in_order
from dl2.schedulers.requests import Counts, RequestStream


class SRTF(HeuristicScheduler):
    name = "srtf"
    gives_bundles_to_caps = True

    def _order(self, view: ClusterView) -> list[int]:
        keys = [
            (1.0 - job.progress_epochs / job.spec.declared_epochs, job.spec.arrival_s, rank)
            for rank, job in enumerate(view.jobs)
        ]
        keys.sort()
        return [key[2] for key in keys]

    def decision_key(self, view: ClusterView) -> Hashable:
        # the decision depends on the order only: reuse it while the order of the jobs is unchanged
        self._last_order = self._order(view)
        return tuple(view.jobs[rank].spec.job_id for rank in self._last_order)

    def requests(self, view: ClusterView, counts: Counts) -> RequestStream:
        return bundles_in_order(view, counts, self._last_order)
