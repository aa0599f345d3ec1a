"""A truth's own speed per (model, accelerator type): the throughput it changes on a two-type cluster
by hand, nothing on a reference cluster, `accelerator-affinity`, the drawn speedups seeded and every earlier draw of a
seed kept, the three-generation cluster, and gavel reading the truth."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from dl2.config import ConfigError
from dl2.core import (
    EMPTY_JOB_ALLOCATION,
    Allocation,
    Architecture,
    ClusterSpec,
    ClusterView,
    JobAllocation,
    JobSpec,
    JobView,
    Resources,
)
from dl2.schedulers.gavel import Gavel
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import SimConfig
from dl2.sim.run import catalogue_speed
from dl2.truth import MIXED_SCENARIOS, SCENARIOS, NewJobType, SpeedShift, Truth, generate, realise, truth_named
from dl2.truth.run import run_on
from dl2.workload.accelerated_speed import AcceleratedSpeedModel, on_accelerators
from dl2.workload.accelerators import ACCELERATOR_TYPES, THREE_GENERATIONS, relative_speed, with_generations
from dl2.workload.catalogue import CATALOGUE, GPU_MODEL_NAMES
from dl2.workload.synthetic import PRESETS
from dl2.workload.synthetic import generate as generate_workload
from testbed.twin.workloads import first_jobs, first_nodes

P100, V100, K80 = (ACCELERATOR_TYPES[name].accelerator for name in ("P100", "V100", "K80"))
NODE = Resources(gpu=8.0, cpu=64.0, mem_gb=512.0)
# node 0: P100, node 1: V100, node 2: the reference accelerator (hosts parameter servers)
TWO_TYPES = ClusterSpec.mixed([(1, NODE, P100), (1, NODE, V100), (1, NODE, None)], name="two-types")


def spec(model: str, job_id: str = "j") -> JobSpec:
    profile = CATALOGUE[model]
    return JobSpec(
        job_id=job_id,
        model=model,
        arrival_s=0.0,
        declared_epochs=1.0,
        samples_per_epoch=profile.samples_per_epoch,
        worker_demand=profile.worker_demand,
        ps_demand=profile.ps_demand,
        max_workers=8,
        max_ps=8,
        architecture=Architecture.PS,
        requested_ps=1,
    )


def small_workload(num_jobs: int = 30):
    return generate_workload(replace(PRESETS["synthetic-small"], num_jobs=num_jobs), 4, "small")


def true_speed(truth: Truth, cluster: ClusterSpec) -> AcceleratedSpeedModel:
    played = on_accelerators(realise(truth, small_workload(4)).speed, cluster)
    assert isinstance(played, AcceleratedSpeedModel)
    return played


def test_a_per_type_speedup_changes_the_throughput_by_hand() -> None:
    # wlm, 1 worker, 1 PS on another server (kappa 1): 1/S = t0 / (r s) + t1 + t2 + t3 + t4 + t5, r the catalogue's
    # relative speed of the type, s the truth's speedup there (2 on the V100, none on the P100)
    truth = Truth("x", accelerator_speedups={"wlm": {"V100": 2.0}})
    speed = true_speed(truth, TWO_TYPES)
    t0, t1, t2, t3, t4, t5 = catalogue_speed().fits["wlm"].coefficients
    rest = t1 + t2 + t3 + t4 + t5
    r = relative_speed("wlm", V100)
    on_v100 = speed.placed_throughput(spec("wlm"), JobAllocation((1,), (2,)))
    assert on_v100 == pytest.approx(1.0 / (t0 / (r * 2.0) + rest), rel=1e-12)
    on_p100 = speed.placed_throughput(spec("wlm"), JobAllocation((0,), (2,)))
    assert on_p100 == catalogue_speed().placed_throughput(spec("wlm"), JobAllocation((0,), (2,)))
    # spread over both types, the job runs at the P100's pace (the slower worker's), which the truth leaves alone
    assert speed.placed_throughput(spec("wlm"), JobAllocation((0, 1), (2,))) == pytest.approx(
        1.0 / (t0 / 2 + t1 + t2 + 2 * t3 + 2 * t4 + t5), rel=1e-12
    )
    # a model the truth does not name keeps the catalogue's per-type factor, to the float
    catalogue_only = AcceleratedSpeedModel(catalogue_speed(), TWO_TYPES)
    allocation = JobAllocation((1,), (2,))
    assert speed.placed_throughput(spec("resnet-50"), allocation) == catalogue_only.placed_throughput(
        spec("resnet-50"), allocation
    )


def test_a_slowdown_on_the_fast_type_can_make_the_spread_job_slower_there() -> None:
    # 0.5 on the V100: the V100 worker (factor 1 / (r 0.5)) is now the slowest whenever r < 2
    truth = Truth("x", accelerator_speedups={"wlm": {"V100": 0.5}}, shifts={"wlm": SpeedShift(compute=1.5)})
    speed = true_speed(truth, TWO_TYPES)
    t0, t1, t2, t3, t4, t5 = catalogue_speed().fits["wlm"].coefficients
    r = relative_speed("wlm", V100)
    assert r < 2.0
    expected = 1.0 / (1.5 * t0 / (r * 0.5) / 2 + t1 + t2 + 2 * t3 + 2 * t4 + t5)
    assert speed.placed_throughput(spec("wlm"), JobAllocation((0, 1), (2,))) == pytest.approx(expected, rel=1e-12)


def test_a_new_type_takes_its_own_speedups_not_its_bases() -> None:
    new = NewJobType("lm-large", base="wlm", declared="wlm", share=1.0)
    truth = Truth("x", new_types=(new,), accelerator_speedups={"wlm": {"V100": 3.0}, "lm-large": {"V100": 0.5}})
    cluster = realise(truth, small_workload(4))
    job = cluster.workload.jobs[0].spec
    assert cluster.speed.accelerator_speedups(job) == ("lm-large", {"V100": 0.5})
    assert cluster.speed.accelerator_speedups(replace(job, job_id="not-new")) == ("wlm", {"V100": 3.0})


def test_on_a_reference_cluster_a_heterogeneous_truth_is_the_catalogue_exactly() -> None:
    workload = small_workload(30)
    config = SimConfig.realistic(seed=0)
    build = lambda speed, compat: make_scheduler("optimus", speed, compat)  # noqa: E731
    catalogue = run_on(realise(SCENARIOS["catalogue"], workload), build, config)
    affinity = run_on(realise(MIXED_SCENARIOS["accelerator-affinity"], workload), build, config)
    assert [job.jct_s for job in affinity.jobs] == [job.jct_s for job in catalogue.jobs]
    # and a drawn truth runs as it did before it drew speedups (they act on named types only)
    drawn = generate(3)
    plain = run_on(realise(replace(drawn, accelerator_speedups={}), workload), build, config)
    assert [job.jct_s for job in run_on(realise(drawn, workload), build, config).jobs] == [
        job.jct_s for job in plain.jobs
    ]


def test_accelerator_affinity_inverts_who_gains_from_the_v100() -> None:
    truth = truth_named("accelerator-affinity")
    assert "accelerator-affinity" not in SCENARIOS and not truth.is_catalogue
    true = {model: relative_speed(model, V100) * truth.speedups_of(model).get("V100", 1.0) for model in GPU_MODEL_NAMES}
    catalogue = {model: relative_speed(model, V100) for model in GPU_MODEL_NAMES}
    assert catalogue["resnet-50"] > catalogue["seq2seq"] > catalogue["wlm"]
    assert true["seq2seq"] > true["wlm"] > true["resnet-50"] > true["resnext-110"]
    assert true["wlm"] == pytest.approx(1.8 * catalogue["wlm"]) and true["resnet-50"] == pytest.approx(
        0.75 * catalogue["resnet-50"]
    )


def test_drawn_speedups_are_seeded_and_every_earlier_draw_stays() -> None:
    assert generate(7).accelerator_speedups == generate(7).accelerator_speedups != generate(8).accelerator_speedups
    speedups = generate(7).accelerator_speedups
    assert set(speedups) == set(GPU_MODEL_NAMES)
    assert all(set(per_type) == set(ACCELERATOR_TYPES) for per_type in speedups.values())
    assert all(0.25 <= factor <= 4.0 for per_type in speedups.values() for factor in per_type.values())
    # what `generate` drew before the speedups existed (pinned from that version): the same floats
    for seed, scale, spread, density, new_types, wlm_compute, dssm_overhead in (
        (0, 2.266, 0.037, 1.777, [("resnext-110", "seq2seq", 0.13), ("resnet-50", "inception-bn", 0.18)],
         0.935860024951371, 0.7405105860067581),
        (7, 1.163, 0.391, 1.303, [("resnet-50", "resnet-50", 0.199), ("resnet-50", "resnet-50", 0.157)],
         0.946297140391298, 1.0396834923502352),
        (9100, 2.184, 0.486, 1.632, [], 0.7227964509839151, 0.859562865031519),
    ):  # fmt: skip
        truth = generate(seed)
        assert (truth.interference_scale, truth.interference_spread, truth.arrival_density) == (scale, spread, density)
        assert [(new.base, new.declared, new.share) for new in truth.new_types] == new_types
        assert truth.shifts["wlm"].compute == wlm_compute and truth.shifts["dssm"].overhead == dssm_overhead


@pytest.mark.parametrize(
    ("speedups", "match"),
    [({"bert": {"V100": 2.0}}, "accelerator_speedups"), ({"wlm": {"H100": 2.0}}, "accelerator type")],
)
def test_unknown_models_and_types_are_refused(speedups: dict[str, dict[str, float]], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Truth("x", accelerator_speedups=speedups)


def test_three_generations_keep_their_shares_in_every_prefix() -> None:
    cluster = with_generations(ClusterSpec.homogeneous(30, NODE, kind="8gpu"))
    assert [node.kind for node in cluster.nodes[:4]] == ["V100", "P100", "K80", "V100"]
    assert Counter(node.kind for node in cluster.nodes) == {"V100": 10, "P100": 10, "K80": 10}
    for size in range(1, 31):
        counts = Counter(node.accelerator.name for node in cluster.nodes[:size] if node.accelerator is not None)
        assert all(abs(counts[name] - share * size) < 1.0 for name, share in THREE_GENERATIONS)
    assert [node.capacity for node in cluster.nodes] == [NODE] * 30


def test_gavel_reading_the_truth_reads_its_per_type_speeds() -> None:
    # one server per generation (V100, P100, K80); a wlm job at one worker, its PS on another server
    cluster = with_generations(ClusterSpec.homogeneous(3, NODE))
    truth = MIXED_SCENARIOS["accelerator-affinity"]
    played = realise(truth, replace(small_workload(4), cluster=cluster))
    job = replace(spec("wlm", "a"), requested_ps=1, requested_workers=1)
    view = ClusterView(0, 0, 60, cluster, (JobView(job, 0, 0, EMPTY_JOB_ALLOCATION, 0, 0, 0),), Allocation())
    reading_truth, reading_catalogue = Gavel(played.speed), Gavel(catalogue_speed())
    reading_truth.schedule(view)
    reading_catalogue.schedule(view)
    t0 = catalogue_speed().fits["wlm"].coefficients[0]
    inverse = [1.0 / reading_catalogue.throughputs(job, cluster)[kind] for kind in range(3)]
    true_inverse = [1.0 / reading_truth.throughputs(job, cluster)[kind] for kind in range(3)]
    # types in order K80, P100, V100 (by name); the truth's speedup s moves only the computation: t0 / r -> t0 / (r s)
    for kind, name in enumerate(("K80", "P100", "V100")):
        r, s = relative_speed("wlm", ACCELERATOR_TYPES[name].accelerator), truth.speedups_of("wlm").get(name, 1.0)
        assert true_inverse[kind] - inverse[kind] == pytest.approx(t0 / (r * s) - t0 / r, rel=1e-9, abs=1e-15)
    result = run_on(played, lambda speed, compat: make_scheduler("gavel", speed, compat), SimConfig.realistic(), True)
    assert all(j.jct_s is not None for j in result.jobs)


def test_a_truth_on_the_first_nodes_of_a_mixed_cluster_runs_to_the_end() -> None:
    workload = first_nodes(first_jobs(small_workload(20), 20), 3)
    mixed = replace(workload, cluster=with_generations(workload.cluster))
    cluster = realise(generate(2), mixed)
    result = run_on(cluster, lambda speed, compat: make_scheduler("drf", speed, compat), SimConfig.realistic(seed=0))
    assert all(j.jct_s is not None for j in result.jobs)


def test_on_a_mixed_cluster_gavel_reading_the_catalogue_truth_is_gavel_reading_the_catalogue() -> None:
    workload = first_jobs(small_workload(20), 20)
    mixed = replace(workload, cluster=with_generations(workload.cluster))
    cluster = realise(SCENARIOS["catalogue"], mixed)
    build = lambda speed, compat: make_scheduler("gavel", speed, compat)  # noqa: E731
    config = SimConfig.realistic(seed=1)
    reading_truth, reading_catalogue = run_on(cluster, build, config, True), run_on(cluster, build, config)
    assert [job.jct_s for job in reading_truth.jobs] == [job.jct_s for job in reading_catalogue.jobs]


def test_a_knee_job_keeps_its_knee_on_a_faster_type() -> None:
    """A job past its scaling knee holds its computation at t0/k on every accelerator type, that type's factor
    applied: 1/S = (t0/2)/r + t1/2 + ... (the type's speed-up on the split computation) + (t0/r)(1/1 - 1/2)."""
    from dl2.truth import ScalingKnee

    truth = Truth("knee", knee=ScalingKnee(share=1.0, workers=1))
    workload = small_workload(4)
    cluster = realise(truth, workload)
    job = next(j.spec for j in workload.jobs if j.spec.job_id in cluster.knee_of)
    job = replace(job, model="wlm", architecture=Architecture.PS)
    speed = on_accelerators(cluster.speed, TWO_TYPES)
    assert isinstance(speed, AcceleratedSpeedModel)
    t0 = catalogue_speed().fits["wlm"].coefficients[0]
    r = relative_speed("wlm", V100)
    two_on_v100 = JobAllocation((1, 1), (2,))
    unheld = 1.0 / on_accelerators(catalogue_speed(), TWO_TYPES).placed_throughput(job, two_on_v100)
    assert 1.0 / speed.placed_throughput(job, two_on_v100) == pytest.approx(unheld + (t0 / r) * (1 - 1 / 2), rel=1e-12)
    # one worker: before the knee, nothing held
    one_on_v100 = JobAllocation((1,), (2,))
    assert speed.placed_throughput(job, one_on_v100) == on_accelerators(catalogue_speed(), TWO_TYPES).placed_throughput(
        job, one_on_v100
    )
