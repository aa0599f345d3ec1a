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
        keys = [
            (1.0 - job.progress_epochs / job.spec.declared_epochs, job.spec.arrival_s, rank)
            for rank, job in enumerate(view.jobs)
        ]
        keys.sort()
        return bundles_in_order(view, counts, [key[2] for key in keys])
