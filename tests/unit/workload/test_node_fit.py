"""Slow servers learned from jobs' observed progress (`dl2.workload.node_fit`), on hand-made ratios: a server is named
only once three jobs with their workers on it ran well short of their types elsewhere; a type slow everywhere, a job
spread over servers, or fewer jobs name none; a server named on a few is cleared when more show it was their types."""

from __future__ import annotations

import math

import pytest

from dl2.core import JobAllocation, JobSpec, Resources
from dl2.workload.node_fit import MIN_JOBS, THRESHOLD, NodeSpeedFit


def spec(job_id: str, model: str = "vgg-16") -> JobSpec:
    return JobSpec(job_id, model, 0.0, 10.0, 1000.0, Resources(gpu=1, cpu=4, mem_gb=8), Resources(cpu=4, mem_gb=8),
                   8, 8)  # fmt: skip


def on(*nodes: int) -> JobAllocation:
    return JobAllocation(nodes, (nodes[0],))


def healthy(count: int, model: str = "vgg-16", ratio: float = 1.0) -> list:
    """`count` jobs running at `ratio` of the world on servers 1-4."""
    return [(spec(f"{model}-{i}", model), on(1 + i % 4), ratio) for i in range(count)]


def test_three_jobs_short_on_one_server_name_it():
    assert (THRESHOLD, MIN_JOBS) == (0.8, 3)
    fit = NodeSpeedFit()
    fit.observe([*healthy(8), (spec("a"), on(0), 0.5), (spec("b"), on(0, 0), 0.6)])
    assert fit.slow == frozenset()  # two jobs may be their type's outliers
    fit.observe([(spec("c"), on(0), 0.7)])
    assert fit.slow == frozenset({0})


def test_a_type_slow_everywhere_is_no_servers_fault():
    fit = NodeSpeedFit()
    fit.observe([*healthy(9, "wlm", 0.4), *healthy(9)])
    assert fit.slow == frozenset()


def test_jobs_spread_over_servers_teach_nothing():
    fit = NodeSpeedFit()
    fit.observe([(spec(f"j{i}"), on(0, 1), 0.3) for i in range(5)] + [(spec("k"), on(2), 1.0)])
    assert fit.slow == frozenset() and all(node == 2 for _, node in fit.samples)


def test_a_servers_residual_is_its_jobs_median_against_their_types():
    fit = NodeSpeedFit()
    # vgg-16 runs at 0.8 of the world elsewhere; on server 0 at 0.8 x 0.85: above 0.8 of its type, not named
    fit.observe([*healthy(12, ratio=0.8), *((spec(f"s{i}"), on(0), 0.68) for i in range(3))])
    assert fit.slow == frozenset()
    # three more at 0.4: the server's median residual is between 0.85 and 0.5 (0.65), the type's median still 0.8
    fit.observe([(spec(f"t{i}"), on(0), 0.4) for i in range(3)])
    assert fit.slow == frozenset({0})
    assert math.isclose(fit.samples[("s1", 0)][0], math.log(0.68))


def test_a_server_named_on_a_few_is_cleared_when_more_show_it_was_their_type():
    fit = NodeSpeedFit()
    fit.observe([*healthy(4), *((spec(f"s{i}"), on(0), 0.6) for i in range(3))])
    assert fit.slow == frozenset({0})  # vgg-16 runs at 1.0 elsewhere so far
    fit.observe([(spec(f"late{i}"), on(1 + i % 4), 0.6) for i in range(9)])  # no: vgg-16 runs at 0.6 everywhere
    assert fit.slow == frozenset()


def test_reset_forgets():
    fit = NodeSpeedFit()
    fit.observe([*healthy(8), *((spec(f"s{i}"), on(0), 0.3) for i in range(3))])
    assert fit.slow == frozenset({0})
    fit.reset()
    assert fit.slow == frozenset() and fit.samples == {}


@pytest.mark.parametrize(("threshold", "min_jobs"), [(0.0, 2), (1.0, 2), (0.7, 0)])
def test_bad_settings_are_refused(threshold: float, min_jobs: int):
    with pytest.raises(ValueError, match="threshold"):
        NodeSpeedFit(threshold, min_jobs)
