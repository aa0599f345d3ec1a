"""Shortest remaining time first, as DL2's code defines it: by remaining *fraction* of declared epochs
(1 - progress / epochs), ties by arrival; each job in turn receives bundles up to its cap."""

from __future__ import annotations

from dl2.core import ClusterView
from dl2.schedulers.base import HeuristicScheduler
from dl2.schedulers.fifo import bundles_in_order
from dl2.schedulers.requests import Counts, RequestStream


class SRTF(HeuristicScheduler):
    name = "srtf"

    def requests(self, view: ClusterView, counts: Counts) -> RequestStream:
        jobs = view.jobs
        order = sorted(
            range(len(jobs)),
            key=lambda rank: (
                1.0 - jobs[rank].progress_epochs / jobs[rank].spec.declared_epochs,
                jobs[rank].spec.arrival_s,
                rank,
            ),
        )
        return bundles_in_order(view, counts, order)
