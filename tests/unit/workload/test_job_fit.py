"""Each job's speed fitted online from its own progress (`dl2.workload.job_fit`), on hand-made views: a shortfall
beyond the noise becomes the job's correction at that worker count and above it; noise, the world's interference and
other jobs teach it nothing."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dl2.core import Allocation, ClusterSpec, ClusterView, JobAllocation, JobSpec, JobView, NodeSpec, Resources
from dl2.workload.interference import InterferenceModel
from dl2.workload.job_fit import TOLERANCE, JobFittedSpeedModel, JobSpeedModel
from dl2.workload.speed_fit import ParametricSpeedModel

BASE = ParametricSpeedModel()
CLUSTER = ClusterSpec(tuple(NodeSpec(i, Resources(gpu=8, cpu=64, mem_gb=512)) for i in range(4)))


def spec(job_id: str) -> JobSpec:
    return JobSpec(job_id, "vgg-16", 0.0, 10.0, 1000.0, Resources(gpu=1, cpu=4, mem_gb=8), Resources(cpu=4, mem_gb=8),
                   8, 8)  # fmt: skip


def job(job_id: str, allocation: JobAllocation, ratio: float) -> JobView:
    """A job that ran the previous slot at `ratio` times the catalogue's speed for its allocation."""
    observed = ratio * BASE.placed_throughput(spec(job_id), allocation)
    return JobView(spec(job_id), 1.0, 100.0, allocation, observed, 600.0, 0)


def view(*jobs: JobView, finished: dict[str, JobAllocation] | None = None) -> ClusterView:
    previous = {j.spec.job_id: j.allocation for j in jobs} | (finished or {})
    return ClusterView(600.0, 1, 600.0, CLUSTER, tuple(jobs), Allocation(previous))


TWO = JobAllocation((0, 0), (0,))
ONE = JobAllocation((1,), (1,))


def test_a_shortfall_is_the_jobs_correction_there_and_above():
    fit = JobFittedSpeedModel(BASE)
    assert isinstance(fit, JobSpeedModel)
    assert fit.observe(view(job("a", TWO, 0.8), job("b", ONE, 1.0))) == 2
    assert fit.correction("a", 2) == pytest.approx(0.8)
    assert fit.correction("a", 3) == pytest.approx(0.8)  # not expected to recover with more workers
    assert fit.correction("a", 1) == 1.0  # never seen there: the world's
    assert fit.placed_throughput(spec("a"), TWO) == pytest.approx(0.8 * BASE.placed_throughput(spec("a"), TWO))
    assert fit.job_throughput(spec("a"), 1, 3) == pytest.approx(0.8 * BASE.throughput("vgg-16", 1, 3))
    assert fit.job_throughput(spec("a"), 1, 1) == BASE.throughput("vgg-16", 1, 1)
    # a job that ran as its type, and every type, read as the world's
    assert fit.job_key(spec("b")) is None and fit.correction("b", 1) == 1.0
    assert fit.throughput("vgg-16", 1, 2) == BASE.throughput("vgg-16", 1, 2)
    key = fit.job_key(spec("a"))
    assert key is not None
    # seen at one worker as predicted: below two the world's, from two on the shortfall; the key moves
    fit.observe(view(job("a", JobAllocation((2,), (2,)), 1.02)))
    assert fit.correction("a", 1) == 1.0 and fit.correction("a", 4) == pytest.approx(0.8)
    assert fit.job_key(spec("a")) != key


def test_the_correction_is_the_mean_of_what_the_job_showed():
    fit = JobFittedSpeedModel(BASE)
    for ratio in (0.7, 0.8, 0.9):
        fit.observe(view(job("a", TWO, ratio)))
    assert fit.correction("a", 2) == pytest.approx(0.8)
    assert fit.observations == 3


def test_noise_within_the_tolerance_teaches_nothing():
    fit = JobFittedSpeedModel(BASE)
    fit.observe(view(job("a", TWO, 1.0 - TOLERANCE + 0.01), job("b", ONE, 1.0 + TOLERANCE - 0.01)))
    assert fit.corrections == {}
    assert fit.placed_throughput(spec("a"), TWO) == BASE.placed_throughput(spec("a"), TWO)
    assert fit.job_key(spec("a")) is None


def test_the_worlds_interference_is_divided_out_of_a_shared_slot():
    """Two jobs on server 0: each is predicted to run at its placed speed over the world's slowdown by the other."""
    interference = InterferenceModel()
    fit = JobFittedSpeedModel(BASE, interference)
    other = replace(spec("b"), model="resnet-50")
    slowdown = interference.slowdown("vgg-16", "resnet-50")
    assert slowdown > 1.0
    predicted = BASE.placed_throughput(spec("a"), TWO) / slowdown
    shared = JobView(other, 1.0, 100.0, JobAllocation((0,), (3,)), 1.0, 600.0, 0)
    a = JobView(spec("a"), 1.0, 100.0, TWO, 0.7 * predicted, 600.0, 0)
    fit.observe(view(a, shared))
    assert fit.correction("a", 2) == pytest.approx(0.7)
    # running exactly as the world says beside its neighbour: nothing to learn
    fit = JobFittedSpeedModel(BASE, interference)
    fit.observe(view(replace(a, last_throughput=predicted), shared))
    assert "a" not in fit.corrections and fit.observations == 2
    # beside a job that has finished since, whose type the view no longer shows: nothing
    fit = JobFittedSpeedModel(BASE, interference)
    assert fit.observe(view(a, finished={"gone": JobAllocation((0,), (1,))})) == 0


def test_a_job_sharing_a_server_teaches_nothing_without_an_interference_model():
    fit = JobFittedSpeedModel(BASE)
    # two jobs on server 0 (interference is the world's to model), and one beside a job that finished in the slot
    assert fit.observe(view(job("a", TWO, 0.5), job("b", JobAllocation((0,), (3,)), 0.5))) == 0
    assert fit.observe(view(job("c", ONE, 0.5), finished={"gone": JobAllocation((1,), (2,))})) == 0
    assert fit.corrections == {}
    # a job that did not run, or held nothing, neither
    assert fit.observe(view(JobView(spec("d"), 0.0, 0.0, JobAllocation(), 0.0, 0.0, 0))) == 0


def test_reset_forgets_every_job():
    fit = JobFittedSpeedModel(BASE)
    fit.observe(view(job("a", TWO, 0.5)))
    fit.reset()
    assert fit.corrections == {} and fit.observed == {} and fit.correction("a", 2) == 1.0


def test_on_a_mixed_cluster_a_job_on_a_slow_type_running_as_its_profile_says_is_not_corrected():
    """A job's observed speed is compared with the world's on the types it ran on: a K80 is no departure."""
    from dl2.workload.accelerated_speed import on_accelerators
    from dl2.workload.accelerators import ACCELERATOR_TYPES

    k80 = ACCELERATOR_TYPES["K80"].accelerator
    nodes = tuple(NodeSpec(i, Resources(gpu=8, cpu=64, mem_gb=512), "gpu", k80 if i else None) for i in range(2))
    mixed = ClusterSpec(nodes)
    on_k80 = JobAllocation((1,), (1,))
    observed = on_accelerators(BASE, mixed).placed_throughput(spec("k"), on_k80)
    assert observed < 0.6 * BASE.placed_throughput(spec("k"), on_k80)  # a K80 is far slower than the reference
    fit = JobFittedSpeedModel(BASE)
    view = ClusterView(600.0, 1, 600.0, mixed, (JobView(spec("k"), 1.0, 100.0, on_k80, observed, 600.0, 0),),
                       Allocation({"k": on_k80}))  # fmt: skip
    assert fit.observe(view) == 1 and fit.correction("k", 1) == 1.0 and fit.job_key(spec("k")) is None
    assert fit.accelerator_speedups(spec("k")) == ("vgg-16", {})  # the catalogue's world names no speedups


def test_on_a_mixed_cluster_the_corrected_world_is_its_world_per_type_times_the_correction():
    """The fitted world on several types scales its base's computation per type, as the base alone would be, and
    multiplies the job's correction in (not the whole corrected throughput divided by the slowest type's factor,
    which would speed a network-bound job up on a fast type as much as a compute-bound one)."""
    from dl2.workload.accelerated_speed import AcceleratedSpeedModel
    from dl2.workload.accelerators import ACCELERATOR_TYPES

    k80 = ACCELERATOR_TYPES["K80"].accelerator
    nodes = tuple(NodeSpec(i, Resources(gpu=8, cpu=64, mem_gb=512), "gpu", k80 if i else None) for i in range(2))
    mixed = ClusterSpec(nodes)
    spread = JobAllocation((0, 1), (0,))
    fit = JobFittedSpeedModel(BASE)
    accelerated, corrected = AcceleratedSpeedModel(BASE, mixed), AcceleratedSpeedModel(fit, mixed)
    assert corrected.placed_throughput(spec("a"), spread) == accelerated.placed_throughput(spec("a"), spread)
    fit.observe(view(job("a", TWO, 0.8)))
    assert corrected.placed_throughput(spec("a"), spread) == pytest.approx(
        0.8 * accelerated.placed_throughput(spec("a"), spread)
    )
    assert corrected.placed_throughput(spec("a"), JobAllocation((), ())) == 0.0
