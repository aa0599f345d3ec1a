"""A cluster whose truth departs from the catalogue (`dl2.truth`): the speed and interference it plays, computed by
hand on small cases; new job types under catalogue labels; the catalogue truth as the exact control; drawn truths
seeded; and the oracle against a scheduler that reads the catalogue."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dl2.cli.main import main
from dl2.config import ConfigError
from dl2.core import Architecture, JobAllocation
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import Mode, RescaleCost, RescaleKind, SimConfig
from dl2.sim.run import run_one, speed_model
from dl2.sim.simulator import SimResult
from dl2.truth import SCENARIOS, NewJobType, SpeedShift, Truth, draw, generate, realise, truth_named
from dl2.truth.run import run_on
from dl2.workload.catalogue import CATALOGUE
from dl2.workload.interference import default_matrix
from dl2.workload.registry import load_workloads
from dl2.workload.speed_fit import ParametricSpeedModel, placement_kappa
from dl2.workload.synthetic import PRESETS
from dl2.workload.synthetic import generate as generate_workload
from testbed.twin.workloads import first_jobs, first_nodes

CONFIG = SimConfig.realistic(seed=0)
CATALOGUE_SPEED = ParametricSpeedModel()


def small_workload(num_jobs: int = 40):
    return generate_workload(replace(PRESETS["synthetic-small"], num_jobs=num_jobs), 4, "small")


def heuristic(name: str):
    return lambda speed, compat: make_scheduler(name, speed, compat)


def jcts(result: SimResult) -> dict[str, float | None]:
    return {job.job_id: job.jct_s for job in result.jobs}


def test_the_catalogue_truth_plays_exactly_the_catalogue():
    workload = small_workload()
    cluster = realise(SCENARIOS["catalogue"], workload)
    assert cluster.truth.is_catalogue and cluster.new_type_of == {}
    for name in ("drf", "optimus"):
        assert jcts(run_on(cluster, heuristic(name), CONFIG)) == jcts(run_one(workload, heuristic(name), CONFIG))


def test_a_shift_scales_its_terms_of_the_fitted_speed():
    """1/S = c t0/w + o (t1 + t4 w + t5 p) + kappa m (t2/p + s t3 w/p), against the fit's coefficients."""
    shift = SpeedShift(compute=2.0, communication=1.5, parameter_server=3.0, overhead=0.5)
    truth = Truth("hand", shifts={"vgg-16": shift})
    workload = small_workload()
    job = next(j for j in workload.jobs if j.spec.architecture is Architecture.PS)
    spec = replace(job.spec, model="vgg-16")
    speed = realise(truth, workload).speed
    allocation = JobAllocation(worker_nodes=(0, 0, 1), ps_nodes=(0, 1))
    t0, t1, t2, t3, t4, t5 = CATALOGUE_SPEED.fits["vgg-16"].coefficients
    kappa = placement_kappa(CATALOGUE["vgg-16"], allocation.worker_nodes, allocation.ps_nodes)
    w, p = 3, 2
    inverse = 2.0 * t0 / w + 0.5 * (t1 + t4 * w + t5 * p) + kappa * 1.5 * (t2 / p + 3.0 * t3 * w / p)
    assert speed.placed_throughput(spec, allocation) == pytest.approx(1.0 / inverse, rel=1e-12)
    # a type the truth does not name keeps the catalogue's speed exactly
    other = replace(spec, model="resnet-50")
    assert speed.placed_throughput(other, allocation) == CATALOGUE_SPEED.placed_throughput(other, allocation)
    # slower communication and parameter servers always slow a job down; faster compute speeds it up
    slow = realise(Truth("slow", shifts={"vgg-16": SpeedShift(communication=2.0)}), workload).speed
    fast = realise(Truth("fast", shifts={"vgg-16": SpeedShift(compute=0.5)}), workload).speed
    base = CATALOGUE_SPEED.placed_throughput(spec, allocation)
    assert slow.placed_throughput(spec, allocation) < base < fast.placed_throughput(spec, allocation)


def test_the_speed_shift_scenario_is_about_30_percent_off_and_type_dependent():
    workload = first_nodes(first_jobs(load_workloads("philly")[0], 300), 16)
    cluster = realise(SCENARIOS["speed-shift"], workload)
    ratios: dict[str, list[float]] = {}
    for job in cluster.workload.jobs:
        spec = job.spec
        for workers, ps in ((spec.requested_workers, spec.requested_ps), (4, 4), (8, 8), (2, 1)):
            allocation = JobAllocation((0,) * workers, (1,) * ps)
            ratio = cluster.speed.placed_throughput(spec, allocation) / CATALOGUE_SPEED.placed_throughput(
                spec, allocation
            )
            ratios.setdefault(spec.model, []).append(ratio)
    departure = np.mean([abs(r - 1.0) for values in ratios.values() for r in values])
    assert 0.25 < departure < 0.35
    means = {model: float(np.mean(values)) for model, values in ratios.items()}
    assert means["vgg-16"] < 0.8 and means["resnext-110"] > 1.2  # slower for some types, faster for others


def test_new_types_run_under_catalogue_labels_with_their_own_speed_and_demands():
    truth = SCENARIOS["new-types"]
    workload = first_nodes(first_jobs(load_workloads("philly")[0], 400), 16)
    cluster = realise(truth, workload)
    share = len(cluster.new_type_of) / workload.num_jobs
    assert 0.2 <= share <= 0.32  # 25% drawn
    new = {t.name: t for t in truth.new_types}
    originals = {job.spec.job_id: job for job in workload.jobs}
    for job in cluster.workload.jobs:
        kind = cluster.new_type_of.get(job.spec.job_id)
        if kind is None:
            assert job == originals[job.spec.job_id]
            continue
        spec, before = job.spec, originals[job.spec.job_id].spec
        assert spec.model == new[kind].declared and spec.model in CATALOGUE
        assert spec.worker_demand == new[kind].worker_demand and spec.ps_demand == new[kind].ps_demand
        # what a reader of the catalogue expects of the job takes as long as before: only the truth departs
        expected = [
            s.declared_epochs * s.samples_per_epoch / CATALOGUE_SPEED.throughput(s.model, s.requested_ps, workers)
            for s, workers in ((spec, spec.requested_workers), (before, before.requested_workers))
        ]
        assert expected[0] == pytest.approx(expected[1], rel=1e-9)
        allocation = JobAllocation((0,) * spec.requested_workers, (1,) * spec.requested_ps)
        true_speed = cluster.speed.placed_throughput(spec, allocation)
        base = replace(spec, model=new[kind].base)
        assert true_speed != pytest.approx(CATALOGUE_SPEED.placed_throughput(spec, allocation), rel=1e-3)
        assert true_speed < CATALOGUE_SPEED.placed_throughput(base, allocation) or kind == "graph-net"
    assert {spec.model for spec in (j.spec for j in cluster.oracle_workload().jobs)} >= set(new)


def test_interference_arrivals_and_resizes_as_the_truth_says():
    profiled = default_matrix()
    workload = small_workload()
    doubled = realise(SCENARIOS["interference-2x"], workload).interference
    assert doubled.slowdown("vgg-16", "resnet-50") == pytest.approx(1 + 2 * (profiled["vgg-16"]["resnet-50"] - 1))
    dense = realise(SCENARIOS["dense-arrivals"], workload).workload
    assert [j.spec.arrival_s for j in dense.jobs] == [j.spec.arrival_s / 2 for j in workload.jobs]
    checkpoint = RescaleCost(kind=RescaleKind.CHECKPOINT)
    cluster = realise(Truth("restarts", rescale=checkpoint), workload)
    assert cluster.config(CONFIG).rescale == checkpoint and cluster.config(CONFIG).seed == CONFIG.seed


def test_a_new_type_interferes_as_its_base():
    truth = Truth("one", new_types=(NewJobType("big", base="vgg-16", declared="wlm", share=0.5),))
    cluster = realise(truth, small_workload())
    job_id = next(iter(cluster.new_type_of))
    spec = next(j.spec for j in cluster.workload.jobs if j.spec.job_id == job_id)
    interference = cluster.interference
    assert interference.table[interference.type_index(spec)] == interference.table[interference.model_index["vgg-16"]]


def test_drawn_truths_are_seeded_valid_and_differ():
    assert generate(7) == generate(7) and generate(7) != generate(8)
    assert truth_named("seed-7") == generate(7)
    workload = small_workload(30)
    for seed in range(12):
        truth = generate(seed)
        assert not truth.is_catalogue
        cluster = realise(truth, workload)
        result = run_on(cluster, heuristic("drf"), CONFIG)
        assert all(job.jct_s is not None for job in result.jobs)
    with pytest.raises(ConfigError, match="seed-N"):
        truth_named("speed-shifts")


def test_a_truth_drawn_with_every_departure_keeps_generates_draws_and_adds_the_rest():
    truths = [draw(seed) for seed in range(16)]
    assert truth_named("drawn-7") == draw(7) == draw(7) != draw(8)
    for seed, truth in enumerate(truths):
        assert truth.name == f"drawn-{seed}"
        assert replace(truth, name=f"seed-{seed}", interference_spread=0.0, knee=None, slow_nodes=None) == replace(
            generate(seed), interference_spread=0.0
        )
        assert 0.5 <= truth.interference_spread <= 0.95
    # with even odds each, sixteen draws hold both kinds and both absences
    assert {t.knee is None for t in truths} == {True, False} == {t.slow_nodes is None for t in truths}
    workload = small_workload(30)
    for truth in truths[:6]:
        result = run_on(realise(truth, workload), heuristic("drf"), CONFIG)
        assert all(job.jct_s is not None for job in result.jobs)


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: Truth("x", shifts={"bert": SpeedShift()}), "shifts"),
        (lambda: SpeedShift(compute=0.0), "compute"),
        (lambda: NewJobType("resnet-50", base="vgg-16", declared="wlm", share=0.1), "catalogue lacks"),
        (lambda: NewJobType("x", base="bert", declared="wlm", share=0.1), "base"),
        (lambda: Truth("x", new_types=(NewJobType("a", "wlm", "wlm", 0.6), NewJobType("b", "wlm", "wlm", 0.6))),
         "share"),
    ],
)  # fmt: skip
def test_a_bad_truth_is_refused_naming_the_field(build, match):
    with pytest.raises((ConfigError, ValueError), match=match):
        build()


def test_the_oracle_reads_the_truth_and_a_deployment_the_catalogue():
    workload = first_nodes(first_jobs(load_workloads("philly")[0], 120), 12)
    cluster = realise(SCENARIOS["new-types"], workload)
    catalogue = run_on(cluster, heuristic("speedup-hull"), CONFIG)
    oracle = run_on(cluster, heuristic("speedup-hull"), CONFIG, oracle=True)
    assert jcts(catalogue) != jcts(oracle)  # the oracle decides otherwise: it knows the new types' speeds
    with pytest.raises(ValueError, match="realistic"):
        run_on(cluster, heuristic("drf"), SimConfig.compat())
    assert speed_model(Mode.REALISTIC) is not cluster.speed


def test_dl2_simulate_plays_a_truth_and_labels_the_oracle(capsys):
    import json

    assert main(["simulate", "-w", "synthetic-small", "-s", "drf", "--truth", "seed-3", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["truth"] == "seed-3" and report["oracle"] is False
    assert main(["simulate", "-w", "synthetic-small", "-s", "optimus", "--truth", "seed-3", "--oracle", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["oracle"] is True
    assert main(["simulate", "-w", "synthetic-small", "-s", "drf", "--oracle"]) == 2
    assert "--oracle reads a truth" in capsys.readouterr().err
