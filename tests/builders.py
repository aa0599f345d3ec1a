"""Hand-made jobs, one-node workloads and a speed model whose results can be computed by hand: what the unit
tests build their cases from; and the Kubernetes tests' data: a tiny workload, manifests, a stand-in model loader
and a count of the controller's resize requests in an audit log (these two, the controller's user agent and the
SchedulerPolicy object come from `testbed.harness`, which the benchmarks share). Plain values from their arguments
only (imported, as a module; what acts on a test's cluster is a fixture of `kube_fixtures.py`, the rest live in
`conftest.py`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from dl2.core import Architecture, ClusterSpec, DecisionRecord, Job, JobAllocation, JobSpec, Resources, Workload
from dl2.workload.interference import InterferenceModel
from dl2.workload.mapping import TraceMapping
from dl2.workload.synthetic import PRESETS, generate
from testbed.harness import CONTROLLER_AGENT as CONTROLLER_AGENT
from testbed.harness import CUT_OFF as CUT_OFF
from testbed.harness import heuristic_loader as heuristic_loader
from testbed.harness import policy_object as policy_object
from testbed.harness import sent_resizes as sent_resizes

COMPAT_WORKER = Resources(gpu=4.0, cpu=2.0)
COMPAT_PS = Resources(cpu=2.0)


class LinearSpeed:
    """throughput = number of workers when the job has at least one PS (1 epoch/s per worker at 1 sample/epoch)."""

    def throughput(self, model: str, num_ps: int, num_workers: int) -> float:
        return float(num_workers) if num_ps > 0 else 0.0

    def placed_throughput(self, spec: JobSpec, allocation: JobAllocation) -> float:
        return self.throughput(spec.model, allocation.num_ps, allocation.num_workers)


def make_job(job_id: str, epochs: float, arrival_s: float = 0.0, max_tasks: int = 4, model: str = "resnet-50") -> Job:
    spec = JobSpec(
        job_id=job_id,
        model=model,
        arrival_s=arrival_s,
        declared_epochs=epochs,
        samples_per_epoch=1.0,
        worker_demand=COMPAT_WORKER,
        ps_demand=COMPAT_PS,
        max_workers=max_tasks,
        max_ps=max_tasks,
    )
    return Job(spec, epochs)


def allreduce_job(job_id: str, max_workers: int = 4) -> Job:
    """A data-parallel job (workers only) of 10 epochs."""
    spec = JobSpec(
        job_id=job_id,
        model="resnet-50",
        arrival_s=0.0,
        declared_epochs=10.0,
        samples_per_epoch=1.0,
        worker_demand=COMPAT_WORKER,
        ps_demand=Resources(),
        max_workers=max_workers,
        max_ps=0,
        architecture=Architecture.ALLREDUCE,
        requested_ps=0,
    )
    return Job(spec, 10.0)


def one_node_workload(*jobs: Job, slot_s: float = 100.0, num_nodes: int = 1) -> Workload:
    cluster = ClusterSpec.homogeneous(num_nodes, Resources(gpu=8.0, cpu=8.0), kind="test")
    return Workload("hand", cluster, tuple(jobs), slot_s)


# -- the Kubernetes tests' data ------------------------------------------------------------------------------------


def tiny_workload(num_jobs: int = 8, num_nodes: int = 2, seed: int = 3) -> Workload:
    """Half all-reduce PyTorchJobs, half parameter-server Volcano Jobs, on 8-GPU nodes."""
    spec = replace(
        PRESETS["synthetic-small"], num_jobs=num_jobs, num_nodes=num_nodes, mapping=TraceMapping(allreduce_fraction=0.5)
    )
    return generate(spec, seed, "tiny")


PACKED_SOURCE = "synthetic-small@40"
"""The tiny Philly-like workload whose logs Harmony's refit is tested on."""


def doubled_interference() -> InterferenceModel:
    """Twice the profiled slowdowns: a cluster unlike the catalogue Harmony's deployed models were trained on."""
    from dl2.sim.run import interference_model

    profiled = interference_model()
    assert profiled is not None
    return InterferenceModel({v: {a: 1 + 2 * (s - 1) for a, s in row.items()} for v, row in profiled.matrix.items()})


def packed_records(interference: InterferenceModel | None, seed: int = 0) -> list[DecisionRecord]:
    """The decision log of a tiny cluster (`PACKED_SOURCE`) under DRF with bin packing, so that jobs share servers,
    with `interference` the cluster's own; placements included, as the simulator records them."""
    from dl2.placement.samples import record_run
    from dl2.schedulers.registry import make_scheduler
    from dl2.sim.config import SimConfig
    from dl2.sim.run import speed_model
    from dl2.workload.source import workload

    speed = speed_model(SimConfig.realistic().mode)
    drf = make_scheduler("drf", speed, False, "binpack")
    return record_run(workload(PACKED_SOURCE, seed), drf, SimConfig.realistic(seed), speed, interference)


def write_log(folder: Path, records: list[DecisionRecord], cluster: ClusterSpec) -> Path:
    """`records` as a decision log folder with its cluster.json, as a controller writes it."""
    import json

    from dl2.core.log_format import CLUSTER_FILE, cluster_to_json
    from dl2.sim.decision_log import write_segment

    write_segment(folder, records, 0)
    (folder / CLUSTER_FILE).write_text(json.dumps(cluster_to_json(cluster)))
    return folder
