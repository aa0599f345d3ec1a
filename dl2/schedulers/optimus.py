"""Optimus (Peng et al., EuroSys'18) with an oracle speed function, as in DL2's code.

Each job first gets one worker, then one PS. After that every job's candidate is +1 worker or +1 PS, whichever
cuts its estimated remaining time, remaining epochs / epochs per second, more; the job with the largest cut
gets that single task, and its next candidate is queued. Allocation stops when the best cut is not positive.
The speed function is the simulator's own (an oracle); `OptimusFitted` learns it online instead.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

from dl2.core import Architecture, ClusterView, JobSpec
from dl2.schedulers.base import HeuristicScheduler
from dl2.schedulers.requests import Counts, RequestStream, Role
from dl2.workload.speed import SpeedModel

ThroughputFunction = Callable[[JobSpec, int, int], float]
"""(job, num_ps, num_workers) -> estimated throughput."""

_FIRST = -math.inf  # a job without a worker, or without a PS, goes before any marginal gain


def _time_left(remaining: float, epochs_per_s: float) -> float:
    return remaining / epochs_per_s if epochs_per_s != 0.0 else math.inf


def marginal_gain_requests(
    view: ClusterView, counts: Counts, throughput: ThroughputFunction, bundle_first: bool = False
) -> RequestStream:
    """The greedy loop shared by the oracle and the fitted variant.

    `bundle_first`: a PS job's first worker and first PS are asked for together (realistic mode). The authors'
    code asks for them one after the other; when capacity is short that grants workers whose PS never comes.
    """
    jobs = view.jobs
    # per rank, what its candidates read, looked up once (the loop below asks tens of thousands of candidates)
    specs = [job.spec for job in jobs]
    allreduce = [spec.architecture is Architecture.ALLREDUCE for spec in specs]
    remaining = [job.remaining_epochs for job in jobs]
    worker, ps_role, bundle = Role.WORKER, Role.PS, Role.BUNDLE
    # per rank, its time left once its last candidate is granted: its next candidate's time left now (the same
    # computation, so the same value; the speed function is asked two times a candidate instead of three)
    after: list[float | None] = [None] * len(jobs)

    def candidate(rank: int) -> tuple[float, Role, int]:
        """The job's next request as a heap entry: (minus its cut in time left, role, rank)."""
        workers, ps = counts[rank]
        if workers == 0:
            return _FIRST, bundle if bundle_first and not allreduce[rank] and ps == 0 else worker, rank
        if ps == 0 and not allreduce[rank]:
            return _FIRST, ps_role, rank
        spec, left = specs[rank], remaining[rank]
        per_epoch = spec.samples_per_epoch
        now = after[rank]
        if now is None:
            now = _time_left(left, throughput(spec, ps, workers) / per_epoch)
        with_worker = _time_left(left, throughput(spec, ps, workers + 1) / per_epoch)
        worker_gain = now - with_worker
        if not allreduce[rank]:
            with_ps = _time_left(left, throughput(spec, ps + 1, workers) / per_epoch)
            ps_gain = now - with_ps
            if ps_gain >= worker_gain:
                after[rank] = with_ps
                return -ps_gain, ps_role, rank
        after[rank] = with_worker
        return -worker_gain, worker, rank

    heap = [candidate(rank) for rank in range(len(jobs))]
    heapq.heapify(heap)
    pop, push = heapq.heappop, heapq.heappush
    while heap:
        utility, role, rank = pop(heap)
        if utility >= 0:  # the best remaining cut is not positive (NaN compares false: keep going, as theirs)
            return
        spec = specs[rank]
        workers, ps = counts[rank]
        if (role is not ps_role and workers >= spec.max_workers) or (role is not worker and ps >= spec.max_ps):
            continue  # the job leaves the queue
        granted = yield rank, role
        if not granted:
            continue
        push(heap, candidate(rank))


class OptimusOracle(HeuristicScheduler):
    name = "optimus"

    def __init__(self, speed: SpeedModel, compat: bool = False, placer: object | None = None) -> None:
        super().__init__(compat, placer)  # type: ignore[arg-type]
        self.speed = speed
        self.placement_speed = speed
        self._known: dict[tuple[str, int, int], float] = {}
        """Throughputs asked before: the speed function is fixed, and at a thousand jobs the greedy loop asks it
        hundreds of thousands of times a slot for a few hundred distinct (model, PS, workers)."""

    def _throughput(self, spec: JobSpec, num_ps: int, num_workers: int) -> float:
        key = (spec.model, num_ps, num_workers)
        value = self._known.get(key)
        if value is None:
            value = self._known[key] = self.speed.throughput(spec.model, num_ps, num_workers)
        return value

    def requests(self, view: ClusterView, counts: Counts) -> RequestStream:
        return marginal_gain_requests(view, counts, self._throughput, bundle_first=not self.compat)
