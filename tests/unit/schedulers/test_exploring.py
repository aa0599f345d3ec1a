"""Canary exploration: moves within the scope only, valid allocations, and propensities that are the probabilities
of what was applied."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from dl2.core import Allocation, ClusterView, JobAllocation
from dl2.placement.samples import record_run
from dl2.schedulers.exploring import ExplorationScope, ExploringScheduler
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import SimConfig
from dl2.sim.run import speed_model
from dl2.sim.simulator import Simulation
from tests.builders import make_job, one_node_workload, tiny_workload


class Fixed:
    """Gives each job the nodes it is listed with, every slot."""

    name = "fixed"

    def __init__(self, jobs: dict[str, JobAllocation]) -> None:
        self.jobs = jobs

    def reset(self) -> None:
        pass

    def schedule(self, view: ClusterView) -> Allocation:
        return Allocation(self.jobs)


def _first_view(*jobs: str) -> ClusterView:
    # two nodes of 8 GPUs; workers of 4 GPUs: each node holds two workers
    workload = one_node_workload(*(make_job(name, 10.0) for name in jobs), num_nodes=2)
    return Simulation(workload, SimConfig.realistic(0), speed_model(SimConfig.realistic(0).mode)).begin_slot()


def test_propensities_are_the_probabilities_of_the_applied_counts() -> None:
    # a holds 2 workers (can shrink, and grow onto the free slot of node 1); b holds 1 (cannot shrink): with
    # epsilon 0.2 a is moved down or up with 0.1 each and kept with 0.8; b is moved up with 0.1 (when a has not
    # taken the free slot) and kept otherwise
    view = _first_view("a", "b")
    base = Fixed({"a": JobAllocation((0, 0), (0,)), "b": JobAllocation((1,), (1,))})
    seen: dict[str, Counter[int]] = defaultdict(Counter)
    stated: dict[tuple[str, int], set[float]] = defaultdict(set)
    draws = 4000
    explorer = ExploringScheduler(base, ExplorationScope(epsilon=0.2, fraction=1.0), seed=7)
    for _ in range(draws):
        allocation = explorer.schedule(view)
        for job in ("a", "b"):
            workers = allocation.get(job).num_workers
            seen[job][workers] += 1
            stated[job, workers].add(round(explorer.propensities[job], 12))
    assert set(seen["a"]) == {1, 2, 3}
    assert stated["a", 1] == stated["a", 3] == {0.1} and stated["a", 2] == {0.8}
    for workers, count in seen["a"].items():
        assert count / draws == pytest.approx(next(iter(stated["a", workers])), abs=0.03)
    # b's chance to grow depends on a's draw (a grows first, in view order): conditional propensities
    assert stated["b", 2] == {0.1}
    assert stated["b", 1] == {0.9, 1.0}  # kept: 0.8 + the impossible shrink, + the impossible growth if a grew


def test_jobs_out_of_the_scope_and_jobs_without_workers_keep_the_decision() -> None:
    view = _first_view("a", "b")
    decided = {"a": JobAllocation((0, 0), (0,))}
    out_of_scope = ExploringScheduler(Fixed(decided), ExplorationScope(epsilon=1.0, fraction=0.0), seed=1)
    assert dict(out_of_scope.schedule(view).jobs) == decided and out_of_scope.propensities == {}
    none = ExploringScheduler(Fixed(decided), ExplorationScope(epsilon=0.0, fraction=1.0), seed=1)
    assert dict(none.schedule(view).jobs) == decided and none.propensities == {}
    everything = ExploringScheduler(Fixed(decided), ExplorationScope(epsilon=1.0, fraction=1.0), seed=1)
    everything.schedule(view)
    assert "b" not in everything.propensities  # b was given no worker: nothing to move


def test_the_scope_is_a_stable_share_of_the_jobs() -> None:
    scope = ExplorationScope(fraction=0.3)
    ids = [f"job-{i:04d}" for i in range(2000)]
    covered = [job for job in ids if scope.covers(job)]
    assert len(covered) / len(ids) == pytest.approx(0.3, abs=0.04)
    assert covered == [job for job in ids if scope.covers(job)]
    with pytest.raises(ValueError, match="epsilon"):
        ExplorationScope(epsilon=1.5)


def test_an_explored_run_is_valid_seeded_and_logs_its_propensities() -> None:
    workload = tiny_workload(num_jobs=12, num_nodes=2, seed=5)
    config = SimConfig.realistic(seed=5)
    speed = speed_model(config.mode)

    def records(seed: int) -> list:
        explorer = ExploringScheduler(make_scheduler("drf", speed, False), ExplorationScope(0.5, 1.0), seed=seed)
        return record_run(workload, explorer, config, speed, None)  # the simulator refuses an invalid allocation

    first = records(3)
    assert first == records(3)
    propensities = [r.applied_propensity for r in first]
    assert all(0 < p <= 1 for p in propensities)
    assert any(p < 1 for p in propensities)
    moved = [r for r in first if r.applied_propensity == 0.25]  # epsilon / 2
    assert moved and all(r.applied_workers >= 1 for r in moved)
