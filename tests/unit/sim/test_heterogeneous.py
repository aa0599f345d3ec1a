"""The simulator on clusters of several accelerator types: realistic mode plays each node's type, a
cluster of the reference accelerator runs exactly as before, and compatibility mode keeps the authors' semantics."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dl2.core import Accelerator, Allocation, ClusterSpec, ClusterView, Job, JobAllocation, JobSpec, NodeSpec, Workload
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import Mode, RescaleCost, RescaleKind, SimConfig
from dl2.sim.lower_bound import average_bound_s
from dl2.sim.run import run_one, speed_model
from dl2.sim.simulator import SimResult, simulate
from dl2.workload.accelerators import ACCELERATOR_TYPES, relative_speed
from dl2.workload.catalogue import CATALOGUE
from dl2.workload.registry import load_workloads

QUIET = SimConfig(mode=Mode.REALISTIC, rescale=RescaleCost(kind=RescaleKind.NONE), interference=False)
V100, K80, P100 = (ACCELERATOR_TYPES[name].accelerator for name in ("V100", "K80", "P100"))


def on(workload: Workload, accelerator: Accelerator | None) -> Workload:
    """The workload with every node's accelerator set."""
    nodes = tuple(replace(node, accelerator=accelerator) for node in workload.cluster.nodes)
    return replace(workload, cluster=ClusterSpec(nodes, workload.cluster.name))


def run(workload: Workload, scheduler: str, config: SimConfig) -> SimResult:
    """As `dl2 simulate` runs it: the mode's speed model and the profiled interference."""
    return run_one(workload, lambda speed, compat: make_scheduler(scheduler, speed, compat), config)


def jcts(result: SimResult) -> list[float]:
    return [job.jct_s for job in result.jobs]


class Fixed:
    """Gives job 'j' one worker on node 0 and one PS on node 1, every slot."""

    name = "fixed"

    def reset(self) -> None:
        pass

    def schedule(self, view: ClusterView) -> Allocation:
        return Allocation({"j": JobAllocation((0,), (1,))}) if view.jobs else Allocation()


def one_job_on(accelerator: Accelerator | None) -> Workload:
    profile = CATALOGUE["resnet-50"]
    spec = JobSpec(
        "j", "resnet-50", 0.0, 10.0, profile.samples_per_epoch, profile.worker_demand, profile.ps_demand, 1, 1
    )
    node = profile.worker_demand + profile.ps_demand
    cluster = ClusterSpec((NodeSpec(0, node, "gpu", accelerator), NodeSpec(1, node, "ps")))
    return Workload("one", cluster, (Job(spec, 10.0),), 600.0)


def test_one_job_on_a_v100_and_on_a_k80_by_hand() -> None:
    # 10 epochs of resnet-50 alone, worker and PS on two servers (kappa 1): JCT = 10 x samples/epoch x 1/S with
    # 1/S = t0 / r + t1 + t2 + t3 + t4 + t5 (dl2.workload.speed_fit), r the worker's accelerator's relative speed
    fit = speed_model(Mode.REALISTIC).fits["resnet-50"]  # type: ignore[attr-defined]
    t0, t1, t2, t3, t4, t5 = fit.coefficients
    isolated_on_reference = simulate(one_job_on(None), Fixed(), QUIET, speed_model(Mode.REALISTIC)).jobs[0].isolated_s
    for accelerator in (V100, K80, None):
        result = simulate(one_job_on(accelerator), Fixed(), QUIET, speed_model(Mode.REALISTIC))
        inverse_speed = t0 / relative_speed("resnet-50", accelerator) + t1 + t2 + t3 + t4 + t5
        assert jcts(result) == pytest.approx([10.0 * CATALOGUE["resnet-50"].samples_per_epoch * inverse_speed])
        # the slowdown's reference is the catalogue's accelerator, whatever the cluster's
        assert result.jobs[0].isolated_s == isolated_on_reference


def test_a_reference_cluster_runs_exactly_as_before_and_p100_nodes_change_nothing() -> None:
    workload = load_workloads("synthetic-small")[0]
    before = run(workload, "speedup-hull", SimConfig.realistic(seed=3))
    # the average JCT of this run before accelerators existed (git 01cf060), to the last bit on this platform
    assert sum(jcts(before)) / len(before.jobs) == pytest.approx(9291.949106963766, rel=1e-12, abs=0.0)
    assert jcts(run(on(workload, P100), "speedup-hull", SimConfig.realistic(seed=3))) == jcts(before)


def test_a_faster_cluster_finishes_sooner_and_a_mixed_one_in_between() -> None:
    workload = load_workloads("synthetic-small")[0]
    config = replace(QUIET, seed=3)
    reference = sum(jcts(run(workload, "drf", config)))
    v100 = sum(jcts(run(on(workload, V100), "drf", config)))
    k80 = sum(jcts(run(on(workload, K80), "drf", config)))
    assert v100 < reference < k80


def test_compat_mode_ignores_accelerators() -> None:
    workload = load_workloads("dl2-official-small")[0]
    plain = run(workload, "drf", SimConfig.compat())
    assert sum(jcts(plain)) / len(plain.jobs) == pytest.approx(168944.92510815573, rel=1e-12, abs=0.0)
    assert jcts(run(on(workload, K80), "drf", SimConfig.compat())) == jcts(plain)


def test_the_lower_bound_counts_every_worker_on_the_fastest_type_and_stays_a_bound() -> None:
    workload = load_workloads("synthetic-small")[0]
    nodes = tuple(replace(n, accelerator=V100 if n.node_id % 2 else K80) for n in workload.cluster.nodes)
    mixed = replace(workload, cluster=ClusterSpec(nodes, "mixed"))
    config = replace(QUIET, seed=3)
    speed = speed_model(Mode.REALISTIC)
    bound = average_bound_s(mixed, config, speed)
    assert bound == average_bound_s(on(workload, V100), config, speed)
    assert bound < average_bound_s(workload, config, speed)
    assert bound <= sum(jcts(run(mixed, "speedup-hull", config))) / workload.num_jobs
