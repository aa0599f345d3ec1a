"""Gavel's heterogeneity-aware max-min fairness: the allocation its definition gives on hand-computed
cases, the rounds that realise it, its reduction on one type, and its runs on a mixed cluster."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dl2.core import (
    EMPTY_JOB_ALLOCATION,
    Accelerator,
    Allocation,
    ClusterSpec,
    ClusterView,
    JobAllocation,
    JobSpec,
    JobView,
    NodeSpec,
    Resources,
    Workload,
)
from dl2.schedulers.accelerator_types import AcceleratorTypes
from dl2.schedulers.gavel import Gavel, max_min_fractions
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import Mode, SimConfig
from dl2.sim.run import run_one, speed_model
from dl2.workload.accelerated_speed import AcceleratedSpeedModel
from dl2.workload.accelerators import ACCELERATOR_TYPES
from dl2.workload.catalogue import CATALOGUE
from dl2.workload.registry import load_workloads

V100, K80, P100, T4 = (ACCELERATOR_TYPES[name].accelerator for name in ("V100", "K80", "P100", "T4"))
SERVER = Resources(gpu=1.0, cpu=16.0, mem_gb=128.0)


def test_the_job_that_gains_takes_the_fast_type_and_the_indifferent_one_the_slow() -> None:
    # normalised throughputs (T / mean over types): A runs 4x faster on type 0, B the same on both. Equal shares
    # give each 1; max-min cannot give B more than 1, and at B = 1 the most A gets is all of type 0: 1.6
    weights = np.array([[1.6, 0.4], [1.0, 1.0]])
    fractions = max_min_fractions(weights, np.array([1.0, 1.0]), np.array([1.0, 1.0]))
    assert fractions == pytest.approx(np.array([[1.0, 0.0], [0.0, 1.0]]), abs=1e-5)


def test_three_jobs_on_two_types_by_hand() -> None:
    # A gains 4x from type 0 (normalised 1.6, 0.4), C 2x (4/3, 2/3), B nothing (1, 1); one GPU of each type.
    # With B on type 1 at level t, A on type 0 for t / 1.6 and C on the rest of type 0 and what B leaves of type 1:
    # 4/3 (1 - t / 1.6) + 2/3 (1 - t) = t gives t = 0.8. Dual weights (1/3, 4/15, 2/5) on A, B, C bound every
    # allocation's weighted level by 1.6/3 + 2/3 x 2/5 = 0.8, so 0.8 is the max-min, and this allocation its only one
    weights = np.array([[1.6, 0.4], [1.0, 1.0], [4 / 3, 2 / 3]])
    fractions = max_min_fractions(weights, np.array([1.0, 1.0, 1.0]), np.array([1.0, 1.0]))
    assert fractions == pytest.approx(np.array([[0.5, 0.0], [0.0, 0.8], [0.5, 0.2]]), abs=1e-4)
    assert (fractions * weights).sum(axis=1) == pytest.approx([0.8, 0.8, 0.8], abs=1e-4)


def test_on_one_type_it_is_max_min_fair_gpu_share() -> None:
    # one type of 2 GPUs: a 1-GPU job and a 2-GPU job (weights: their workers) each get a GPU's worth of share
    fractions = max_min_fractions(np.array([[1.0], [2.0]]), np.array([1.0, 2.0]), np.array([2.0]))
    assert fractions[:, 0] == pytest.approx([1.0, 0.5], abs=1e-5)
    # three 1-GPU jobs on 2 GPUs: two thirds of the time each
    fractions = max_min_fractions(np.ones((3, 1)), np.ones(3), np.array([2.0]))
    assert fractions[:, 0] == pytest.approx([2 / 3] * 3, abs=1e-5)


def test_a_job_that_fits_no_type_gets_nothing_and_does_not_hold_the_others_down() -> None:
    fractions = max_min_fractions(np.array([[1.0, 1.0], [0.0, 0.0]]), np.array([1.0, 9.0]), np.array([1.0, 1.0]))
    assert fractions[1] == pytest.approx([0.0, 0.0])
    assert fractions[0].sum() == pytest.approx(1.0, abs=1e-5)


# -- the scheduler, slot by slot ---------------------------------------------------------------------------------


def spec(job_id: str, model: str) -> JobSpec:
    profile = CATALOGUE[model]
    return JobSpec(job_id, model, 0.0, 1e9, profile.samples_per_epoch, profile.worker_demand, profile.ps_demand, 4, 4)


def cluster_of(*accelerators: Accelerator | None) -> ClusterSpec:
    """One 1-GPU server per accelerator (room for a worker and a PS beside it)."""
    return ClusterSpec(tuple(NodeSpec(i, SERVER, "gpu", a) for i, a in enumerate(accelerators)), "hand")


def play(scheduler: Gavel, cluster: ClusterSpec, specs: list[JobSpec], slots: int) -> list[Allocation]:
    """Runs the scheduler for `slots` slots on jobs that never finish, each slot's allocation fed back as held."""
    allocation = Allocation()
    history = []
    for slot in range(slots):
        jobs = tuple(JobView(s, 0.0, 0.0, allocation.get(s.job_id), 0.0, 0.0, 0) for s in specs)
        allocation = scheduler.schedule(ClusterView(slot * 60.0, slot, 60.0, cluster, jobs, allocation))
        check_fits(cluster, specs, allocation)
        history.append(allocation)
    return history


def check_fits(cluster: ClusterSpec, specs: list[JobSpec], allocation: Allocation) -> None:
    """Capacity never exceeded; every job's workers on one accelerator type."""
    used = [Resources() for _ in cluster.nodes]
    by_id = {s.job_id: s for s in specs}
    types = AcceleratorTypes.of(cluster)
    for job_id, held in allocation.jobs.items():
        for node in held.worker_nodes:
            used[node] = used[node] + by_id[job_id].worker_demand
        for node in held.ps_nodes:
            used[node] = used[node] + by_id[job_id].ps_demand
        if len(held.worker_nodes) * by_id[job_id].worker_demand.gpu <= max(types.gpus):
            assert len({types.type_of_node[node] for node in held.worker_nodes}) == 1
    assert all(u.fits_in(node.capacity) for u, node in zip(used, cluster.nodes, strict=True))


def shares(history: list[Allocation], cluster: ClusterSpec, job_id: str) -> list[int]:
    """Per type, the slots in which the job ran there."""
    types = AcceleratorTypes.of(cluster)
    counts = [0] * len(types.types)
    for allocation in history:
        held = allocation.get(job_id)
        if held.worker_nodes:
            counts[types.type_of_node[held.worker_nodes[0]]] += 1
    return counts


def test_the_rounds_realise_the_policys_time_fractions() -> None:
    cluster = cluster_of(K80, V100)
    specs = [spec("a", "resnext-110"), spec("b", "wlm"), spec("c", "resnet-50")]
    scheduler = Gavel(speed_model(Mode.REALISTIC))
    history = play(scheduler, cluster, specs, 120)
    view = ClusterView(
        0.0, 0, 60.0, cluster, tuple(JobView(s, 0, 0, EMPTY_JOB_ALLOCATION, 0, 0, 0) for s in specs), Allocation()
    )
    fractions = scheduler.fractions(view)
    # the targets are Gavel's definition applied to the throughputs the scheduler read (per type, normalised)
    rows = np.array([scheduler.throughputs(s, cluster) for s in specs])
    expected = max_min_fractions(rows / rows.mean(axis=1, keepdims=True), np.ones(3), np.ones(2))
    assert np.array([fractions[s.job_id] for s in specs]) == pytest.approx(expected)
    # type 1 (V100) speeds up every GPU model: the fast type goes mostly to the job that gains most from it
    gains = rows[:, 1] / rows[:, 0]
    assert gains.argmax() == np.array([fractions[s.job_id][1] for s in specs]).argmax()
    for s in specs:  # realised within a few rounds of the target over 120 rounds
        assert shares(history, cluster, s.job_id) == pytest.approx(120 * fractions[s.job_id], abs=3.0)


def test_on_one_type_it_rotates_equal_shares_whatever_the_speeds() -> None:
    cluster = cluster_of(None, None)
    specs = [spec("a", "resnext-110"), spec("b", "wlm"), spec("c", "vgg-16")]
    history = play(Gavel(speed_model(Mode.REALISTIC)), cluster, specs, 30)
    for s in specs:
        assert shares(history, cluster, s.job_id) == [20]  # two GPUs for three jobs: two slots in three each
    # the same on a cluster of one named type: only how many types there are matters
    history_v100 = play(Gavel(speed_model(Mode.REALISTIC)), cluster_of(V100, V100), specs, 30)
    assert [dict(a.jobs) for a in history_v100] == [dict(a.jobs) for a in history]


def test_a_job_that_keeps_its_type_keeps_its_servers() -> None:
    cluster = cluster_of(K80, V100, K80, V100)
    specs = [spec("a", "resnext-110"), spec("b", "wlm")]  # room for both on either type: nobody moves
    history = play(Gavel(speed_model(Mode.REALISTIC)), cluster, specs, 10)
    assert all(a.jobs == history[0].jobs for a in history)


# -- whole runs ------------------------------------------------------------------------------------------------


def mixed(workload: Workload) -> Workload:
    nodes = tuple(replace(n, accelerator=V100 if n.node_id % 2 else K80) for n in workload.cluster.nodes)
    return replace(workload, cluster=ClusterSpec(nodes, "mixed"))


def test_runs_on_a_mixed_cluster_finish_and_are_deterministic_per_seed() -> None:
    workload = mixed(load_workloads("synthetic-small")[0])
    config = SimConfig.realistic(seed=5)

    def run() -> list[float]:
        result = run_one(workload, lambda speed, compat: make_scheduler("gavel", speed, compat), config)
        assert len(result.jobs) == workload.num_jobs
        return [job.jct_s for job in result.jobs]

    assert run() == run()


def test_it_reads_the_speed_model_it_is_handed() -> None:
    cluster = cluster_of(K80, V100)
    job = spec("a", "resnet-50")
    view = ClusterView(0, 0, 60, cluster, (JobView(job, 0, 0, EMPTY_JOB_ALLOCATION, 0, 0, 0),), Allocation())
    # the catalogue's profile on the cluster's types, as the simulator plays it (one worker on a server of the type)
    catalogue = Gavel(speed_model(Mode.REALISTIC))
    catalogue.schedule(view)
    played = AcceleratedSpeedModel(speed_model(Mode.REALISTIC), cluster)
    assert catalogue.throughputs(job, cluster) == pytest.approx(
        [played.placed_throughput(job, JobAllocation((node,), (1 - node,))) for node in (0, 1)]
    )

    class PerType:
        """A model that knows each type's speed itself (as a truth may): 3 on the K80 server, 5 on the V100."""

        def throughput(self, model: str, num_ps: int, num_workers: int) -> float:
            return 1.0

        def placed_throughput(self, spec: JobSpec, allocation: JobAllocation) -> float:
            return (3.0, 5.0)[allocation.worker_nodes[0]]

    own = Gavel(PerType(), on_cluster=lambda speed, _: speed)
    own.schedule(view)
    assert own.throughputs(job, cluster) == pytest.approx([3.0, 5.0])


def test_a_job_bigger_than_every_type_runs_over_several() -> None:
    # a T4 worker beside a P100 one adds more than it slows (2 x 0.87 > 1); a K80 one beside a V100 does not
    big = replace(spec("big", "seq2seq"), requested_workers=2)
    history = play(Gavel(speed_model(Mode.REALISTIC)), cluster_of(P100, T4), [big], 3)
    assert all(sorted(a.get("big").worker_nodes) == [0, 1] for a in history)
    history = play(Gavel(speed_model(Mode.REALISTIC)), cluster_of(K80, V100), [big], 3)
    assert all(a.get("big").worker_nodes == (1,) for a in history)
