"""Jobs whose scaling departs from their type's (`dl2.truth.model.ScalingKnee`): their throughput computed by hand
below, at and past the knee; every other job, and every truth without a knee, exactly as before."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dl2.core import Architecture, JobAllocation, JobSpec, Resources
from dl2.truth import SCENARIOS, NewJobType, ScalingKnee, Truth, generate, realise
from dl2.workload.catalogue import CATALOGUE
from dl2.workload.speed_fit import ParametricSpeedModel, allreduce_inverse_speed, placement_kappa
from dl2.workload.synthetic import PRESETS
from dl2.workload.synthetic import generate as generate_workload

CATALOGUE_SPEED = ParametricSpeedModel()


def workload(num_jobs: int = 200):
    return generate_workload(replace(PRESETS["synthetic-small"], num_jobs=num_jobs), 4, "small")


def ps_job(job_id: str = "a", model: str = "vgg-16") -> JobSpec:
    return JobSpec(
        job_id, model, 0.0, 10.0, 1000.0, Resources(gpu=1, cpu=4, mem_gb=8), Resources(cpu=4, mem_gb=8), 8, 8
    )


def knee_speed(knee_of: dict[str, int], truth: Truth | None = None):
    from dl2.truth.speed import TrueSpeedModel

    truth = truth or Truth("hand", knee=ScalingKnee(share=0.5, workers=2))
    return TrueSpeedModel(truth, {}, CATALOGUE_SPEED, knee_of)


def test_past_its_knee_a_jobs_computation_stops_splitting():
    """1/S = t0/min(w, k) + t1 + kappa (t2/p + t3 w/p) + t4 w + t5 p: the compute term held at the knee."""
    spec = ps_job()
    speed = knee_speed({"a": 2})
    t0, t1, t2, t3, t4, t5 = CATALOGUE_SPEED.fits["vgg-16"].coefficients
    for workers in (1, 2):  # at or below the knee: the catalogue's speed, the same floats
        allocation = JobAllocation(tuple(range(1, workers + 1)), (0,))
        assert speed.placed_throughput(spec, allocation) == CATALOGUE_SPEED.placed_throughput(spec, allocation)
    allocation = JobAllocation((0, 1, 2, 3), (0, 5))
    kappa = placement_kappa(CATALOGUE["vgg-16"], allocation.worker_nodes, allocation.ps_nodes)
    w, p = 4, 2
    inverse = t0 / 2 + t1 + kappa * (t2 / p + t3 * w / p) + t4 * w + t5 * p
    assert speed.placed_throughput(spec, allocation) == pytest.approx(1.0 / inverse, rel=1e-12)
    # past the knee more workers only add synchronisation: each one slows the job down
    speeds = [speed.placed_throughput(spec, JobAllocation(tuple(range(1, w + 1)), (0,))) for w in (2, 3, 4, 6)]
    assert speeds == sorted(speeds, reverse=True)
    # placement ignored (every pair crossing servers), per job: the same
    crossing = JobAllocation((1, 2, 3, 4), (5, 6))
    assert speed.job_throughput(spec, 2, 4) == pytest.approx(speed.placed_throughput(spec, crossing), rel=1e-12)


def test_an_allreduce_job_past_its_knee():
    spec = JobSpec("r", "resnet-50", 0.0, 10.0, 1000.0, Resources(gpu=1, cpu=4, mem_gb=8), Resources(), 8, 0,
                   Architecture.ALLREDUCE, 1, 0)  # fmt: skip
    speed = knee_speed({"r": 1})
    fit, profile = CATALOGUE_SPEED.fits["resnet-50"], CATALOGUE["resnet-50"]
    inverse = allreduce_inverse_speed(fit, profile, 3, True) + fit.coefficients[0] * (1 - 1 / 3)
    assert speed.placed_throughput(spec, JobAllocation((0, 1, 2), ())) == pytest.approx(1.0 / inverse, rel=1e-12)
    one = JobAllocation((0,), ())
    assert speed.placed_throughput(spec, one) == CATALOGUE_SPEED.placed_throughput(spec, one)


def test_other_jobs_and_types_run_at_the_catalogues_speed():
    speed = knee_speed({"a": 1})
    other = ps_job("b")
    allocation = JobAllocation((0, 1, 2), (3,))
    assert speed.placed_throughput(other, allocation) == CATALOGUE_SPEED.placed_throughput(other, allocation)
    assert speed.job_key(other) is None and speed.job_key(ps_job("a")) == (None, 1)
    assert speed.throughput("vgg-16", 2, 4) == CATALOGUE_SPEED.throughput("vgg-16", 2, 4)  # by type: the label's


def test_the_knee_draws_its_share_in_a_stream_of_its_own():
    jobs = workload()
    new = NewJobType("big", base="vgg-16", declared="wlm", share=0.3)
    without = realise(Truth("n", new_types=(new,), seed=3), jobs)
    with_knee = realise(Truth("n", new_types=(new,), seed=3, knee=ScalingKnee(share=0.4, workers=1)), jobs)
    assert with_knee.new_type_of == without.new_type_of  # which jobs are new did not move
    assert with_knee.workload == without.workload
    assert 0.3 * jobs.num_jobs < len(with_knee.knee_of) < 0.5 * jobs.num_jobs
    assert set(with_knee.knee_of.values()) == {1}
    assert with_knee.speed.knee_of == with_knee.knee_of
    again = realise(Truth("n", new_types=(new,), seed=3, knee=ScalingKnee(share=0.4, workers=1)), jobs)
    assert again.knee_of == with_knee.knee_of
    other_seed = realise(Truth("n", seed=4, knee=ScalingKnee(share=0.4, workers=1)), jobs)
    assert other_seed.knee_of != with_knee.knee_of


def test_truths_without_a_knee_are_untouched():
    jobs = workload(40)
    catalogue = realise(SCENARIOS["catalogue"], jobs)
    assert catalogue.knee_of == {} and catalogue.truth.is_catalogue
    assert generate(5).knee is None and realise(generate(5), jobs).knee_of == {}
    knee = SCENARIOS["scaling-knee"]
    assert knee.knee == ScalingKnee(share=0.4, workers=1) and not knee.is_catalogue
    # the jobs as submitted are the workload's: only how some of them run departs
    assert realise(knee, jobs).workload.jobs == catalogue.workload.jobs
