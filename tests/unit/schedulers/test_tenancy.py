"""`Tenancy` notes arrivals and departures on a node whose jobs nobody asked for yet and replays them when asked:
it must answer exactly as one that kept every node's jobs up to date from the start (the same jobs, in the same
order, and the same counts per type)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dl2.core import EMPTY_JOB_ALLOCATION, JobView
from dl2.schedulers.tenancy import Tenancy
from dl2.workload.synthetic import PRESETS, generate, scaled

NUM_NODES = 4
JOBS = tuple(
    JobView(job.spec, 0.0, 0.0, EMPTY_JOB_ALLOCATION, 0.0, 0.0, 0)
    for job in generate(scaled(PRESETS["synthetic-small"], 5), 0, "tenancy").jobs
)
nodes = st.lists(st.integers(0, NUM_NODES - 1), max_size=3)


def tenancy(registered: list[tuple[list[int], list[int]]], eager: bool) -> Tenancy:
    """A round's tenancy with `registered` tasks per rank; `eager`: every node's jobs and the type counts read at
    once, so that each later change updates them in place."""
    result = Tenancy(JOBS, [(0, 0)] * len(JOBS), NUM_NODES)
    for rank, (workers, ps) in enumerate(registered):
        result.register(rank, workers, ps)
    if eager:
        for node in range(NUM_NODES):
            result.jobs_on(node)
        result.jobs_of_type.sum()
    return result


@settings(max_examples=150, deadline=None)
@given(
    registered=st.lists(st.tuples(nodes, nodes), min_size=len(JOBS), max_size=len(JOBS)),
    moves=st.lists(
        st.tuples(st.integers(0, len(JOBS) - 1), st.integers(0, NUM_NODES - 1), st.booleans(), st.booleans()),
        max_size=25,
    ),
    read_midway=st.sets(st.integers(0, NUM_NODES - 1), max_size=2),
)
def test_a_lazy_tenancy_answers_as_an_eager_one(
    registered: list[tuple[list[int], list[int]]],
    moves: list[tuple[int, int, bool, bool]],
    read_midway: set[int],
) -> None:
    lazy, eager = tenancy(registered, False), tenancy(registered, True)
    for step, (rank, node, is_ps, adds) in enumerate(moves):
        held = eager.holdings(rank).get(node, [0, 0])
        for each in (lazy, eager):
            if adds:
                each.add(rank, node, is_ps)
            elif held[is_ps] > 0:  # only a task it holds can be removed
                each.remove(rank, node, is_ps)
        if step == len(moves) // 2:
            for read in read_midway:  # some nodes built midway, the others at the end
                assert list(lazy.jobs_on(read).items()) == list(eager.jobs_on(read).items())
    for rank in range(len(JOBS)):
        assert list(lazy.holdings(rank).items()) == list(eager.holdings(rank).items())
    for node in range(NUM_NODES):
        assert list(lazy.jobs_on(node).items()) == list(eager.jobs_on(node).items())
        for rank, held in lazy.jobs_on(node).items():
            assert held is lazy.holdings(rank)[node]  # one list per (job, node), shared by both views
    assert np.array_equal(lazy.jobs_of_type, eager.jobs_of_type)
