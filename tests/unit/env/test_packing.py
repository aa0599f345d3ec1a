"""The packed request order (`dl2.schedulers.packing`) and the speed-up hull scheduler: hand cases and properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dl2.core import ClusterSpec, ClusterView, JobAllocation, JobSpec, Resources
from dl2.env.decision import SlotDecision, encode_action
from dl2.schedulers.load_balance import LoadBalancePlacer
from dl2.schedulers.packing import packed_order, place_packed, places_everything
from dl2.schedulers.requests import RequestStream, Role, RoleDemands
from dl2.schedulers.speedup_hull import HullPoint, SpeedupHull
from dl2.sim.config import SimConfig
from dl2.sim.simulator import Simulation
from tests.builders import COMPAT_PS, COMPAT_WORKER, make_job, one_node_workload

GPU_JOB: RoleDemands = (COMPAT_WORKER.as_tuple(), COMPAT_PS.as_tuple(), (4.0, 4.0, 0.0))
"""Rank 0 in these cases: a PS job with GPU workers (the authors' slot units)."""


def compat_cluster(num_nodes: int) -> ClusterSpec:
    return ClusterSpec.homogeneous(num_nodes, Resources(gpu=8.0, cpu=8.0), kind="test")


def test_asking_job_by_job_strands_a_server_that_the_packed_order_fills() -> None:
    """Two servers of 8 GPU and 8 CPU slots; job 0 asks for 1 GPU worker and 3 PS, job 1 for 4 PS: 8 tasks, exactly
    the CPU. Job by job, the worker goes to server 0 (load 6) and the PS to server 1 (2, 4, 6), then server 0 (8),
    server 1 (8: its CPU is full) and server 0 (10): server 1 is now the least-loaded and refuses the last PS.
    GPU workers first, or 1 or 2 PS per server first, strand one PS the same way; 3 PS per server first (loads 6
    and 6), then the worker (server 0: load 12, CPU full), then the last PS (server 1) place all 8."""
    demands = [GPU_JOB, GPU_JOB]
    job_by_job = [(0, Role.WORKER), *[(0, Role.PS)] * 3, *[(1, Role.PS)] * 4]
    cluster = compat_cluster(2)
    assert not places_everything(cluster, job_by_job, demands)
    packed = packed_order(cluster, job_by_job, demands)
    assert packed == [*[(0, Role.PS)] * 3, *[(1, Role.PS)] * 3, (0, Role.WORKER), (1, Role.PS)]
    assert places_everything(cluster, packed, demands)


def test_gpu_workers_are_asked_first_whenever_that_packs() -> None:
    """Two jobs of 1 worker and 3 PS on two servers: one worker per server then the PS (loads 12 and 12) place
    everything, so no job is left holding PS while waiting for its workers."""
    tasks = [(0, Role.WORKER), *[(0, Role.PS)] * 3, (1, Role.WORKER), *[(1, Role.PS)] * 3]
    packed = packed_order(compat_cluster(2), tasks, [GPU_JOB, GPU_JOB])
    assert packed == [(0, Role.WORKER), (1, Role.WORKER), *[(0, Role.PS)] * 3, *[(1, Role.PS)] * 3]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8), st.data())
def test_the_packed_order_places_every_mix_that_fits_the_cluster_in_total(num_nodes: int, data: st.DataObject) -> None:
    """Any G GPU workers and C CPU-only tasks with G <= 2N and G + C <= 4N (what the servers hold in total) are all
    placed, whatever order they come in."""
    gpu = data.draw(st.integers(0, 2 * num_nodes), label="gpu workers")
    cpu = data.draw(st.integers(0, 4 * num_nodes - gpu), label="cpu tasks")
    tasks = [(0, Role.WORKER)] * gpu + [(0, Role.PS)] * cpu
    tasks = data.draw(st.permutations(tasks), label="asked in")
    order = packed_order(compat_cluster(num_nodes), tasks, [GPU_JOB])
    assert sorted(order) == sorted(tasks)
    assert places_everything(compat_cluster(num_nodes), order, [GPU_JOB])
    placed = place_packed(compat_cluster(num_nodes), tasks, [GPU_JOB])
    assert sorted(task for task, _ in placed) == sorted(tasks)
    tasks_per_server = np.bincount([node for _, node in placed], minlength=num_nodes)
    assert tasks_per_server.max(initial=0) <= 4  # 8 CPU slots, 2 per task


class SquareRootSpeed:
    """throughput = sqrt(workers) with at least one PS: returns diminish with every worker."""

    def throughput(self, model: str, num_ps: int, num_workers: int) -> float:
        return math.sqrt(num_workers) if num_ps > 0 else 0.0

    def placed_throughput(self, spec: JobSpec, allocation: JobAllocation) -> float:
        return self.throughput(spec.model, allocation.num_ps, allocation.num_workers)


def test_the_hull_keeps_the_fastest_split_of_each_efficient_task_count() -> None:
    """sqrt(w) with one PS: n tasks run at sqrt(n - 1), concave from 2 tasks on, so every count of 2 to 5 tasks is
    on the hull (a second PS never helps); the empty allocation starts it."""
    hull = SpeedupHull(SquareRootSpeed()).hull(make_job("a", epochs=1.0).spec)
    assert [(p.tasks, p.ps, p.workers) for p in hull] == [(0, 0, 0), (2, 1, 1), (3, 1, 2), (4, 1, 3), (5, 1, 4)]
    assert [p.throughput for p in hull] == pytest.approx([0.0, 1.0, math.sqrt(2), math.sqrt(3), 2.0])


@pytest.mark.parametrize("compat", [True, False])
@pytest.mark.parametrize(
    ("size_exponent", "expected"), [(0.0, {"a": (3, 1), "b": (3, 1)}), (0.1, {"a": (4, 1), "b": (2, 1)})]
)
def test_speedup_hull_spends_each_task_where_it_adds_most_of_a_jobs_best_speed(
    compat: bool, size_exponent: float, expected: dict[str, tuple[int, int]]
) -> None:
    """Two jobs of one type (sqrt speed, best 2 at 4 workers) on 3 servers: 6 GPU workers, 12 tasks. Steps along
    the hull add 0.25, 0.207, 0.159 and 0.134 of the best speed per task. With alpha 0 the jobs tie at every
    level and take turns, a first: 1+1, 1+2, 1+3 tasks each, then a's last step needs a 7th GPU worker. With alpha
    0.1 the job 10 times shorter weighs 10^0.1 = 1.26 times more: a takes its first two steps (0.25, 0.261), b
    its first two (0.25, 0.207 > 0.200), then a its third and fourth (0.200, 0.169 > b's 0.159): 4 workers and a
    PS; b's third step would need a 7th GPU worker."""
    jobs = make_job("a", epochs=10.0), make_job("b", epochs=100.0)
    workload = one_node_workload(*jobs, num_nodes=3)
    config = SimConfig.compat() if compat else SimConfig.realistic(seed=0)
    view = Simulation(workload, config, SquareRootSpeed()).begin_slot()
    allocation = SpeedupHull(SquareRootSpeed(), compat, size_exponent=size_exponent).schedule(view)
    assert {job_id: (a.num_workers, a.num_ps) for job_id, a in allocation.jobs.items()} == expected


def test_speedup_hull_asks_only_for_what_a_partial_allocation_still_lacks() -> None:
    """A DAgger label restarts the stream from the student's counts: tasks already held are not asked again, so a
    job given its whole target is skipped and one given part of it gets the rest (the 3 servers and alpha 0.1 of
    the case above: targets a 4 workers + 1 PS, b 2 workers + 1 PS)."""
    workload = one_node_workload(make_job("a", epochs=10.0), make_job("b", epochs=100.0), num_nodes=3)
    view = Simulation(workload, SimConfig.compat(), SquareRootSpeed()).begin_slot()
    scheduler = SpeedupHull(SquareRootSpeed(), compat=True)
    assert _granted(scheduler, view, [[4, 1], [2, 1]]) == []
    asked = _granted(scheduler, view, [[3, 1], [0, 0]])
    assert sorted(asked) == [(0, Role.WORKER), (1, Role.WORKER), (1, Role.WORKER), (1, Role.PS)]


def test_the_marginal_order_asks_for_each_step_as_the_allocation_climbs() -> None:
    """The alpha-0.1 case above climbs a's first two steps, b's two, then a's third and fourth: requests follow,
    each step's workers and PS paired as bundles, then the rest; restarted from a partial allocation, what is held
    is not asked again."""
    workload = one_node_workload(make_job("a", epochs=10.0), make_job("b", epochs=100.0), num_nodes=3)
    view = Simulation(workload, SimConfig.compat(), SquareRootSpeed()).begin_slot()
    scheduler = SpeedupHull(SquareRootSpeed(), compat=True, order="marginal")
    a_worker, a_bundle, b_worker, b_bundle = (0, Role.WORKER), (0, Role.BUNDLE), (1, Role.WORKER), (1, Role.BUNDLE)
    assert _granted(scheduler, view, [[0, 0], [0, 0]]) == [
        *(a_bundle, a_worker),
        *(b_bundle, b_worker),
        *(a_worker, a_worker),
    ]
    assert _granted(scheduler, view, [[2, 1], [0, 0]]) == [b_bundle, b_worker, a_worker, a_worker]
    assert _granted(scheduler, view, [[1, 0], [0, 0]]) == [
        (0, Role.PS),
        a_worker,
        b_bundle,
        b_worker,
        a_worker,
        a_worker,
    ]


def _granted(scheduler: SpeedupHull, view: ClusterView, counts: list[list[int]]) -> list[tuple[int, Role]]:
    """Every request of the scheduler's stream, granted as the mechanism would (counting it)."""
    stream, asked = scheduler.requests(view, counts), []
    request = next(stream, None)
    while request is not None:
        asked.append(request)
        rank, role = request
        for held in (Role.WORKER, Role.PS) if role is Role.BUNDLE else (role,):
            counts[rank][held] += 1
        request = _send(stream)
    return asked


def _send(stream: RequestStream) -> tuple[int, Role] | None:
    try:
        return stream.send(True)
    except StopIteration:
        return None


class FixedTargets(SpeedupHull):
    """SpeedupHull with this slot's targets given (the packing case above: 1 worker + 3 PS, and 4 PS)."""

    def targets(self, view: ClusterView, demands: list[RoleDemands]) -> list[HullPoint]:
        return [HullPoint(4, 1.0, 3, 1), HullPoint(4, 1.0, 4, 0)]


def test_a_label_switches_to_gpu_workers_once_the_slot_holds_the_first_phase_of_cpu_tasks() -> None:
    """The packed order asks for 6 PS (3 per server) before the worker. A student that instead gave job 1 its 4 PS
    and job 0 two is labelled with job 0's worker next, not job 0's third PS: the first phase's share is spent."""
    workload = one_node_workload(make_job("a", epochs=10.0), make_job("b", epochs=100.0), num_nodes=2)
    view = Simulation(workload, SimConfig.compat(), SquareRootSpeed()).begin_slot()
    scheduler = FixedTargets(SquareRootSpeed(), compat=True)
    assert next(scheduler.requests(view, [[0, 0], [0, 0]])) == (0, Role.PS)
    assert next(scheduler.requests(view, [[0, 2], [0, 4]])) == (0, Role.WORKER)


def test_a_packed_slot_decides_against_the_cluster_total_and_places_the_tasks_in_the_packed_order() -> None:
    """The stranding case at the top, decided action by action: as decided, the slot ends before the last PS (the
    least-loaded server is CPU-full); with packed requests all 8 tasks are possible, and the final allocation
    places them all, 2 servers x 4 CPU task slots."""
    workload = one_node_workload(make_job("a", epochs=10.0), make_job("b", epochs=100.0), num_nodes=2)
    view = Simulation(workload, SimConfig.compat(), SquareRootSpeed()).begin_slot()
    actions = [encode_action(0, Role.WORKER), *[encode_action(0, Role.PS)] * 3, *[encode_action(1, Role.PS)] * 4]
    as_decided = SlotDecision(view, 2, compat=True)
    assert [as_decided.step(action) for action in actions[:7]] == [True] * 7
    assert as_decided.done  # the least-loaded server is CPU-full: nothing is possible any more
    packed = SlotDecision(view, 2, compat=True, packed=True)
    assert [packed.step(action) for action in actions] == [True] * 8
    assert packed.done  # the CPU is spent: nothing else is possible
    allocation = packed.allocation()
    assert (allocation.get("a").num_workers, allocation.get("a").num_ps) == (1, 3)
    assert allocation.get("b").num_ps == 4
    ps_per_server = sorted(allocation.get("a").ps_nodes + allocation.get("b").ps_nodes)
    assert ps_per_server == [0, 0, 0, 1, 1, 1, 1] or ps_per_server == [0, 0, 0, 0, 1, 1, 1]


def test_packed_requests_are_a_compatibility_mode_option() -> None:
    workload = one_node_workload(make_job("a", epochs=10.0))
    view = Simulation(workload, SimConfig.realistic(seed=0), SquareRootSpeed()).begin_slot()
    with pytest.raises(ValueError, match="compatibility-mode"):
        SlotDecision(view, 2, compat=False, placer=LoadBalancePlacer(), packed=True)
