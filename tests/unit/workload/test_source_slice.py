"""A preset's slice (`synthetic-<preset>:first=<jobs>[:servers=<n>][:density=<d>]`): the contended regime the ablation
benchmarks play, named so that warm-ups and twins can draw it too."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dl2.core import InputError
from dl2.workload.source import is_generated, source_problem, workload
from dl2.workload.synthetic import PRESETS, generate


def test_a_slice_is_the_first_jobs_the_full_preset_draws_on_its_first_servers() -> None:
    drawn = generate(replace(PRESETS["synthetic-philly"], num_jobs=20), 7, "x")
    sliced = workload("synthetic-philly:first=20:servers=3", 7)
    assert sliced.jobs == drawn.jobs
    assert sliced.cluster.nodes == drawn.cluster.nodes[:3]
    assert is_generated("synthetic-philly:first=20")
    assert workload("synthetic-philly:first=20", 8).jobs != sliced.jobs


def test_density_divides_every_arrival_and_changes_nothing_else() -> None:
    plain = workload("synthetic-philly:first=10:servers=2", 3)
    dense = workload("synthetic-philly:first=10:servers=2:density=2.5", 3)
    assert [job.spec.arrival_s / 2.5 for job in plain.jobs] == [job.spec.arrival_s for job in dense.jobs]
    assert [replace(job.spec, arrival_s=0) for job in plain.jobs] == [
        replace(job.spec, arrival_s=0) for job in dense.jobs
    ]


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("synthetic-philly:servers=3", "names its jobs"),
        ("synthetic-philly:first=0", "first= must be a whole number"),
        ("synthetic-philly:first=5:servers=x", "servers= must be a whole number"),
        ("synthetic-philly:first=5:density=20", "density= must be a number from 0.1 to 10"),
        ("synthetic-philly:first=5:density=fast", "density= must be a number"),
        ("synthetic-philly:first=5:nodes=3", "unknown option 'nodes'"),
    ],
)
def test_a_bad_slice_is_refused_naming_the_option(source: str, fragment: str) -> None:
    problem = source_problem(source)
    assert problem is not None and fragment in problem
    with pytest.raises(InputError, match=fragment):
        workload(source, 0)


def test_a_preset_without_options_is_still_the_preset_and_its_scaled_form_too() -> None:
    assert source_problem("synthetic-small") is None and source_problem("synthetic-philly@900") is None
    assert workload("synthetic-small", 1).jobs == generate(PRESETS["synthetic-small"], 1, "x").jobs
