"""Shortest remaining time first, two ways.

- `SRTF` (`srtf`), the classic rule: jobs in order of their estimated remaining time, the epochs still to do at
  the speed the job would run once given its bundles (up to its caps, what this policy grants), from the speed
  model (oracle speed, as `optimus` has). A job that has not started is ranked by its whole duration, so the
  shortest queued job goes first.
- `SRTFFraction` (`srtf-fraction`), the rule of DL2's code: by remaining *fraction* of declared epochs
  (1 - progress / epochs). Every job that has not started has fraction 1, so among queued jobs it is FIFO; it is
  the SRTF of the authors' results, which compatibility mode reproduces.

Ties go by arrival; each job in turn receives bundles up to its cap.
"""

from __future__ import annotations

import math
from collections.abc import Hashable

from dl2.core import ClusterView, JobView
from dl2.schedulers.base import HeuristicScheduler
from dl2.schedulers.fifo import bundles_in_order
from dl2.schedulers.placement import Placer
from dl2.schedulers.requests import Counts, RequestStream, bundle_caps
from dl2.workload.speed import SpeedModel


class SRTFFraction(HeuristicScheduler):
    name = "srtf-fraction"
    gives_bundles_to_caps = True

    def remaining(self, job: JobView) -> float:
        """The ordering key: the share of declared epochs still to do."""
        return 1.0 - job.progress_epochs / job.spec.declared_epochs

    def _order(self, view: ClusterView) -> list[int]:
        keys = [(self.remaining(job), job.spec.arrival_s, rank) for rank, job in enumerate(view.jobs)]
        keys.sort()
        return [key[2] for key in keys]

    def decision_key(self, view: ClusterView) -> Hashable:
        # the decision depends on the order only: reuse it while the order of the jobs is unchanged
        self._last_order = self._order(view)
        return tuple(view.jobs[rank].spec.job_id for rank in self._last_order)

    def requests(self, view: ClusterView, counts: Counts) -> RequestStream:
        return bundles_in_order(view, counts, self._last_order)


class SRTF(SRTFFraction):
    name = "srtf"

    def __init__(self, speed: SpeedModel, compat: bool = False, placer: Placer | None = None) -> None:
        self.speed = speed
        super().__init__(compat, placer)

    def reset(self) -> None:
        super().reset()
        self._epochs_per_s: dict[str, float] = {}

    def remaining(self, job: JobView) -> float:
        """Estimated seconds to finish: remaining declared epochs over the epochs per second at its caps."""
        rate = self._epochs_per_s.get(job.spec.job_id)
        if rate is None:
            workers, ps = bundle_caps(job.spec)
            throughput = self.speed.throughput(job.spec.model, ps, workers)
            rate = self._epochs_per_s[job.spec.job_id] = throughput / job.spec.samples_per_epoch
        left = max(job.spec.declared_epochs - job.progress_epochs, 0.0)
        return left / rate if rate > 0 else math.inf
