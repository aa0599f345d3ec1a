"""Hand-made jobs, one-node workloads and a speed model whose results can be computed by hand: what the unit
tests build their cases from; and the Kubernetes tests' data: a tiny workload, manifests, a stand-in model loader
and a count of the controller's resize requests in an audit log. Plain values from their arguments only (imported,
as a module; what acts on a test's cluster is a fixture of `kube_fixtures.py`, the rest live in `conftest.py`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from dl2.core import Architecture, ClusterSpec, DecisionRecord, Job, JobAllocation, JobSpec, Resources, Workload
from dl2.workload.interference import InterferenceModel
from dl2.workload.mapping import TraceMapping
from dl2.workload.synthetic import PRESETS, generate

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

CONTROLLER_AGENT = "dl2-serve"
"""The user agent of the controller's client (`KubeEnv.controller_api`), as its requests show in the audit log."""


def tiny_workload(num_jobs: int = 8, num_nodes: int = 2, seed: int = 3) -> Workload:
    """Half all-reduce PyTorchJobs, half parameter-server Volcano Jobs, on 8-GPU nodes."""
    spec = replace(
        PRESETS["synthetic-small"], num_jobs=num_jobs, num_nodes=num_nodes, mapping=TraceMapping(allreduce_fraction=0.5)
    )
    return generate(spec, seed, "tiny")


def policy_object(mode: str = "active", version: str | None = "1", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"mode": mode, **spec}
    if version is not None:
        body["model"] = {"name": "dl2-policy", "version": version}
    return {"apiVersion": "dl2.io/v1alpha1", "kind": "SchedulerPolicy", "metadata": {"name": "default"}, "spec": body}


def heuristic_loader(
    name: str = "drf", failing: tuple[str, ...] = (), placer: str = "load-balance"
) -> Callable[[str, str], Any]:
    """Every version is heuristic `name` (a stand-in model that needs no training), except `failing` ones; it
    places with `placer`, as the cluster does (a heuristic's counts depend on where its tasks fit)."""
    from dl2.schedulers.registry import make_scheduler
    from dl2.sim.config import Mode
    from dl2.sim.run import speed_model

    def load(model: str, version: str) -> Any:
        if version in failing:
            raise FileNotFoundError(f"no version {version} of {model}")
        return make_scheduler(name, speed_model(Mode.REALISTIC), False, placer)

    return load


CUT_OFF = 504
"""What kube-apiserver answers, and audits, for a request whose client went away while it handled it ("request did
not complete within requested timeout - context canceled"): its write may have landed all the same."""


def _controller_resizes(events: list[Any]) -> list[Any]:
    return [
        event
        for event in events
        if CONTROLLER_AGENT in event.user_agent
        and event.verb == "patch"
        and (event.rbac_resource == "pytorchjobs" or (event.api_group, event.resource) == ("batch.volcano.sh", "jobs"))
    ]


def sent_resizes(events: list[Any]) -> Counter[str]:
    """Job name -> the controller's resize requests in `events` (one slot's, in the audit log's order) that took
    effect: each one the API server accepted, and each one cut off by its client's death (`CUT_OFF`: a kill amid
    the slot's parallel resizes) unless an accepted one for the job follows it. The restart that replays the slot
    resends a resize only where the job does not hold its target yet, so a cut-off request it does not resend had
    landed; counting accepted requests only would call that resize lost. (A resize really lost shows in the run's
    outcome too. A cut-off request that landed and was resent all the same, a repeat, counts once: the audit log
    cannot tell it from one that had not landed.)"""
    counts: Counter[str] = Counter()
    cut_off: list[str] = []
    for event in _controller_resizes(events):
        if event.code < 300:
            counts[event.name] += 1
            if event.name in cut_off:
                cut_off.remove(event.name)  # resent: the cut-off request had not landed
        elif event.code == CUT_OFF:
            cut_off.append(event.name)
    counts.update(cut_off)
    return counts


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
