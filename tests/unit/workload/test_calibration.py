"""Speeds calibrated from decision records (`dl2.workload.calibration`): steady records only, a type's factors
recovered from a simulated cluster whose truth departs from the catalogue, interference's scale, new types split
by their demands, and the catalogue kept where records say nothing."""

from __future__ import annotations

import pickle
import zlib
from dataclasses import replace

import numpy as np
import pytest

from dl2.core import JobAllocation
from dl2.placement.samples import record_run
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import SimConfig
from dl2.sim.run import World, catalogue_speed
from dl2.truth import SCENARIOS, SpeedShift, Truth, realise
from dl2.truth.realise import TrueCluster
from dl2.workload.calibration import CalibratedSpeedModel, Calibration, _Data, calibrate, steady_measurements
from dl2.workload.interference import InterferenceModel
from dl2.workload.registry import load_workloads
from dl2.workload.synthetic import PRESETS, generate
from testbed.twin.workloads import first_jobs, first_nodes

QUIET = SimConfig.realistic(seed=0, speed_noise=0.0, interference=False)
EXACT = SimConfig.realistic(seed=0, speed_noise=0.0)
"""No noise, the profiled interference: a cluster whose truth is the catalogue is then exactly the catalogue."""


def records_of(cluster: TrueCluster, config: SimConfig, scheduler: str = "optimus-fitted"):
    speed = catalogue_speed()
    return record_run(
        cluster.workload, make_scheduler(scheduler, speed, False), cluster.config(config), cluster.speed,
        cluster.interference if config.interference else None,
    )  # fmt: skip


def philly(num_jobs: int = 150, num_nodes: int = 12):
    return first_nodes(first_jobs(load_workloads("philly")[0], num_jobs), num_nodes)


def grid_error(model, truth_speed, specs) -> float:
    """Mean relative error of `model` against the truth over allocations a scheduler would consider."""
    errors = []
    for spec in specs:
        for workers, ps in ((1, 1), (2, 2), (4, 2), (4, 4), (8, 4), (8, 8)):
            allocation = JobAllocation((0,) * workers, (1,) * ps)
            truth = truth_speed.placed_throughput(spec, allocation)
            errors.append(abs(model.placed_throughput(spec, allocation) / truth - 1.0))
    return float(np.mean(errors))


def test_only_steady_records_are_measurements():
    cluster = realise(SCENARIOS["catalogue"], philly(40, 4))
    records = records_of(cluster, QUIET)
    measured = list(steady_measurements(records))
    assert 0 < len(measured) < len(records)
    last_slot = max(r.time_s for r in records)
    for m in measured:
        assert m.record.observed_epochs > 0 and m.record.time_s not in (0.0, last_slot)
        assert m.throughput == pytest.approx(m.record.observed_epochs * m.record.samples_per_epoch / m.record.slot_s)


def test_records_of_the_catalogue_calibrate_to_the_catalogue():
    cluster = realise(SCENARIOS["catalogue"], philly())
    records = records_of(cluster, EXACT)
    fitted = calibrate(records, catalogue_speed(), InterferenceModel(), validate=False)
    assert fitted.types
    for entry in fitted.types.values():
        assert entry.factors == pytest.approx((1.0, 1.0, 1.0, 1.0), abs=0.05)
    # held out, no fit beats the catalogue on a cluster that is the catalogue: every type keeps it
    validated = calibrate(records, catalogue_speed(), InterferenceModel())
    assert validated.types == {} and validated.interference_scale == 1.0


def test_a_calibration_is_kept_only_where_it_beats_the_catalogue_on_held_out_jobs():
    truth = Truth("shifted", shifts={m: SpeedShift(compute=0.6, communication=1.8) for m in ("vgg-16", "resnet-50")})
    cluster = realise(truth, philly(300, 16))
    calibration = calibrate(records_of(cluster, EXACT), catalogue_speed(), InterferenceModel())
    assert calibration.types
    for key, entry in calibration.types.items():
        assert entry.held_out_error is not None and entry.catalogue_error is not None
        assert entry.held_out_error < entry.catalogue_error, key
    assert {key[0] for key in calibration.types} <= {"vgg-16", "resnet-50"}  # the others' catalogue is exact


def held_records(spec, allocation, throughput, first_slot, slot_s=600.0):
    """Three slots of one job held at `allocation`, training at `throughput`: the middle one is steady."""
    from dl2.core import DecisionRecord

    records = []
    for slot in range(first_slot, first_slot + 3):
        records.append(
            DecisionRecord(
                slot * slot_s, slot_s, "hand", spec.job_id, spec.model, spec.architecture.value, spec.arrival_s,
                spec.declared_epochs, spec.samples_per_epoch, spec.worker_demand.gpu, spec.worker_demand.cpu,
                spec.worker_demand.mem_gb, spec.ps_demand.cpu, spec.ps_demand.mem_gb, spec.max_workers, spec.max_ps,
                0.0, allocation.num_workers, allocation.num_ps, "hand", "hand", allocation.num_workers,
                allocation.num_ps, allocation.num_workers, allocation.num_ps, allocation.num_workers,
                allocation.num_ps, "simulated", throughput * slot_s / spec.samples_per_epoch,
                allocation.worker_nodes, allocation.ps_nodes,
            )
        )  # fmt: skip
    return records


def test_a_shifted_truth_is_recovered_from_records_at_several_allocations():
    """Records of one type at a spread of allocations identify every factor: the calibrated speed is the truth's."""
    truth = Truth("shifted", shifts={"vgg-16": SpeedShift(compute=0.6, communication=1.8, parameter_server=1.3)})
    cluster = realise(truth, philly(40, 4))
    spec = replace(next(j.spec for j in cluster.workload.jobs), model="vgg-16")
    records = []
    allocations = [(w, p, spread) for w in (1, 2, 4, 8) for p in (1, 2, 4) for spread in (False, True)]
    for index, (workers, ps, spread) in enumerate(allocations):
        allocation = JobAllocation((0,) * workers, (index % 3 + 1 if spread else 0,) * ps)
        job = replace(spec, job_id=f"j{index}")
        records += held_records(job, allocation, cluster.speed.placed_throughput(job, allocation), 3 * index)
    calibration = calibrate(records, catalogue_speed(), InterferenceModel(), prior_weight=1e-6, validate=False)
    assert calibration.types[("vgg-16", 0.0, 0.0, 0.0, 0.0)].factors == pytest.approx((0.6, 1.8, 1.3, 1.0), rel=0.02)
    calibrated = CalibratedSpeedModel(catalogue_speed(), calibration)
    assert (
        grid_error(calibrated, cluster.speed, [spec])
        < 0.01
        < 0.2
        < grid_error(catalogue_speed(), cluster.speed, [spec])
    )


def test_records_at_one_allocation_move_the_factors_no_further_than_they_show():
    """A type seen at a single allocation: its speed there is matched, and the rest of its function stays as near
    the catalogue as that allows (the change spread over the terms by their share)."""
    truth = Truth("shifted", shifts={"vgg-16": SpeedShift(compute=0.6, communication=1.8)})
    cluster = realise(truth, philly(40, 4))
    spec = replace(next(j.spec for j in cluster.workload.jobs), model="vgg-16")
    allocation = JobAllocation((0, 0, 0, 0), (1, 1))
    observed = cluster.speed.placed_throughput(spec, allocation)
    records = [r for i in range(30) for r in held_records(replace(spec, job_id=f"j{i}"), allocation, observed, 3 * i)]
    calibration = calibrate(records, catalogue_speed(), InterferenceModel())
    calibrated = CalibratedSpeedModel(catalogue_speed(), calibration)
    assert calibrated.placed_throughput(spec, allocation) == pytest.approx(observed, rel=0.05)
    # a single record is outweighed by the pull towards the catalogue (3 records' worth)
    one = calibrate(records[:3], catalogue_speed(), InterferenceModel(), validate=False)
    moved = CalibratedSpeedModel(catalogue_speed(), one).placed_throughput(spec, allocation)
    assert observed < moved < catalogue_speed().placed_throughput(spec, allocation)
    assert all(0.5 < f < 2.0 for f in calibration.types[("vgg-16", 0.0, 0.0, 0.0, 0.0)].factors)


def test_interference_twice_the_profiled_is_measured_as_a_scale_near_two():
    cluster = realise(SCENARIOS["interference-2x"], philly(200, 8))
    config = SimConfig.realistic(seed=0, speed_noise=0.0)
    calibration = calibrate(records_of(cluster, config, "drf"), catalogue_speed(), InterferenceModel())
    assert calibration.co_located_records > 100
    assert 1.5 < calibration.interference_scale < 2.5


def test_new_types_get_their_own_calibration_when_split_by_demand():
    cluster = realise(SCENARIOS["new-types"], philly(300, 16))
    records = records_of(cluster, QUIET)
    by_label = calibrate(records, catalogue_speed(), InterferenceModel())
    by_demand = calibrate(records, catalogue_speed(), InterferenceModel(), by_demand=True)
    assert by_label.interference_scale < 0.3  # the run had no interference, and the records say so
    assert len(by_demand.types) > len(by_label.types)
    model = CalibratedSpeedModel(catalogue_speed(), by_demand)
    for name in ("transformer-large", "graph-net"):
        new = [j.spec for j in cluster.workload.jobs if cluster.new_type_of.get(j.spec.job_id) == name]
        assert grid_error(model, cluster.speed, new) < grid_error(catalogue_speed(), cluster.speed, new) / 1.5


def test_the_calibrated_interference_scales_each_extra_slowdown():
    profiled = InterferenceModel()
    victim, aggressor = "vgg-16", "resnet-50"
    extra = profiled.slowdown(victim, aggressor) - 1.0
    doubled = Calibration({}, 2.0, 10, False).interference(profiled)
    assert doubled.slowdown(victim, aggressor) == pytest.approx(1.0 + 2.0 * extra)
    assert Calibration({}, 0.0, 10, False).interference(profiled).slowdown(victim, aggressor) == 1.0
    assert Calibration({}, 1.0, 10, False).interference(profiled) is profiled


def test_a_calibrated_world_travels_to_rollout_workers():
    """A calibrated twin's speeds and interference pickle (rollout workers get them with their tasks)."""
    cluster = realise(SCENARIOS["speed-shift"], philly(120, 8))
    calibration = calibrate(records_of(cluster, QUIET), catalogue_speed(), InterferenceModel())
    world = World(CalibratedSpeedModel(catalogue_speed(), calibration), calibration.interference(InterferenceModel()))
    copy = pickle.loads(pickle.dumps(world))
    allocation = JobAllocation((0, 0), (1,))
    for job in cluster.workload.jobs[:20]:
        assert copy.speed.placed_throughput(job.spec, allocation) == world.speed.placed_throughput(job.spec, allocation)


def test_a_type_without_records_keeps_the_catalogue():
    calibration = calibrate([], catalogue_speed(), InterferenceModel())
    spec = replace(philly(5, 2).jobs[0].spec)
    allocation = JobAllocation((0, 0), (1,))
    model = CalibratedSpeedModel(catalogue_speed(), calibration)
    assert model.placed_throughput(spec, allocation) == catalogue_speed().placed_throughput(spec, allocation)
    assert calibration.interference_scale == 1.0


def one_job_log(cluster, model: str, job_id: str):
    """One job of `model` held at twelve allocations in turn (three slots each), in time."""
    spec = replace(next(j.spec for j in cluster.workload.jobs), model=model, job_id=job_id)
    records = []
    for index, (workers, ps) in enumerate((w, p) for w in (1, 2, 4, 8) for p in (1, 2, 4)):
        allocation = JobAllocation((0,) * workers, (1,) * ps)
        records += held_records(spec, allocation, cluster.speed.placed_throughput(spec, allocation), 3 * index)
    return records


def test_a_type_no_held_out_job_covers_is_judged_on_its_later_records():
    """A small cluster's log: one job of the type, which the job split does not hold out (its hash). The fit on
    its first records is judged on its last quarter: kept under a shifted truth, refused on the catalogue."""
    job_id = next(f"j{i}" for i in range(100) if zlib.crc32(f"j{i}".encode()) % 4 != 0)
    truth = Truth("shifted", shifts={"vgg-16": SpeedShift(compute=0.6, communication=1.8)})
    records = one_job_log(realise(truth, philly(40, 4)), "vgg-16", job_id)
    calibration = calibrate(records, catalogue_speed(), InterferenceModel())
    entry = calibration.types[("vgg-16", 0.0, 0.0, 0.0, 0.0)]
    assert entry.held_out == "later slots" and entry.jobs == 1
    assert entry.held_out_error is not None and entry.catalogue_error is not None
    assert entry.held_out_error < 0.5 * entry.catalogue_error
    same = one_job_log(realise(SCENARIOS["catalogue"], philly(40, 4)), "vgg-16", job_id)
    assert calibrate(same, catalogue_speed(), InterferenceModel()).types == {}


def test_later_records_are_each_jobs_last_quarter():
    truth = Truth("shifted", shifts={"vgg-16": SpeedShift(compute=0.6)})
    records = one_job_log(realise(truth, philly(40, 4)), "vgg-16", "a")
    other = one_job_log(realise(truth, philly(40, 4)), "vgg-16", "b")
    data = _Data.of(list(steady_measurements(records + other)), catalogue_speed(), InterferenceModel(), False)
    later = data.later_records()
    for job in ("a", "b"):
        own = [held for m, held in zip(data.measurements, later, strict=True) if m.record.job_id == job]
        assert len(own) >= 12 and own == [False] * (len(own) - len(own) // 4) + [True] * (len(own) // 4)


def test_a_scale_that_does_not_predict_held_out_records_better_is_not_kept():
    """Speeds shifted, interference as profiled, a cluster the size of the demo's: the fit's own scale trades
    with the shifted factors (1.44 where the truth's is 1); it predicts records it was not fitted to no better
    than the profiled scale, so the profiled scale stays."""
    workload = generate(replace(PRESETS["synthetic-philly"], num_jobs=30), 9100, "synthetic-philly")
    cluster = realise(SCENARIOS["speed-shift"], first_nodes(first_jobs(workload, 30), 4))
    records = records_of(cluster, SimConfig.realistic(seed=9100), "drf")
    first = [r for r in records if r.time_s < sorted({r.time_s for r in records})[200]]
    unvalidated = calibrate(first, catalogue_speed(), InterferenceModel(), by_demand=True, validate=False)
    assert unvalidated.interference_scale > 1.3
    assert calibrate(first, catalogue_speed(), InterferenceModel(), by_demand=True).interference_scale == 1.0
