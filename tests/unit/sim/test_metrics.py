"""Run metrics on hand-made results, with every number computed by hand."""

from __future__ import annotations

import math

import pytest

from dl2.schedulers.drf import DRF
from dl2.sim.config import SimConfig
from dl2.sim.metrics import mean_ci95, summarize
from dl2.sim.simulator import JobRecord, SimResult, simulate
from tests.builders import LinearSpeed, make_job, one_node_workload


def record(
    job_id: str, arrival_s: float, first_start_s: float, finish_s: float, isolated_s: float, rescales: int = 0
) -> JobRecord:
    return JobRecord(
        job_id=job_id,
        model="resnet-50",
        arrival_s=arrival_s,
        first_start_s=first_start_s,
        finish_s=finish_s,
        num_rescales=rescales,
        gpu_seconds=finish_s - first_start_s,
        requested_gpus=1.0,
        isolated_s=isolated_s,
    )


def hand_result() -> SimResult:
    # JCTs 100, 50, 300, 200; queueing 0, 20, 0, 60; rho 2, 1, 0.5 and D's infinite isolated time is left out
    jobs = [
        record("A", arrival_s=0.0, first_start_s=0.0, finish_s=100.0, isolated_s=50.0, rescales=1),
        record("B", arrival_s=10.0, first_start_s=30.0, finish_s=60.0, isolated_s=50.0),
        record("C", arrival_s=20.0, first_start_s=20.0, finish_s=320.0, isolated_s=600.0, rescales=2),
        record("D", arrival_s=40.0, first_start_s=100.0, finish_s=240.0, isolated_s=math.inf),
    ]
    return SimResult(
        workload="hand",
        scheduler="test",
        mode="compat",
        seed=7,
        slot_s=100.0,
        jobs=jobs,
        slot_start_s=[0.0, 100.0, 200.0, 300.0],
        allocated_gpu_fraction=[0.5, 1.0, 0.25, 0.25],
        num_slots=4,
        wall_s=1.5,
    )


def test_jct_statistics() -> None:
    metrics = summarize(hand_result())
    assert metrics.num_jobs == 4
    assert metrics.avg_jct_s == pytest.approx(162.5)  # (100 + 50 + 300 + 200) / 4
    assert metrics.median_jct_s == pytest.approx(150.0)  # sorted 50, 100, 200, 300: (100 + 200) / 2
    # linear interpolation between order statistics: position q (n - 1) = 2.85 and 2.97 -> 200 + 0.85/0.97 x 100
    assert metrics.p95_jct_s == pytest.approx(285.0)
    assert metrics.p99_jct_s == pytest.approx(297.0)
    assert metrics.avg_jct_slots == pytest.approx(1.625)


def test_makespan_queueing_utilisation_and_rescales() -> None:
    metrics = summarize(hand_result())
    assert metrics.makespan_s == pytest.approx(320.0)  # last finish (C, 320) - first arrival (A, 0)
    assert metrics.makespan_slots == pytest.approx(3.2)
    assert metrics.avg_queueing_s == pytest.approx(20.0)  # (0 + 20 + 0 + 60) / 4
    assert metrics.avg_gpu_utilisation == pytest.approx(0.5)  # (0.5 + 1 + 0.25 + 0.25) / 4
    assert metrics.total_rescales == 3


def test_finish_time_fairness() -> None:
    metrics = summarize(hand_result())
    assert metrics.avg_ftf_rho == pytest.approx(3.5 / 3)  # rho = JCT / isolated: 2, 1, 0.5 (D has none)
    assert metrics.max_ftf_rho == pytest.approx(2.0)
    assert metrics.frac_ftf_rho_above_1 == pytest.approx(1 / 3)  # rho = 1 exactly is not above 1


def test_fairness_without_any_isolated_time_is_nan() -> None:
    result = hand_result()
    result.jobs = [record("X", 0.0, 0.0, 10.0, isolated_s=0.0), record("Y", 0.0, 5.0, 20.0, isolated_s=math.inf)]
    metrics = summarize(result)
    assert math.isnan(metrics.avg_ftf_rho)
    assert math.isnan(metrics.max_ftf_rho)
    assert math.isnan(metrics.frac_ftf_rho_above_1)
    assert metrics.avg_jct_s == pytest.approx(15.0)


def test_no_slots_means_zero_utilisation() -> None:
    result = hand_result()
    result.allocated_gpu_fraction = []
    assert summarize(result).avg_gpu_utilisation == 0.0


def test_identity_fields_and_json() -> None:
    metrics = summarize(hand_result())
    assert (metrics.workload, metrics.scheduler, metrics.mode, metrics.seed) == ("hand", "test", "compat", 7)
    assert (metrics.slot_s, metrics.num_slots, metrics.wall_s) == (100.0, 4, 1.5)
    plain = metrics.to_json_dict()
    assert "avg_jct_slots" not in plain and "makespan_slots" not in plain
    assert plain["avg_jct_s"] == metrics.avg_jct_s
    assert set(plain) == set(metrics.__dataclass_fields__)
    compat = metrics.to_json_dict(compat=True)
    assert compat["avg_jct_slots"] == pytest.approx(1.625)
    assert compat["makespan_slots"] == pytest.approx(3.2)


def test_one_job_has_every_percentile_equal() -> None:
    result = hand_result()
    result.jobs = result.jobs[:1]
    metrics = summarize(result)
    assert metrics.avg_jct_s == metrics.median_jct_s == metrics.p95_jct_s == metrics.p99_jct_s == 100.0
    assert metrics.makespan_s == 100.0


def test_metrics_of_a_hand_computed_simulation() -> None:
    # tests/unit/sim/test_simulator_hand.py: DRF on one node, A (150 epochs) and B (300) finish at 150 s and 250 s.
    # Both workers (4 GPU slots each) fill the node's 8 every slot; B grows to two bundles in slot 2 (one rescale).
    # Isolated at 1 worker + 1 PS (1 epoch/s): A 150 s, B 300 s, so rho = 1 and 250 / 300.
    workload = one_node_workload(make_job("A", 150), make_job("B", 300))
    metrics = summarize(simulate(workload, DRF(compat=True), SimConfig.compat(), LinearSpeed()))
    assert metrics.avg_jct_s == pytest.approx(200.0)
    assert metrics.makespan_s == pytest.approx(250.0)
    assert metrics.avg_queueing_s == 0.0
    assert metrics.avg_gpu_utilisation == pytest.approx(1.0)
    assert metrics.total_rescales == 1
    assert metrics.avg_ftf_rho == pytest.approx((1.0 + 250.0 / 300.0) / 2)
    assert metrics.max_ftf_rho == pytest.approx(1.0)
    assert metrics.frac_ftf_rho_above_1 == 0.0
    assert metrics.num_slots == 3


# --- mean_ci95 -------------------------------------------------------------------------------------------------------


def test_mean_ci95_three_values() -> None:
    # mean 2, sample standard deviation 1, t(0.975, 2) = 4.302653: half-width 4.302653 / sqrt(3)
    mean, half = mean_ci95([1.0, 2.0, 3.0])
    assert mean == pytest.approx(2.0)
    assert half == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    assert half == pytest.approx(2.484138, rel=1e-6)


def test_mean_ci95_two_values() -> None:
    # sample sd of (1, 3) is sqrt(2); t(0.975, 1) = 12.706205: half-width = 12.706205 x sqrt(2) / sqrt(2)
    mean, half = mean_ci95([1.0, 3.0])
    assert mean == pytest.approx(2.0)
    assert half == pytest.approx(12.706205, rel=1e-6)


def test_mean_ci95_single_and_constant_values() -> None:
    assert mean_ci95([4.5]) == (4.5, 0.0)
    mean, half = mean_ci95([3.0, 3.0, 3.0, 3.0])
    assert mean == pytest.approx(3.0)
    assert half == pytest.approx(0.0, abs=1e-12)


def test_mean_ci95_shrinks_with_more_runs() -> None:
    few = mean_ci95([1.0, 2.0, 3.0])[1]
    many = mean_ci95([1.0, 2.0, 3.0] * 4)[1]
    assert many < few
