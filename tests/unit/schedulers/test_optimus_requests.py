"""Optimus's greedy loop (`marginal_gain_requests`) asks its speed function for a job's time left once per
candidate, carrying the time left after its last grant over; it must request exactly as asking afresh every time
did (the reference here, as the loop was first written)."""

from __future__ import annotations

import heapq
import math
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from dl2.core import Architecture, ClusterView
from dl2.schedulers import optimus
from dl2.schedulers.optimus import ThroughputFunction
from dl2.schedulers.registry import make_scheduler
from dl2.schedulers.requests import Counts, RequestStream, Role
from dl2.sim.config import Mode, SimConfig
from dl2.sim.run import interference_model, speed_model
from dl2.sim.simulator import Simulation
from dl2.workload.synthetic import PRESETS, generate, scaled


def reference_requests(
    view: ClusterView, counts: Counts, throughput: ThroughputFunction, bundle_first: bool = False
) -> RequestStream:
    jobs = view.jobs

    def time_left(remaining: float, epochs_per_s: float) -> float:
        return remaining / epochs_per_s if epochs_per_s != 0.0 else math.inf

    def candidate(rank: int) -> tuple[float, Role]:
        spec = jobs[rank].spec
        workers, ps = counts[rank]
        allreduce = spec.architecture is Architecture.ALLREDUCE
        if workers == 0:
            return -math.inf, Role.BUNDLE if bundle_first and not allreduce and ps == 0 else Role.WORKER
        if not allreduce and ps == 0:
            return -math.inf, Role.PS
        remaining = jobs[rank].remaining_epochs
        per_epoch = spec.samples_per_epoch
        now = time_left(remaining, throughput(spec, ps, workers) / per_epoch)
        worker_gain = now - time_left(remaining, throughput(spec, ps, workers + 1) / per_epoch)
        if allreduce:
            return -worker_gain, Role.WORKER
        ps_gain = now - time_left(remaining, throughput(spec, ps + 1, workers) / per_epoch)
        if ps_gain >= worker_gain:
            return -ps_gain, Role.PS
        return -worker_gain, Role.WORKER

    heap = [(*candidate(rank), rank) for rank in range(len(jobs))]
    heapq.heapify(heap)
    while heap:
        utility, role, rank = heapq.heappop(heap)
        if utility >= 0:
            return
        spec = jobs[rank].spec
        workers, ps = counts[rank]
        if (role is not Role.PS and workers >= spec.max_workers) or (role is not Role.WORKER and ps >= spec.max_ps):
            continue
        granted = yield rank, role
        if not granted:
            continue
        heapq.heappush(heap, (*candidate(rank), rank))


def granting(stream: RequestStream, refuse_every: int) -> list[tuple[int, Role, bool]]:
    """The requests of `stream`, every `refuse_every`-th refused and the others granted, counted as
    `fill_with_placer` counts them, up to 3,000 requests."""
    asked: list[tuple[int, Role, bool]] = []
    try:
        rank, role = next(stream)
        while len(asked) < 3_000:
            granted = (len(asked) + 1) % refuse_every != 0
            asked.append((rank, role, granted))
            if granted:
                count = COUNTS[rank]
                if role is not Role.PS:
                    count[0] += 1
                if role is Role.PS or (role is Role.BUNDLE and HAS_PS[rank]):
                    count[1] += 1
            rank, role = stream.send(granted)
    except StopIteration:
        pass
    return asked


COUNTS: Counts = []
HAS_PS: list[bool] = []


@settings(max_examples=30, deadline=None)
@given(num_jobs=st.integers(2, 60), seed=st.integers(0, 1000), slots=st.integers(0, 6), refuse_every=st.integers(2, 9))
def test_optimus_requests_as_asking_afresh(num_jobs: int, seed: int, slots: int, refuse_every: int) -> None:
    speed = speed_model(Mode.REALISTIC)
    workload = generate(scaled(PRESETS["synthetic-small"], num_jobs), seed, "optimus")
    workload = replace(
        workload, jobs=tuple(replace(job, spec=replace(job.spec, arrival_s=0.0)) for job in workload.jobs)
    )
    cluster = Simulation(workload, SimConfig.realistic(seed), speed, interference_model())
    driver = make_scheduler("optimus", speed, False, "isolate-strict")
    for _ in range(slots):
        if cluster.done:
            return
        cluster.apply(driver.schedule(cluster.begin_slot()))
    if cluster.done:
        return
    view = cluster.begin_slot()
    HAS_PS[:] = [job.spec.max_ps > 0 for job in view.jobs]
    streams = []
    for requests in (optimus.marginal_gain_requests, reference_requests):
        COUNTS[:] = [[0, 0] for _ in view.jobs]
        throughput = optimus.OptimusOracle(speed)._throughput
        streams.append(granting(requests(view, COUNTS, throughput, bundle_first=True), refuse_every))
    assert streams[0] == streams[1]
    assert any(role is not Role.BUNDLE for _, role, _ in streams[0])  # marginal gains were compared
