"""Per-(model, accelerator type) speeds calibrated from decision records (`dl2.workload.calibration` on a cluster of
several types): a known per-type factor recovered from hand-built records, records without types calibrating as
before, and records whose workers sat on several types left out."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pytest

from dl2.core import DecisionRecord, JobAllocation, JobSpec, Resources, Workload
from dl2.core.cluster import ClusterSpec
from dl2.core.decision import worker_accelerators
from dl2.sim.calibrated import calibration_summary, calibration_text
from dl2.sim.run import catalogue_speed
from dl2.truth import SpeedShift, Truth, realise
from dl2.truth.realise import TrueCluster
from dl2.workload.accelerated_speed import on_accelerators
from dl2.workload.accelerators import accelerator_type
from dl2.workload.calibration import CalibratedSpeedModel, calibrate
from dl2.workload.interference import InterferenceModel
from dl2.workload.registry import load_workloads
from testbed.twin.workloads import first_jobs

SPEEDUPS = {"K80": 1.4, "V100": 0.75}
"""The truth's factor on vgg-16's computation speed per type over the catalogue's (`accelerator-affinity`'s CNNs)."""
KEY = ("vgg-16", 0.0, 0.0, 0.0, 0.0)


def two_types() -> ClusterSpec:
    """Four K80 servers (nodes 0-3), then four V100 (4-7)."""
    capacity = Resources(gpu=8.0, cpu=48.0, mem_gb=256.0)
    return ClusterSpec.mixed(
        [(4, capacity, accelerator_type("K80").accelerator), (4, capacity, accelerator_type("V100").accelerator)]
    )


@cache
def philly() -> Workload:
    return first_jobs(load_workloads("philly")[0], 1)


def affinity() -> TrueCluster:
    """A truth whose vgg-16 gains `SPEEDUPS` on K80 and V100 over the catalogue."""
    return realise(Truth("affinity", accelerator_speedups={"vgg-16": SPEEDUPS}), philly())


def vgg(job_id: str) -> JobSpec:
    return replace(philly().jobs[0].spec, model="vgg-16", job_id=job_id)


def held(spec: JobSpec, allocation: JobAllocation, throughput: float, first_slot: int, cluster: ClusterSpec):
    """Three slots of one job held at `allocation` on `cluster`, training at `throughput`: the middle one is
    steady."""
    slot_s = 600.0
    return [
        DecisionRecord(
            slot * slot_s, slot_s, "hand", spec.job_id, spec.model, spec.architecture.value, spec.arrival_s,
            spec.declared_epochs, spec.samples_per_epoch, spec.worker_demand.gpu, spec.worker_demand.cpu,
            spec.worker_demand.mem_gb, spec.ps_demand.cpu, spec.ps_demand.mem_gb, spec.max_workers, spec.max_ps,
            0.0, allocation.num_workers, allocation.num_ps, "hand", "hand", allocation.num_workers,
            allocation.num_ps, allocation.num_workers, allocation.num_ps, allocation.num_workers,
            allocation.num_ps, "simulated", throughput * slot_s / spec.samples_per_epoch,
            allocation.worker_nodes, allocation.ps_nodes,
            applied_worker_accelerators=worker_accelerators(cluster, allocation.worker_nodes),
        )
        for slot in range(first_slot, first_slot + 3)
    ]  # fmt: skip


def allocations(first_node: int) -> list[JobAllocation]:
    """Allocations at several sizes with every worker on the servers from `first_node` (one type's four)."""
    return [
        JobAllocation(
            tuple(first_node + i % 4 for i in range(workers)), tuple(first_node + (i + 1) % 4 for i in range(ps))
        )
        for workers in (1, 2, 4, 8)
        for ps in (1, 2, 4)
    ]


def typed_log(cluster: ClusterSpec, truth_speed, first_nodes=(0, 4)) -> list[DecisionRecord]:
    records: list[DecisionRecord] = []
    for first_node in first_nodes:
        for allocation in allocations(first_node):
            spec = vgg(f"j{len(records)}")
            speed = truth_speed.placed_throughput(spec, allocation)
            records += held(spec, allocation, speed, len(records), cluster)
    return records


def test_a_known_per_type_factor_is_recovered_and_played_on_the_cluster():
    cluster = two_types()
    truth = affinity()
    truth_speed = on_accelerators(truth.speed, cluster)
    records = typed_log(cluster, truth_speed)
    calibration = calibrate(records, catalogue_speed(), InterferenceModel(), prior_weight=1e-6, validate=False)
    entry = calibration.types[KEY]
    assert entry.accelerator_records == {"K80": 12, "V100": 12}
    compute = entry.factors[0]
    # the computation's speed on each type over the catalogue's there is the truth's factor (its compute shift is
    # 1); the other terms are the catalogue's
    assert {name: s / compute for name, s in entry.speedups.items()} == pytest.approx(SPEEDUPS, rel=1e-3)
    assert entry.factors[1:] == pytest.approx((1.0, 1.0, 1.0), rel=1e-3)
    # no reference records: c is the types' geometric mean of x = 1 / factor, weighted by records (equal here)
    assert compute == pytest.approx((1 / 1.4 / 0.75) ** 0.5, rel=1e-3)
    summary = calibration_summary(calibration)
    assert summary["types_kept"]["vgg-16/0.0/0.0/0.0/0.0"]["accelerator_records"] == {"K80": 12, "V100": 12}
    assert "vgg-16 compute time" in calibration_text(summary)
    assert "(compute time on K80 x0.71, V100 x1.33)" in calibration_text(summary)
    calibrated = on_accelerators(CalibratedSpeedModel(catalogue_speed(), calibration), cluster)
    catalogue = on_accelerators(catalogue_speed(), cluster)
    for allocation in allocations(0) + allocations(4):
        spec = vgg("new")
        true = truth_speed.placed_throughput(spec, allocation)
        assert calibrated.placed_throughput(spec, allocation) == pytest.approx(true, rel=1e-3)
        assert catalogue.placed_throughput(spec, allocation) != pytest.approx(true, rel=1e-3)


def test_the_reference_accelerator_anchors_the_computation_factor():
    """With records on reference servers too, c is the reference's x and each named type's speedup is c / x."""
    capacity = Resources(gpu=8.0, cpu=48.0, mem_gb=256.0)
    cluster = ClusterSpec.mixed([(4, capacity, None), (4, capacity, accelerator_type("V100").accelerator)])
    truth = affinity()
    records = typed_log(cluster, on_accelerators(truth.speed, cluster))
    entry = calibrate(records, catalogue_speed(), InterferenceModel(), prior_weight=1e-6, validate=False).types[KEY]
    assert entry.accelerator_records == {"": 12, "V100": 12}
    assert entry.factors == pytest.approx((1.0, 1.0, 1.0, 1.0), rel=1e-3)
    assert entry.speedups == pytest.approx({"V100": 0.75}, rel=1e-3)


def test_records_without_accelerators_calibrate_exactly_as_records_naming_the_reference():
    """A log that names no types and the same log naming the reference accelerator for every worker: the same
    calibration, to the float, with no speedups (a homogeneous cluster's calibration is unchanged)."""
    cluster = two_types()
    truth = affinity()
    typed = typed_log(cluster, on_accelerators(truth.speed, cluster))
    records = [replace(r, applied_worker_accelerators=()) for r in typed]
    named = [replace(r, applied_worker_accelerators=("",) * len(r.applied_worker_nodes)) for r in records]
    plain = calibrate(records, catalogue_speed(), InterferenceModel())
    assert plain == calibrate(named, catalogue_speed(), InterferenceModel())
    assert all(not entry.speedups for entry in plain.types.values())
    assert CalibratedSpeedModel(catalogue_speed(), plain).accelerator_speedups(vgg("x")) == ("vgg-16", {})


def test_a_type_seen_on_one_accelerator_gets_no_speedups():
    """Records all on V100: its departure there is the computation factor itself (nothing tells the types apart)."""
    cluster = two_types()
    truth = affinity()
    records = typed_log(cluster, on_accelerators(truth.speed, cluster), first_nodes=(4,))
    entry = calibrate(records, catalogue_speed(), InterferenceModel(), prior_weight=1e-6, validate=False).types[KEY]
    assert entry.speedups == {} and entry.accelerator_records == {}
    assert entry.factors[0] == pytest.approx(1 / 0.75, rel=1e-3)


def test_records_whose_workers_sat_on_several_types_are_left_out():
    cluster = two_types()
    truth = affinity()
    truth_speed = on_accelerators(truth.speed, cluster)
    records = typed_log(cluster, truth_speed)
    spread = JobAllocation((0, 4), (1,))  # one worker on a K80, one on a V100
    spec = vgg("spread")
    mixed = held(spec, spread, truth_speed.placed_throughput(spec, spread), len(records), cluster)
    assert mixed[1].applied_worker_accelerators == ("K80", "V100")
    with_mixed = calibrate(records + mixed, catalogue_speed(), InterferenceModel(), prior_weight=1e-6, validate=False)
    without = calibrate(records, catalogue_speed(), InterferenceModel(), prior_weight=1e-6, validate=False)
    assert with_mixed.mixed_type_records == 1 and without.mixed_type_records == 0
    assert with_mixed.types == without.types


def test_validation_keeps_per_type_factors_only_where_they_predict_better_than_one():
    """Held out, per-type factors that the truth has are kept; where the truth departs on every type alike, one
    computation factor predicts as well and is kept instead."""
    cluster = two_types()
    records = typed_log(cluster, on_accelerators(affinity().speed, cluster))
    kept = calibrate(records, catalogue_speed(), InterferenceModel(), prior_weight=1e-6).types[KEY]
    assert kept.held_out and kept.speedups.keys() == {"K80", "V100"}
    alike = realise(Truth("alike", shifts={"vgg-16": SpeedShift(compute=0.6)}), philly())
    records = typed_log(cluster, on_accelerators(alike.speed, cluster))
    one = calibrate(records, catalogue_speed(), InterferenceModel(), prior_weight=1e-6).types[KEY]
    assert one.held_out and one.speedups == {} and one.factors[0] == pytest.approx(0.6, rel=1e-3)
