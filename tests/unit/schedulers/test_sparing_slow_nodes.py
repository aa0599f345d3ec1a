"""Placers that spare the servers believed slow (`dl2.schedulers.slow_nodes`): a GPU worker goes on one only where
no other server fits it, and only as a job's first; with none named, the wrapped placer call for call."""

from __future__ import annotations

import pytest

from dl2.core import Allocation, ClusterSpec, ClusterView, JobAllocation, JobSpec, JobView, NodeSpec, Resources
from dl2.schedulers.placement import NodeState, place_sticky
from dl2.schedulers.registry import PLACERS
from dl2.schedulers.slow_nodes import SparingSlowNodes

CLUSTER = ClusterSpec(tuple(NodeSpec(i, Resources(gpu=4, cpu=32, mem_gb=256)) for i in range(3)))
WORKER = (1.0, 4.0, 8.0)
PS = (0.0, 4.0, 8.0)


def sparing(slow: set[int], placer: str = "load-balance") -> SparingSlowNodes:
    return SparingSlowNodes(PLACERS[placer](), lambda: frozenset(slow))


@pytest.mark.parametrize("placer", ["load-balance", "binpack", "tetris"])
def test_with_no_slow_server_it_is_the_wrapped_placer(placer: str):
    state, wrapped = NodeState(CLUSTER), NodeState(CLUSTER)
    plain, spares = PLACERS[placer](), sparing(set(), placer)
    for _ in range(12):
        node = spares.choose(state, WORKER, [])
        assert node == plain.choose(wrapped, WORKER, [])
        state.take(node, WORKER)
        wrapped.take(node, WORKER)


def test_a_gpu_worker_avoids_a_slow_server_while_another_fits():
    state = NodeState(CLUSTER)
    assert PLACERS["load-balance"]().choose(state, WORKER, []) == 0  # the wrapped placer's first choice
    placer = sparing({0})
    chosen = []
    for _ in range(8):
        node = placer.choose(state, WORKER, [])
        state.take(node, WORKER)
        chosen.append(node)
    assert 0 not in chosen and sorted(chosen) == [1] * 4 + [2] * 4
    assert state.free[0] == [4.0, 32.0, 256.0]  # hidden and given back exactly


def test_a_parameter_server_goes_where_the_placer_says():
    assert sparing({0}).choose(NodeState(CLUSTER), PS, []) == 0


def test_only_a_jobs_first_worker_may_take_a_slow_server():
    state = NodeState(CLUSTER)
    for node in (1, 2):
        state.take(node, WORKER, 4)  # the healthy servers are full
    placer = sparing({0})
    assert placer.choose(state, WORKER, []) == 0  # a lone worker on a slow server beats a queued job
    assert placer.choose(state, WORKER, [0]) == 0  # a job all on slow servers may grow there
    assert placer.choose(state, WORKER, [1]) == -1  # one with a worker elsewhere would run at the slow pace


def test_isolate_strict_keeps_its_rule_off_the_slow_servers():
    """Through `place_sticky` (which hands tenancy to a placer that needs it): two jobs of two workers, each on a
    healthy server of its own, the slow one left idle."""
    jobs = tuple(
        JobView(JobSpec(name, "vgg-16", 0.0, 10.0, 1000.0, Resources(gpu=1, cpu=4, mem_gb=8),
                        Resources(cpu=4, mem_gb=8), 4, 4), 0.0, 0.0, JobAllocation(), 0.0, 0.0, 0)
        for name in ("a", "b")
    )  # fmt: skip
    view = ClusterView(0.0, 0, 600.0, CLUSTER, jobs, Allocation({}))
    allocation = place_sticky(view, [(2, 1), (2, 1)], sparing({0}, "isolate-strict"))
    workers = {job_id: set(placed.worker_nodes) for job_id, placed in allocation.jobs.items()}
    assert workers == {"a": {1}, "b": {2}}
