"""Synthetic workloads: determinism, shape, and presets that reproduce the statistics of their traces."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from dl2.core import Resources
from dl2.paths import traces_dir
from dl2.workload.describe import describe
from dl2.workload.mapping import TraceMapping
from dl2.workload.synthetic import (
    ALIBABA_MEAN_NODE,
    PRESETS,
    SyntheticSpec,
    generate,
    lognormal_parameters,
    scaled,
)

SMALL = PRESETS["synthetic-small"]


def stats(trace: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((traces_dir() / trace / "stats.json").read_text())
    return result


def test_same_seed_same_jobs_and_different_seed_different_jobs() -> None:
    first = generate(SMALL, seed=5, name="a")
    assert generate(SMALL, seed=5, name="a") == first
    other = generate(SMALL, seed=6, name="a")
    assert [job.spec.arrival_s for job in other.jobs] != [job.spec.arrival_s for job in first.jobs]


def test_workload_shape() -> None:
    workload = generate(SMALL, seed=0, name="toy")
    assert (workload.name, workload.num_jobs, workload.slot_s) == ("toy", 200, 600.0)
    assert [job.spec.job_id for job in workload.jobs] == [f"syn-{k}" for k in range(200)]
    arrivals = [job.spec.arrival_s for job in workload.jobs]
    assert arrivals == sorted(arrivals) and arrivals[0] > 0
    assert {job.spec.requested_workers for job in workload.jobs} <= {1, 2, 4, 8}
    durations = [job.trace_duration_s for job in workload.jobs]
    assert all(d is not None and SMALL.duration_min_s <= d <= SMALL.duration_max_s for d in durations)
    assert workload.cluster.num_nodes == 16
    assert workload.cluster.total_capacity == Resources(gpu=128, cpu=1024, mem_gb=8192)
    assert "seed 0" in workload.source


def test_spec_with_defaults_only() -> None:
    spec = SyntheticSpec(
        num_jobs=30,
        arrivals_per_hour=6.0,
        num_gpus_probs={2: 3.0},
        duration_median_s=60,
        duration_p90_s=600,
        num_nodes=2,
    )
    workload = generate(spec, seed=0, name="plain")
    assert {job.spec.requested_workers for job in workload.jobs} == {2}  # weights need not sum to 1
    assert workload.cluster.num_nodes == 2


def test_lognormal_parameters_give_the_median_and_p90() -> None:
    mu, sigma = lognormal_parameters(513.0, 13360.0)
    assert math.exp(mu) == pytest.approx(513.0)
    assert math.exp(mu + 1.2815515655446004 * sigma) == pytest.approx(13360.0)


def test_durations_are_clipped() -> None:
    spec = replace(SMALL, num_jobs=2000, duration_min_s=1000.0, duration_max_s=5000.0)
    durations = [job.trace_duration_s for job in generate(spec, seed=1, name="c").jobs]
    assert min(d or 0 for d in durations) == 1000.0
    assert max(d or 0 for d in durations) == 5000.0


def test_poisson_arrivals_have_the_rate_and_cv_one() -> None:
    spec = replace(SMALL, num_jobs=5000)
    summary = describe(generate(spec, seed=2, name="p"))
    assert summary["arrivals_per_hour"]["mean"] == pytest.approx(20.0, rel=0.05)
    assert summary["interarrival_s"]["cv"] == pytest.approx(1.0, abs=0.05)


def test_diurnal_arrivals_follow_the_profile() -> None:
    profile = tuple([0.0] * 12 + [2.0] * 12)  # nothing in the first half of each day
    spec = replace(SMALL, num_jobs=2000, arrival="diurnal", diurnal_profile=profile)
    hours = [int(job.spec.arrival_s // 3600) % 24 for job in generate(spec, seed=3, name="d").jobs]
    assert min(hours) >= 12
    assert describe(generate(spec, seed=3, name="d"))["arrivals_per_hour"]["mean"] == pytest.approx(20.0, rel=0.1)


def test_mapping_is_applied() -> None:
    spec = replace(SMALL, mapping=TraceMapping(models=("seq2seq",), allreduce_fraction=1.0))
    jobs = generate(spec, seed=0, name="m").jobs
    assert {job.spec.model for job in jobs} == {"seq2seq"}
    assert {job.spec.max_ps for job in jobs} == {0}


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"num_jobs": 0}, "num_jobs"),
        ({"num_nodes": 0}, "num_nodes"),
        ({"arrival": "bursty"}, "arrival"),
        ({"arrivals_per_hour": 0.0}, "arrivals_per_hour"),
        ({"arrivals_per_hour": math.inf}, "arrivals_per_hour"),
        ({"diurnal_profile": (1.0,) * 23}, "24 values"),
        ({"diurnal_profile": (0.0,) * 24}, "positive rate"),
        ({"diurnal_profile": (-1.0,) + (1.0,) * 23}, ">= 0"),
        ({"num_gpus_probs": {}}, "empty"),
        ({"num_gpus_probs": {0: 1.0}}, "keys"),
        ({"num_gpus_probs": {1: -0.5, 2: 1.0}}, ">= 0"),
        ({"num_gpus_probs": {1: 0.0}}, "all be zero"),
        ({"duration_p90_s": 100.0}, "duration_median_s"),
        ({"duration_min_s": 10.0**9}, "duration_min_s"),
        ({"slot_s": -1.0}, "slot_s"),
    ],
)
def test_invalid_spec(change: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValueError, match="SyntheticSpec") as caught:
        replace(SMALL, **change)
    assert fragment in str(caught.value)


def test_size_distribution_is_read_only() -> None:
    with pytest.raises(TypeError):
        SMALL.num_gpus_probs[1] = 1.0  # type: ignore[index]


# --- presets -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("preset", "trace"), [("synthetic-philly", "philly"), ("synthetic-alibaba", "alibaba_gpu2023")]
)
def test_preset_is_copied_from_its_stats_file(preset: str, trace: str) -> None:
    spec, source = PRESETS[preset], stats(trace)
    assert spec.num_jobs == source["n_jobs"]
    assert spec.arrivals_per_hour == pytest.approx(source["arrivals_per_hour"]["mean"], abs=0.005)
    assert list(spec.diurnal_profile) == source["diurnal_mean_arrivals_by_hour"]
    assert {str(k): v for k, v in spec.num_gpus_probs.items()} == source["num_gpus_frac"]
    assert (spec.duration_median_s, spec.duration_p90_s) == (
        source["duration_s"]["median"],
        source["duration_s"]["p90"],
    )
    assert (spec.duration_min_s, spec.duration_max_s) == (source["duration_s"]["min"], source["duration_s"]["max"])


def test_synthetic_philly_reproduces_the_philly_statistics() -> None:
    source = stats("philly")
    ours = describe(generate(PRESETS["synthetic-philly"], seed=0, name="synthetic-philly"))
    assert ours["n_jobs"] == 6391
    assert ours["arrivals_per_hour"]["mean"] == pytest.approx(source["arrivals_per_hour"]["mean"], rel=0.10)
    assert ours["duration_s"]["median"] == pytest.approx(source["duration_s"]["median"], rel=0.15)
    assert ours["duration_s"]["p90"] == pytest.approx(source["duration_s"]["p90"], rel=0.15)
    assert ours["num_gpus_frac"][1] == pytest.approx(source["num_gpus_frac"]["1"], abs=0.03)
    correlation = np.corrcoef(ours["diurnal_mean_arrivals_by_hour"], source["diurnal_mean_arrivals_by_hour"])[0, 1]
    assert correlation > 0.9


def test_synthetic_alibaba_reproduces_the_alibaba_statistics() -> None:
    source = stats("alibaba_gpu2023")
    ours = describe(generate(PRESETS["synthetic-alibaba"], seed=0, name="synthetic-alibaba"))
    assert ours["arrivals_per_hour"]["mean"] == pytest.approx(source["arrivals_per_hour"]["mean"], rel=0.10)
    assert ours["duration_s"]["median"] == pytest.approx(source["duration_s"]["median"], rel=0.15)
    assert ours["num_gpus_frac"][1] == pytest.approx(source["num_gpus_frac"]["1"], abs=0.03)


def test_alibaba_mean_node_is_the_rounded_mean_of_the_node_file() -> None:
    with (traces_dir() / "alibaba_gpu2023" / "nodes_gpu.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    mean = Resources(
        gpu=round(np.mean([float(r["gpu"]) for r in rows])),
        cpu=round(np.mean([float(r["cpu_milli"]) for r in rows]) / 1000),
        mem_gb=round(np.mean([float(r["memory_mib"]) for r in rows]) / 1024),
    )
    assert mean == ALIBABA_MEAN_NODE
    spec = PRESETS["synthetic-alibaba"]
    assert (spec.num_nodes, spec.node_capacity) == (len(rows), ALIBABA_MEAN_NODE)


def test_synthetic_small_is_the_documented_toy() -> None:
    assert (SMALL.num_jobs, SMALL.arrival, SMALL.arrivals_per_hour) == (200, "poisson", 20.0)
    assert dict(SMALL.num_gpus_probs) == {1: 0.6, 2: 0.2, 4: 0.15, 8: 0.05}
    assert (SMALL.duration_median_s, SMALL.duration_p90_s) == (1800.0, 14400.0)
    assert (SMALL.num_nodes, SMALL.node_capacity) == (16, Resources(gpu=8, cpu=64, mem_gb=512))


# --- scaling -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_jobs", [1_000, 10_000, 100_000])
def test_scaled_keeps_load_per_node(num_jobs: int) -> None:
    base = PRESETS["synthetic-philly"]
    spec = scaled(base, num_jobs)
    factor = num_jobs / base.num_jobs
    assert spec.num_jobs == num_jobs
    assert spec.num_nodes == round(352 * factor)
    assert spec.arrivals_per_hour == pytest.approx(base.arrivals_per_hour * factor)
    assert spec.arrivals_per_hour / spec.num_nodes == pytest.approx(base.arrivals_per_hour / base.num_nodes, rel=0.01)
    assert (spec.diurnal_profile, spec.num_gpus_probs, spec.node_capacity) == (
        base.diurnal_profile,
        base.num_gpus_probs,
        base.node_capacity,
    )


def test_scaled_down_keeps_at_least_one_node() -> None:
    spec = scaled(SMALL, 1)
    assert (spec.num_jobs, spec.num_nodes) == (1, 1)
    assert generate(spec, seed=0, name="one").num_jobs == 1


def test_scaled_workload_keeps_the_span() -> None:
    base = describe(generate(SMALL, seed=0, name="base"))
    big = describe(generate(scaled(SMALL, 2000), seed=0, name="big"))
    assert big["n_jobs"] == 2000
    assert big["arrivals_per_hour"]["mean"] == pytest.approx(10 * base["arrivals_per_hour"]["mean"], rel=0.25)


def test_scaled_rejects_zero_jobs() -> None:
    with pytest.raises(ValueError, match="num_jobs"):
        scaled(SMALL, 0)
