"""The lower bound on JCT: a hand-computed case, brute force over placements, and single-job simulator runs."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from dl2.core import Allocation, ClusterSpec, ClusterView, JobAllocation, JobSpec, Workload
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import RescaleCost, RescaleKind, SimConfig
from dl2.sim.lower_bound import BestLayoutSimulation, FastestPlacements, first_decision_s, workload_bounds
from dl2.sim.run import interference_model, speed_model
from dl2.sim.simulator import Simulation, drive, simulate
from dl2.workload.registry import load_workloads
from dl2.workload.traces import PHILLY_NODE
from tests.builders import LinearSpeed, make_job, one_node_workload


class Fixed:
    """Gives the one job of a workload the same allocation every slot."""

    name = "fixed"

    def __init__(self, job_id: str, allocation: JobAllocation) -> None:
        self.job_id, self.allocation = job_id, allocation

    def reset(self) -> None:
        pass

    def schedule(self, view: ClusterView) -> Allocation:
        return Allocation({self.job_id: self.allocation} if view.jobs else {})


def test_hand_computed_bound() -> None:
    # one node of 8 GPU and 8 CPU slots: at most 2 workers (4 GPU, 2 CPU each) beside 2 PS (2 CPU each); the
    # linear speed gives 2 samples/s with 2 workers, so 10 epochs of 1 sample take 5 s
    workload = one_node_workload(make_job("a", 10.0, arrival_s=30.0))
    config = SimConfig.realistic(0)
    (bound,) = workload_bounds(workload, config, LinearSpeed())
    assert first_decision_s(30.0, 100.0) == 100.0
    assert bound.allocation.num_workers == 2
    assert bound.throughput == 2.0
    assert bound.jct_s == pytest.approx(100.0 + 0.05 + 5.0 - 30.0)
    free = replace(config, rescale=RescaleCost(kind=RescaleKind.NONE))
    assert workload_bounds(workload, free, LinearSpeed())[0].jct_s == pytest.approx(75.0)


def test_the_search_finds_the_fastest_placement_of_every_small_job() -> None:
    cluster = ClusterSpec.homogeneous(3, PHILLY_NODE)
    speed = speed_model(SimConfig.realistic().mode)
    fastest = FastestPlacements(cluster, speed)
    kinds = {job.spec.model: job.spec for job in load_workloads("philly", 0)[0].jobs[:400]}
    for spec in kinds.values():
        small = replace(spec, max_workers=3, max_ps=2)
        best = 0.0
        for workers, ps in itertools.product(range(1, 4), range(1, 3)):
            for nodes in itertools.product(range(3), repeat=workers + ps):
                allocation = JobAllocation(nodes[:workers], nodes[workers:])
                if _fits(allocation, small, cluster):
                    best = max(best, speed.placed_throughput(small, allocation))
        assert fastest(small)[1] == pytest.approx(best, rel=1e-12), spec.model


def _fits(allocation: JobAllocation, spec: JobSpec, cluster: ClusterSpec) -> bool:
    used = [[0.0, 0.0, 0.0] for _ in cluster.nodes]
    for nodes, demand in ((allocation.worker_nodes, spec.worker_demand), (allocation.ps_nodes, spec.ps_demand)):
        for node in nodes:
            for k, value in enumerate(demand.as_tuple()):
                used[node][k] += value
    return all(
        all(u <= c + 1e-9 for u, c in zip(row, node.capacity.as_tuple(), strict=True))
        for row, node in zip(used, cluster.nodes, strict=True)
    )


@pytest.mark.parametrize("index", [0, 7, 100, 1000, 3000])
def test_single_job_runs_meet_the_bound_and_no_heuristic_beats_it(index: int) -> None:
    philly = load_workloads("philly", 0)[0]
    job = philly.jobs[index]
    alone = Workload("alone", philly.cluster, (job,), philly.slot_s)
    config = SimConfig.realistic(0, speed_noise=0.0)
    speed, interference = speed_model(config.mode), interference_model()
    (bound,) = workload_bounds(alone, config, speed)
    result = simulate(alone, Fixed(job.spec.job_id, bound.allocation), config, speed, interference)
    assert result.jobs[0].jct_s == pytest.approx(bound.jct_s, rel=1e-9)
    for name in ("drf", "optimus", "tiresias"):
        for placer in ("load-balance", "binpack"):
            run = simulate(alone, make_scheduler(name, speed, False, placer), config, speed, interference)
            assert run.jobs[0].jct_s >= bound.jct_s * (1 - 1e-9), (name, placer)


def test_the_best_layout_simulation_runs_a_spread_job_at_its_packed_speed() -> None:
    # one PS job with 2 workers and 2 PS, held apart (workers on node 0, PS on node 1): the simulator runs it at
    # that placement's speed, the best-layout simulation at the speed of its best layout of 2 + 2 tasks
    philly = load_workloads("philly", 0)[0]
    job = next(job for job in philly.jobs if job.spec.max_ps >= 2 and job.spec.max_workers >= 2)
    cluster = ClusterSpec.homogeneous(2, PHILLY_NODE)
    alone = Workload("alone", cluster, (job,), philly.slot_s)
    config = SimConfig.realistic(0, speed_noise=0.0)
    speed = speed_model(config.mode)
    spread = JobAllocation((0, 0), (1, 1))
    packed = FastestPlacements(cluster, speed).packed(job.spec, 2, 2)
    assert packed is not None
    assert speed.placed_throughput(job.spec, packed) > speed.placed_throughput(job.spec, spread)
    plain = simulate(alone, Fixed(job.spec.job_id, spread), config, speed)
    best = drive(BestLayoutSimulation(alone, config, speed), Fixed(job.spec.job_id, spread))
    best_packed = drive(BestLayoutSimulation(alone, config, speed), Fixed(job.spec.job_id, packed))
    assert best.jobs[0].jct_s < plain.jobs[0].jct_s
    assert best.jobs[0].jct_s == pytest.approx(best_packed.jobs[0].jct_s, rel=1e-12)


@pytest.mark.parametrize("scheduler", ["drf", "optimus-fitted"])
def test_no_job_runs_faster_in_the_simulator_than_in_the_best_layout_simulation(scheduler: str) -> None:
    # at every slot of a seeded run, each job's speed in the best-layout world is at least the speed of where its
    # tasks actually are, with interference added by the true simulator on the same placement
    philly = load_workloads("philly", 0)[0]
    small = Workload("small", ClusterSpec.homogeneous(6, PHILLY_NODE), philly.jobs[:60], philly.slot_s)
    config = SimConfig.realistic(0, speed_noise=0.0)
    speed, interference = speed_model(config.mode), interference_model()
    best = BestLayoutSimulation(small, config, speed)
    policy = make_scheduler(scheduler, speed, False, "load-balance")
    policy.reset()
    checked = 0
    while not best.done and best.slot < 200:
        best.apply(policy.schedule(best.begin_slot()))
        active = [i for i in best.active if best.allocation[i].worker_nodes]
        true = Simulation(small, config, speed, interference)
        true.allocation = list(best.allocation)
        true_speeds = true._noiseless_throughputs(active, active)
        for i, value in zip(active, true_speeds, strict=True):
            assert best._base_throughput(i) >= value * (1 - 1e-12)
            checked += 1
    assert checked > 100
