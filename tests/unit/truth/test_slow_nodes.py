"""Degraded GPU servers (`dl2.truth.model.SlowNodes`): a worker's computation there takes `compute` times as long,
a job at its slowest worker's pace, computed by hand on small cases; parameter servers, CPU-only workers and every
other node exactly as the catalogue says; the draw seeded, in a stream of its own."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dl2.config import ConfigError
from dl2.core import Architecture, ClusterSpec, JobAllocation, JobSpec, NodeSpec, Resources
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import SimConfig
from dl2.sim.metrics import summarize
from dl2.truth import SCENARIOS, NewJobType, ScalingKnee, SlowNodes, SpeedShift, Truth, generate, realise
from dl2.truth.realise import slow_nodes
from dl2.truth.run import run_on
from dl2.truth.speed import TrueSpeedModel
from dl2.workload.accelerated_speed import (
    AcceleratedSpeedModel,
    FastestAcceleratorSpeed,
    on_accelerators,
    on_fastest_accelerators,
)
from dl2.workload.accelerators import ACCELERATOR_TYPES, relative_speed
from dl2.workload.catalogue import CATALOGUE
from dl2.workload.speed_fit import ParametricSpeedModel, allreduce_inverse_speed, placement_kappa
from dl2.workload.synthetic import PRESETS
from dl2.workload.synthetic import generate as generate_workload

CATALOGUE_SPEED = ParametricSpeedModel()
NODE = Resources(gpu=8.0, cpu=64.0, mem_gb=512.0)
CPU_NODE = Resources(cpu=64.0, mem_gb=512.0)
FOUR = ClusterSpec.homogeneous(4, NODE, name="four")
SLOW = Truth("hand", slow_nodes=SlowNodes(share=0.25, compute=3.0))


def workload(num_jobs: int = 40):
    return generate_workload(replace(PRESETS["synthetic-small"], num_jobs=num_jobs), 4, "small")


def job(model: str = "vgg-16", architecture: Architecture = Architecture.PS, gpu: float = 1.0) -> JobSpec:
    demand = Resources(gpu=gpu, cpu=4, mem_gb=8)
    if architecture is Architecture.ALLREDUCE:
        return JobSpec("a", model, 0.0, 10.0, 1000.0, demand, Resources(), 8, 0, architecture, 1, 0)
    return JobSpec("a", model, 0.0, 10.0, 1000.0, demand, Resources(cpu=4, mem_gb=8), 8, 8, architecture)


def slow_on(nodes: frozenset[int], truth: Truth = SLOW, cluster: ClusterSpec = FOUR):
    """The truth's speed with these nodes slow, as the simulator plays it on `cluster`."""
    speed = on_accelerators(TrueSpeedModel(truth, {}, CATALOGUE_SPEED, None, nodes), cluster)
    assert isinstance(speed, AcceleratedSpeedModel)
    return speed


def compute_shift(model: str, compute: float = 3.0) -> TrueSpeedModel:
    """Every worker's computation `compute` times as long, wherever it runs."""
    return TrueSpeedModel(Truth("shift", shifts={model: SpeedShift(compute=compute)}), {}, CATALOGUE_SPEED)


def test_one_worker_on_a_slow_node_takes_compute_times_its_computation():
    """1/S = 3 t0/w + t1 + kappa (t2/p + t3 w/p) + t4 w + t5 p: the computation term, and only it, tripled."""
    spec, one = job(), JobAllocation((1,), (0,))
    speed = slow_on(frozenset({1}))
    t0, t1, t2, t3, t4, t5 = CATALOGUE_SPEED.fits["vgg-16"].coefficients
    kappa = placement_kappa(CATALOGUE["vgg-16"], one.worker_nodes, one.ps_nodes)
    inverse = 3.0 * t0 + t1 + kappa * (t2 + t3) + t4 + t5
    assert speed.placed_throughput(spec, one) == pytest.approx(1.0 / inverse, rel=1e-12)
    assert speed.placed_throughput(spec, one) == compute_shift("vgg-16").placed_throughput(spec, one)
    assert speed.placed_throughput(spec, one) < CATALOGUE_SPEED.placed_throughput(spec, one)


def test_a_job_with_one_worker_on_a_slow_node_runs_at_the_slow_pace():
    speed = slow_on(frozenset({1}))
    for spec in (job(), job("resnet-50", Architecture.ALLREDUCE)):
        ps = (3,) if spec.architecture is Architecture.PS else ()
        two = JobAllocation((0, 1), ps)
        assert speed.placed_throughput(spec, two) == compute_shift(spec.model).placed_throughput(spec, two)
    ring = job("resnet-50", Architecture.ALLREDUCE)
    fit, profile = CATALOGUE_SPEED.fits["resnet-50"], CATALOGUE["resnet-50"]
    inverse = allreduce_inverse_speed(fit, profile, 2, True, (3.0, 1.0, 1.0, 1.0))
    assert speed.placed_throughput(ring, JobAllocation((0, 1), ())) == 1.0 / inverse


def test_off_the_slow_nodes_and_for_parameter_servers_the_catalogue_exactly():
    speed = slow_on(frozenset({1}))
    spec = job()
    for allocation in (JobAllocation((0, 2), (1,)), JobAllocation((0,), (1, 1)), JobAllocation((2, 3), (0,))):
        assert speed.placed_throughput(spec, allocation) == CATALOGUE_SPEED.placed_throughput(spec, allocation)
    # a job whose workers use no GPU does not touch the degraded part of the server
    cpu = job("dssm", gpu=0.0)
    allocation = JobAllocation((1,), (1,))
    assert speed.placed_throughput(cpu, allocation) == CATALOGUE_SPEED.placed_throughput(cpu, allocation)


def test_a_slow_node_multiplies_its_accelerator_types_factor():
    k80 = ACCELERATOR_TYPES["K80"].accelerator
    cluster = ClusterSpec.mixed([(2, NODE, k80), (2, NODE, None)], name="k80s")
    spec, allocation = job("wlm"), JobAllocation((0, 2), (3,))
    speed = slow_on(frozenset({0}), cluster=cluster)
    slowest = 1.0 / relative_speed("wlm", k80) * 3.0
    expected = compute_shift("wlm", slowest).placed_throughput(spec, allocation)
    assert speed.placed_throughput(spec, allocation) == pytest.approx(expected, rel=1e-12)
    # the slowest worker sets the pace: a slow reference node (3) is still faster than a K80 is for wlm (3.36)
    healthy = on_accelerators(TrueSpeedModel(SLOW, {}, CATALOGUE_SPEED), cluster).placed_throughput(spec, allocation)
    assert slow_on(frozenset({2}), cluster=cluster).placed_throughput(spec, allocation) == healthy


def test_a_knee_job_on_a_slow_node_holds_its_slowed_computation():
    truth = Truth("both", knee=ScalingKnee(share=1.0, workers=1), slow_nodes=SlowNodes(share=0.25))
    speed = on_accelerators(TrueSpeedModel(truth, {}, CATALOGUE_SPEED, {"a": 1}, frozenset({1})), FOUR)
    shifted = Truth("both", shifts={"vgg-16": SpeedShift(compute=3.0)}, knee=ScalingKnee(share=1.0, workers=1))
    expected = TrueSpeedModel(shifted, {}, CATALOGUE_SPEED, {"a": 1})
    two = JobAllocation((0, 1), (2,))
    assert speed.placed_throughput(job(), two) == pytest.approx(expected.placed_throughput(job(), two), rel=1e-12)


def test_without_slow_nodes_nothing_is_wrapped_and_bounds_ignore_them():
    plain = TrueSpeedModel(SLOW, {}, CATALOGUE_SPEED)  # no nodes drawn: nothing to slow
    assert plain.node_compute_factors() == {} and on_accelerators(plain, FOUR) is plain
    slowed = TrueSpeedModel(SLOW, {}, CATALOGUE_SPEED, None, frozenset({1}))
    assert slowed.node_compute_factors() == {1: 3.0}
    # a lower bound takes every worker at its type's fastest: slow nodes (factors >= 1) only make jobs slower
    assert on_fastest_accelerators(slowed, FOUR) is slowed
    k80 = ACCELERATOR_TYPES["K80"].accelerator
    mixed = ClusterSpec.mixed([(2, NODE, k80), (2, NODE, None)])
    allocation = JobAllocation((1,), (3,))
    bound = FastestAcceleratorSpeed(slowed, mixed).placed_throughput(job(), allocation)
    assert bound == FastestAcceleratorSpeed(plain, mixed).placed_throughput(job(), allocation)
    assert bound > on_accelerators(slowed, mixed).placed_throughput(job(), allocation)


def test_node_factors_below_one_are_refused():
    class Faster(ParametricSpeedModel):
        def node_compute_factors(self):
            return {0: 0.5}

    with pytest.raises(ValueError, match="at least 1"):
        AcceleratedSpeedModel(Faster(), FOUR)


def test_the_draw_is_seeded_among_the_gpu_servers_in_a_stream_of_its_own():
    # GPU servers at the even indices, CPU-only ones at the odd
    nodes = tuple(NodeSpec(i, NODE if i % 2 == 0 else CPU_NODE) for i in range(80))
    cluster = ClusterSpec(nodes, "half-gpu")
    gpu = {i for i in range(80) if i % 2 == 0}
    drawn = slow_nodes(SLOW, cluster)
    assert drawn <= gpu and len(drawn) == 10 and drawn == slow_nodes(SLOW, cluster)
    assert slow_nodes(replace(SLOW, seed=1), cluster) != drawn
    for share, count in ((0.01, 1), (0.5, 20), (1.0, 40)):
        assert len(slow_nodes(replace(SLOW, slow_nodes=SlowNodes(share=share)), cluster)) == count
    assert slow_nodes(SLOW, ClusterSpec.homogeneous(3, CPU_NODE)) == frozenset()
    assert slow_nodes(Truth("none"), cluster) == frozenset()
    # adding slow nodes moves no other draw
    jobs = workload(200)
    new = NewJobType("big", base="vgg-16", declared="wlm", share=0.3)
    base = Truth("n", new_types=(new,), seed=3, knee=ScalingKnee(share=0.4), interference_spread=0.3)
    without, with_slow = realise(base, jobs), realise(replace(base, slow_nodes=SlowNodes(share=0.25)), jobs)
    assert with_slow.new_type_of == without.new_type_of and with_slow.knee_of == without.knee_of
    assert with_slow.workload == without.workload
    assert with_slow.interference.table == without.interference.table
    assert without.slow_nodes == frozenset() and len(with_slow.slow_nodes) == 4  # a quarter of 16 servers
    assert with_slow.speed.node_compute_factors() == dict.fromkeys(sorted(with_slow.slow_nodes), 3.0)


def test_the_scenario_and_truths_without_slow_nodes():
    truth = SCENARIOS["slow-nodes"]
    assert truth.slow_nodes == SlowNodes(share=0.25, compute=3.0) and not truth.is_catalogue
    assert replace(truth, slow_nodes=SlowNodes(share=0.25, compute=1.0)).is_catalogue
    assert generate(5).slow_nodes is None and realise(generate(5), workload(10)).slow_nodes == frozenset()
    jobs = workload(10)
    assert realise(truth, jobs).workload.jobs == realise(SCENARIOS["catalogue"], jobs).workload.jobs


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: SlowNodes(share=0.0), "share"),
        (lambda: SlowNodes(share=1.5), "share"),
        (lambda: SlowNodes(share=0.2, compute=0.5), "compute"),
        (lambda: SlowNodes(share=0.2, compute=11.0), "compute"),
    ],
)
def test_a_bad_slow_nodes_is_refused_naming_the_field(build, match):
    with pytest.raises((ConfigError, ValueError), match=match):
        build()


def test_a_run_on_slow_nodes_finishes_and_is_slower():
    jobs = workload(30)
    build = lambda speed, compat: make_scheduler("drf", speed, compat)  # noqa: E731
    config = SimConfig.realistic(seed=0)
    slow = run_on(realise(SCENARIOS["slow-nodes"], jobs), build, config)
    catalogue = run_on(realise(SCENARIOS["catalogue"], jobs), build, config)
    assert all(j.jct_s is not None for j in slow.jobs)
    assert summarize(slow).avg_jct_s > summarize(catalogue).avg_jct_s
