"""Hand-computed two- and three-job cases with exact JCTs."""

from __future__ import annotations

import pytest

from dl2.core import Allocation, InvalidAllocationError, JobAllocation
from dl2.schedulers.drf import DRF
from dl2.schedulers.fifo import FIFO
from dl2.sim.config import Mode, RescaleCost, RescaleKind, SimConfig
from dl2.sim.simulator import Simulation, simulate
from tests.builders import LinearSpeed, make_job, one_node_workload

QUIET = SimConfig(mode=Mode.REALISTIC, rescale=RescaleCost(kind=RescaleKind.NONE), interference=False)


def jcts(result: object) -> dict[str, float]:
    return {job.job_id: job.jct_s for job in result.jobs}  # type: ignore[attr-defined]


def test_drf_compat_two_jobs_share_one_node_then_the_survivor_doubles() -> None:
    # One node fits two worker+PS bundles. Slot 0-1: A and B one bundle each (1 epoch/s each).
    # A needs 150 epochs: done at 150 s. B has 200 after slot 1; from slot 2 it holds both bundles
    # (2 epochs/s) and needs 100 more: done at 250 s. Decisions only at slot boundaries (A's bundle idles 150-200 s).
    workload = one_node_workload(make_job("A", 150), make_job("B", 300))
    result = simulate(workload, DRF(compat=True), SimConfig.compat(), LinearSpeed())
    assert jcts(result) == pytest.approx({"A": 150.0, "B": 250.0})
    assert result.num_slots == 3


def test_fifo_gives_the_first_job_everything_it_can_take() -> None:
    # FIFO: A takes both bundles (2 epochs/s), B waits. A: 300 epochs -> 150 s. B from slot 2 (200 s): 2 epochs/s,
    # 100 epochs -> 250 s.
    workload = one_node_workload(make_job("A", 300), make_job("B", 100))
    result = simulate(workload, FIFO(compat=True), SimConfig.compat(), LinearSpeed())
    assert jcts(result) == pytest.approx({"A": 150.0, "B": 250.0})
    queueing = {job.job_id: job.queueing_s for job in result.jobs}
    assert queueing == {"A": 0.0, "B": 200.0}


def test_late_arrival_waits_for_the_next_boundary_and_idle_time_is_skipped() -> None:
    # C arrives at 1,030 s, long after A finished at 50 s: the run jumps to slot 11 (1,100 s); JCT = 70 + 100 / 2.
    workload = one_node_workload(make_job("A", 100), make_job("C", 100, arrival_s=1030.0))
    result = simulate(workload, DRF(compat=True), SimConfig.compat(), LinearSpeed())
    assert jcts(result) == pytest.approx({"A": 50.0, "C": 120.0})
    assert result.num_slots == 2


def test_checkpoint_restart_costs_are_paid_on_start_and_on_every_change() -> None:
    # Restore takes exactly 30 s, stopping a running job 60 s. Slot 0: both start, paused to 30 s -> 70 epochs each.
    # Slot 1: A needs 80 more -> done at 180 s; B reaches 170. Slot 2: B grows to two bundles, pays 60 + 30 s,
    # runs 290-300 s at 2/s -> 190. Slot 3: needs 110 at 2/s -> done at 355 s.
    cost = RescaleCost(kind=RescaleKind.CHECKPOINT, stop_s=60.0, restore_min_s=30.0, restore_max_s=30.0)
    config = SimConfig(mode=Mode.REALISTIC, rescale=cost, interference=False)
    workload = one_node_workload(make_job("A", 150), make_job("B", 300))
    result = simulate(workload, DRF(), config, LinearSpeed())
    assert jcts(result) == pytest.approx({"A": 180.0, "B": 355.0})
    assert {job.job_id: job.num_rescales for job in result.jobs} == {"A": 0, "B": 1}


def test_three_jobs_realistic_backfill_and_exact_finish_times() -> None:
    # Two nodes, caps of one bundle per job: A, B and C each get one bundle (2 nodes x 2 bundles),
    # so all run at 1 epoch/s from 0 s and finish at exactly their epochs.
    jobs = [make_job(name, epochs, max_tasks=1) for name, epochs in (("A", 40), ("B", 90), ("C", 130))]
    result = simulate(one_node_workload(*jobs, num_nodes=2), DRF(), QUIET, LinearSpeed())
    assert jcts(result) == pytest.approx({"A": 40.0, "B": 90.0, "C": 130.0})


def test_epoch_error_changes_true_epochs_deterministically() -> None:
    workload = one_node_workload(make_job("A", 1000), make_job("B", 1000))
    config = SimConfig(
        mode=Mode.REALISTIC, rescale=RescaleCost(kind=RescaleKind.NONE), interference=False, epoch_error=0.2, seed=7
    )
    first = jcts(simulate(workload, DRF(), config, LinearSpeed()))
    again = jcts(simulate(workload, DRF(), config, LinearSpeed()))
    assert first == again
    exact = jcts(simulate(workload, DRF(), QUIET, LinearSpeed()))
    assert first != exact
    for job_id in first:  # +-20% epochs at 1-2 epochs/s moves the finish by at most 20% of the work
        assert abs(first[job_id] - exact[job_id]) <= 0.2 * 1000 + 100


def test_over_capacity_allocation_is_rejected() -> None:
    workload = one_node_workload(make_job("A", 100))
    simulation = Simulation(workload, SimConfig.compat(), LinearSpeed())
    simulation.begin_slot()
    too_much = Allocation({"A": JobAllocation((0, 0, 0), (0,))})  # three 4-GPU workers on an 8-GPU node
    with pytest.raises(InvalidAllocationError, match="node 0 over capacity"):
        simulation.apply(too_much)


def test_allocation_for_unknown_job_or_over_limit_is_rejected() -> None:
    workload = one_node_workload(make_job("A", 100, max_tasks=1))
    simulation = Simulation(workload, SimConfig.compat(), LinearSpeed())
    simulation.begin_slot()
    with pytest.raises(InvalidAllocationError, match="not active"):
        simulation.apply(Allocation({"Z": JobAllocation((0,), (0,))}))
    with pytest.raises(InvalidAllocationError, match="limits"):
        simulation.apply(Allocation({"A": JobAllocation((0, 0), (0,))}))
    with pytest.raises(InvalidAllocationError, match="outside nodes"):
        simulation.apply(Allocation({"A": JobAllocation((3,), (0,))}))


@pytest.mark.parametrize("compat", [True, False])
def test_srpt_knee_fill_tops_a_lone_job_up_past_its_knee(compat: bool) -> None:
    """With LinearSpeed a job capped at 4 tasks per role runs at w epochs/s with one PS: its best is 4 (1 PS, 4
    workers). The knee at 0.7 (or 0.6) is the fewest tasks reaching 2.8 (2.4): 1 PS + 3 workers. The fill pass
    at 0.9 asks for 3.6: 1 PS + 4 workers, which two 8-GPU servers hold (16 GPUs, 10 of 16 CPUs)."""
    from dl2.schedulers.srpt_knee import SRPTKnee

    workload = one_node_workload(make_job("a", epochs=100.0), num_nodes=2)
    config = SimConfig.compat() if compat else SimConfig.realistic(seed=0)
    view = Simulation(workload, config, LinearSpeed()).begin_slot()
    knee = SRPTKnee(LinearSpeed(), compat).schedule(view).jobs["a"]
    filled = SRPTKnee(LinearSpeed(), compat, efficiency=0.6, fill_efficiency=(0.9,)).schedule(view).jobs["a"]
    assert (knee.num_workers, knee.num_ps) == (3, 1)
    assert (filled.num_workers, filled.num_ps) == (4, 1)
    ladder = SRPTKnee(LinearSpeed(), compat, efficiency=0.6, fill_efficiency=(0.7, 0.8, 1.0))
    assert ladder.name == "srpt-knee-ladder"
    laddered = ladder.schedule(view).jobs["a"]
    assert (laddered.num_workers, laddered.num_ps) == (4, 1)
    with pytest.raises(ValueError, match="fill_efficiency must be in"):
        SRPTKnee(LinearSpeed(), compat, fill_efficiency=(0.8, 0.0))


@pytest.mark.parametrize("compat", [True, False])
def test_srpt_knee_ladder_lets_every_job_climb_a_level_before_the_shortest_climbs_the_next(compat: bool) -> None:
    """Two jobs of up to 10 workers (LinearSpeed: best 10) on 8 eight-GPU servers, room for 16 four-GPU workers.
    Knees at 0.6 give each 6 workers, leaving 4. srpt-knee-fill's one pass to 0.9 (9 workers) gives the shorter
    job `a` 3 of them and `b` the last; the ladder's 0.8 level (8 workers) gives each 2, and nothing is left
    for its 1.0 level."""
    from dl2.schedulers.srpt_knee import SRPTKnee

    jobs = make_job("a", epochs=10.0, max_tasks=10), make_job("b", epochs=100.0, max_tasks=10)
    workload = one_node_workload(*jobs, num_nodes=8)
    config = SimConfig.compat() if compat else SimConfig.realistic(seed=0)
    view = Simulation(workload, config, LinearSpeed()).begin_slot()

    def counts(fills: tuple[float, ...]) -> dict[str, tuple[int, int]]:
        allocation = SRPTKnee(LinearSpeed(), compat, efficiency=0.6, fill_efficiency=fills).schedule(view)
        return {job_id: (a.num_workers, a.num_ps) for job_id, a in allocation.jobs.items()}

    assert counts((0.9,)) == {"a": (9, 1), "b": (7, 1)}
    assert counts((0.8, 1.0)) == {"a": (8, 1), "b": (8, 1)}


@pytest.mark.parametrize("compat", [True, False])
def test_srtf_ranks_by_estimated_remaining_time_and_srtf_fraction_by_remaining_share(compat: bool) -> None:
    # One node fits two bundles. A (first, 300 epochs) and B (100 epochs) both have a remaining fraction of 1, so
    # the authors' rule keeps arrival order: A takes both bundles (2 epochs/s), done at 150 s; B from the boundary
    # at 200 s, done at 250 s. By estimated time at its caps (2 epochs/s) B needs 50 s and A 150 s: B goes first,
    # done at 50 s; A from 100 s, done at 250 s.
    from dl2.schedulers.srtf import SRTF, SRTFFraction

    workload = one_node_workload(make_job("A", 300, max_tasks=2), make_job("B", 100, max_tasks=2))
    config = SimConfig.compat() if compat else QUIET
    speed = LinearSpeed()
    by_fraction = simulate(workload, SRTFFraction(compat=compat), config, speed)
    by_time = simulate(workload, SRTF(speed, compat=compat), config, speed)
    assert jcts(by_fraction) == pytest.approx({"A": 150.0, "B": 250.0})
    assert jcts(by_time) == pytest.approx({"A": 250.0, "B": 50.0})
