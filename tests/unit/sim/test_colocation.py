"""`CoLocation` keeps interference factors up to date incrementally; it must always equal a recount from scratch."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dl2.core import JobAllocation
from dl2.sim.colocation import CoLocation
from dl2.sim.run import interference_model

NUM_NODES = 4
TABLE = np.array(interference_model().table, dtype=float)


def recount(placements: dict[int, tuple[JobAllocation, int]]) -> dict[int, float]:
    """Each placed job's factor: the largest slowdown another job inflicts on it on any of its servers."""
    factors = {}
    for i, (allocation, kind) in placements.items():
        nodes = set(allocation.worker_nodes + allocation.ps_nodes)
        worst = 1.0
        for j, (other, other_kind) in placements.items():
            if j != i and nodes & set(other.worker_nodes + other.ps_nodes):
                worst = max(worst, TABLE[kind, other_kind])
        factors[i] = worst
    return factors


def test_two_jobs_on_one_server_slow_each_other_down_by_hand() -> None:
    colocation = CoLocation(TABLE, NUM_NODES)
    colocation.update(
        [(0, JobAllocation((0, 1), (1,)), 2), (1, JobAllocation((1,), (3,)), 5), (2, JobAllocation((2,), ()), 2)]
    )
    assert colocation.factors == {0: TABLE[2, 5], 1: TABLE[5, 2], 2: 1.0}
    colocation.update([(1, JobAllocation((3,), (3,)), 5)])  # job 1 moves away: nobody shares a server any more
    assert colocation.factors == {0: 1.0, 1: 1.0, 2: 1.0}
    colocation.update([], gone=[0])
    assert set(colocation.factors) == {1, 2}


placements = st.dictionaries(
    st.integers(0, 6),
    st.tuples(
        st.lists(st.integers(0, NUM_NODES - 1), max_size=3),
        st.lists(st.integers(0, NUM_NODES - 1), max_size=2),
        st.integers(0, TABLE.shape[0] - 1),
    ),
    max_size=6,
)


@settings(max_examples=80, deadline=None)
@given(steps=st.lists(st.tuples(placements, st.sets(st.integers(0, 6), max_size=2)), min_size=1, max_size=6))
def test_incremental_factors_equal_a_recount(
    steps: list[tuple[dict[int, tuple[list[int], list[int], int]], set[int]]],
) -> None:
    colocation = CoLocation(TABLE, NUM_NODES)
    current: dict[int, tuple[JobAllocation, int]] = {}
    kinds: dict[int, int] = {}
    for changes, finished in steps:
        for i, (workers, ps, kind) in changes.items():
            kinds.setdefault(i, kind)  # a job keeps its type
            current[i] = (JobAllocation(tuple(workers), tuple(ps)), kinds[i])
        gone = [i for i in finished if i in current]
        for i in gone:
            del current[i]
        colocation.update(((i, allocation, kind) for i, (allocation, kind) in current.items()), gone)
        placed = {i: entry for i, entry in current.items() if not entry[0].is_empty}
        assert colocation.factors == recount(placed)
        assert colocation.sharing() == sharing(placed)


def sharing(placements: dict[int, tuple[JobAllocation, int]]) -> set[int]:
    """The placed jobs with a task on a server where another placed job has one, task by task."""
    first_on: dict[int, int] = {}
    shared: set[int] = set()
    for i, (allocation, _) in placements.items():
        for node in (*allocation.worker_nodes, *allocation.ps_nodes):
            other = first_on.setdefault(node, i)
            if other != i:
                shared.update((i, other))
    return shared


@settings(max_examples=60, deadline=None)
@given(first=placements, then=placements, gone=st.sets(st.integers(0, 6), max_size=2))
def test_a_copy_goes_on_as_the_original_and_leaves_it_unchanged(
    first: dict[int, tuple[list[int], list[int], int]],
    then: dict[int, tuple[list[int], list[int], int]],
    gone: set[int],
) -> None:
    """`CoLocation.copy` (what `Simulation.fork` takes): updating the copy as the original would be updated gives
    the original's factors, and the original, left alone, keeps its own."""
    original = CoLocation(TABLE, NUM_NODES)
    original.update((i, JobAllocation(tuple(w), tuple(p)), kind) for i, (w, p, kind) in first.items())
    before = (dict(original.factors), original.sharing(), original.worst.copy())
    twin = original.copy()
    changes = [
        (i, JobAllocation(tuple(w), tuple(p)), first.get(i, (w, p, kind))[2]) for i, (w, p, kind) in then.items()
    ]
    left = [i for i in gone if i in first and i not in then]
    twin.update(changes, left)
    assert (dict(original.factors), original.sharing()) == before[:2]
    assert np.array_equal(original.worst, before[2])
    original.update(changes, left)
    assert twin.factors == original.factors and twin.sharing() == original.sharing()
    assert np.array_equal(twin.worst, original.worst)
