"""The controller's own CPU in one slot, without a cluster: observe, decide (less the policy), record.

`benchmarks/kube_controller.py --part load` measures a slot of `dl2 serve` on the real control plane; most of its
wall time is the policy and the API server. This harness reproduces the controller's side of the same slot offline,
so that its Python can be profiled and tuned: a real `Controller` (`models/dl2-philly` in active mode, DRF as the
incumbent, no guardrails) whose informers' caches are filled from memory with the objects the cluster twin
writes (`testbed.twin.manifests`) for the first N Philly jobs submitted at once on the 352-node Philly cluster, and
whose API client answers every request at once (and records it). A share of the jobs is finished (`--active`);
the others ask for the tasks they were submitted with, one pod each, bound where DRF places them on the empty
cluster and Pending otherwise. Between slots the harness plays the twin: it applies the
controller's resizes to the jobs and their pods and advances every active job's progress.

Reported per phase, medians over the slots after the first (whose previous slot has no records to complete):
observe (caches to `Snapshot`), decide less the policy and the incumbent (the controller's overhead), the policy
network, the incumbent (DRF), record (completing the previous slot's records, `cluster.json`, the journal) and act
(the resizes, here against a client that answers at once).

    .venv/bin/python benchmarks/controller_cpu.py [--jobs 2000] [--slots 6] [--out results.json] [--keep DIR]

`--keep DIR` leaves the decision log and every request but the events (`requests.jsonl`) in DIR, to compare two
versions of the controller byte for byte; `--profile FILE` writes a cProfile of the slots (`python -m pstats`).
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import gc
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from common import environment, print_table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
MODEL = ROOT / "models" / "dl2-philly"
NAMESPACES = ("team-a", "team-b")
"""The cluster twin's managed namespaces (`TwinOptions.namespaces`)."""
PHILLY_ACTIVE_SHARE = 1184 / 2000
"""Active jobs of the 2,000-job load run on the real control plane, at its steady state."""
EPOCHS_PER_WORKER_SLOT = 0.05
"""Progress a worker makes in one slot here (only that progress changes matters, not how much)."""


def policy_object() -> dict[str, Any]:
    """`models/dl2-philly` as version 1 of `dl2-policy`, active, DRF as the incumbent, no guardrails."""
    return {
        "apiVersion": "dl2.io/v1alpha1",
        "kind": "SchedulerPolicy",
        "metadata": {"name": "default", "generation": 1},
        "spec": {"mode": "active", "model": {"name": "dl2-policy", "version": "1"}, "incumbent": "drf"},
    }


# -- an API client that answers at once ------------------------------------------------------------------------


class _Response:
    status = 200
    headers: ClassVar[dict[str, str]] = {}

    def read(self) -> bytes:
        return b"{}"


@dataclass
class MemoryApi:
    """Stands in for `kubernetes.client.ApiClient` under `dl2.kube.rest.Rest`: every request succeeds at once and is
    kept (method, path, content type, body)."""

    requests: list[tuple[str, str, str, Any]] = field(default_factory=list)

    def param_serialize(self, method: str, path: str, **kwargs: Any) -> tuple[str, str, dict[str, str], Any, None]:
        headers = kwargs.get("header_params") or {}
        return method, path, headers, kwargs.get("body"), None

    def call_api(self, method: str, url: str, headers: dict[str, str], body: Any, post: Any, **_: Any) -> _Response:
        self.requests.append((method, url, headers.get("Content-Type", ""), copy.deepcopy(body)))
        return _Response()


# -- the cluster the caches hold ---------------------------------------------------------------------------------


@dataclass
class Cluster:
    """The objects the controller's informers hold, by informer, keyed as an informer keys them."""

    namespaces: dict[str, dict[str, Any]]
    nodes: dict[str, dict[str, Any]]
    jobs: dict[str, dict[str, Any]]
    pods: dict[str, dict[str, Any]]
    specs: dict[str, Any]
    """Job name -> its `JobSpec` (what the twin builds a pod from)."""
    node_names: list[str]
    version: int = 1

    def stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Give an object the next resourceVersion, as the API server does on each write."""
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        return obj


def _server_fields(obj: dict[str, Any], uid: str, manager: str) -> dict[str, Any]:
    """What the API server adds to an object it stores: uid, generation, creation time, a managedFields entry."""
    metadata = obj["metadata"]
    metadata["uid"] = uid
    metadata["generation"] = 1
    metadata["creationTimestamp"] = "2024-01-01T00:00:00Z"
    metadata["managedFields"] = [
        {
            "manager": manager,
            "operation": "Update",
            "apiVersion": obj["apiVersion"],
            "time": "2024-01-01T00:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {}}, "f:spec": {}},
        }
    ]
    return obj


def build_cluster(num_jobs: int, num_active: int, seed: int) -> tuple[Cluster, Any]:
    """The first `num_jobs` Philly jobs, submitted at once; all but the `num_active` shortest (by declared epochs)
    finished; the active ones holding the tasks DRF gives them on an empty cluster. Returns the cluster and the
    workload."""
    import numpy as np

    from dl2.core import Allocation, ClusterView, JobAllocation, JobView
    from dl2.kube import contract as c
    from dl2.schedulers.registry import make_scheduler
    from dl2.sim.config import Mode
    from dl2.sim.run import speed_model
    from dl2.workload.registry import load_workloads
    from testbed.twin import manifests
    from testbed.twin.workloads import first_jobs

    philly = first_jobs(load_workloads("philly")[0], num_jobs)
    workload = replace(philly, jobs=tuple(replace(j, spec=replace(j.spec, arrival_s=0.0)) for j in philly.jobs))
    cluster_spec = workload.cluster
    node_names = [manifests.node_name(cluster_spec.name, n.node_id, cluster_spec.num_nodes) for n in cluster_spec.nodes]
    nodes = {
        name: _server_fields(manifests.node(spec, name), f"node-{i}", "kwok")
        for i, (spec, name) in enumerate(zip(cluster_spec.nodes, node_names, strict=True))
    }
    namespaces = {ns: manifests.namespace(ns, managed=True) for ns in NAMESPACES}
    rng = np.random.default_rng(seed)
    drawn = rng.integers(0, len(NAMESPACES), workload.num_jobs)
    by_length = sorted(range(workload.num_jobs), key=lambda i: workload.jobs[i].spec.declared_epochs, reverse=True)
    active = set(by_length[:num_active])
    specs = [job.spec for job in workload.jobs]
    running = tuple(JobView(specs[i], 0.0, 0.0, JobAllocation(), 0.0, 0.0, 0) for i in sorted(active))
    view = ClusterView(0.0, 0, workload.slot_s, cluster_spec, running, Allocation({}))
    drf = make_scheduler("drf", speed_model(Mode.REALISTIC), False, "load-balance")
    drf.reset()
    held = drf.schedule(view)
    jobs: dict[str, dict[str, Any]] = {}
    pods: dict[str, dict[str, Any]] = {}
    names: dict[str, Any] = {}
    for index, spec in enumerate(specs):
        name = manifests.job_name(index, workload.num_jobs, spec.model)
        namespace = NAMESPACES[int(drawn[index])]
        obj = _server_fields(manifests.job(spec, name, namespace), f"job-{index}", "dl2-twin")
        names[name] = spec
        if index not in active:
            obj["metadata"]["annotations"][c.PROGRESS_EPOCHS] = repr(float(spec.declared_epochs))
            obj["status"] = {"state": {"phase": "Completed"}}
        else:
            # the twin creates a pod per requested task; those DRF places are bound, the others stay Pending
            allocation = held.get(spec.job_id)
            for role, placed, count in (
                (c.WORKER, allocation.worker_nodes, spec.requested_workers),
                (c.PS, allocation.ps_nodes, spec.requested_ps),
            ):
                for i in range(count):
                    pod = _pod(spec, obj, role, i, node_names[placed[i]] if i < len(placed) else None)
                    pods[_key(pod)] = pod
            obj["metadata"]["annotations"][c.PROGRESS_EPOCHS] = "0.0"
            obj["status"] = {"state": {"phase": "Running"}}
        jobs[_key(obj)] = obj
    cluster = Cluster(namespaces, nodes, jobs, pods, names, node_names)
    for obj in (*nodes.values(), *jobs.values(), *pods.values()):
        cluster.stamp(obj)
    return cluster, workload


def _key(obj: dict[str, Any]) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


def _pod(spec: Any, job: dict[str, Any], role: str, index: int, node: str | None) -> dict[str, Any]:
    """A pod of the job's task, as its operator creates it and kwok runs it (Running on `node`, or Pending)."""
    from testbed.twin import manifests

    metadata = job["metadata"]
    pod = manifests.pod(
        spec, metadata["name"], metadata["namespace"], "jobs", metadata["uid"], role, index, node, "dl2-twin"
    )
    pod = _server_fields(pod, f"{metadata['uid']}-{role}-{index}", "dl2-twin")
    if node is None:
        pod["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}
    else:
        pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}], "hostIP": "10.0.0.1"}
    return pod


# -- the twin's side of a slot -------------------------------------------------------------------------------------


def apply_resizes(cluster: Cluster, requests: list[tuple[str, str, str, Any]]) -> list[dict[str, Any]]:
    """Apply the controller's JSON patches of Volcano Jobs to the jobs (a new object each, as a watch delivers one)
    and add or delete their pods to match: the new ones bound to nodes in turn (the policy's sizes fit the cluster,
    and only the count of bound pods matters here). Returns the objects changed or deleted (deleted ones marked
    `deleted: True`)."""
    changed: list[dict[str, Any]] = []
    turn = 0
    for method, path, _, body in requests:
        if method != "PATCH" or "/jobs/" not in path:
            continue
        parts = path.split("/")
        key = f"{parts[parts.index('namespaces') + 1]}/{parts[-1]}"
        obj = copy.deepcopy(cluster.jobs[key])
        for operation in body:
            if operation["op"] == "test":
                continue
            where = operation["path"].split("/")
            if where[1] == "spec":
                obj["spec"]["tasks"][int(where[3])]["replicas"] = operation["value"]
            else:
                obj["metadata"]["annotations"][where[-1].replace("~1", "/").replace("~0", "~")] = operation["value"]
        obj["metadata"]["generation"] += 1
        cluster.jobs[key] = cluster.stamp(obj)
        changed.append(obj)
        for task in obj["spec"]["tasks"]:
            role = task["name"]
            prefix = f"{key}-{role}-"
            have = sorted((k for k in cluster.pods if k.startswith(prefix)), key=lambda k: int(k.rsplit("-", 1)[1]))
            for gone in have[task["replicas"] :]:
                changed.append({**cluster.pods.pop(gone), "deleted": True})
            for index in range(len(have), task["replicas"]):
                turn += 1
                node = cluster.node_names[turn % len(cluster.node_names)]
                pod = cluster.stamp(_pod(cluster.specs[obj["metadata"]["name"]], obj, role, index, node))
                cluster.pods[_key(pod)] = pod
                changed.append(pod)
    return changed


def advance_progress(cluster: Cluster) -> list[dict[str, Any]]:
    """Every running job trains: its progress annotation grows with its workers (a new object each)."""
    from dl2.kube import contract as c

    changed = []
    for key, obj in list(cluster.jobs.items()):
        if obj["status"]["state"]["phase"] != "Running":
            continue
        annotations = obj["metadata"]["annotations"]
        workers = next(t["replicas"] for t in obj["spec"]["tasks"] if t["name"] == c.WORKER)
        epochs = float(annotations[c.PROGRESS_EPOCHS]) + EPOCHS_PER_WORKER_SLOT * workers
        metadata = {**obj["metadata"], "annotations": {**annotations, c.PROGRESS_EPOCHS: repr(epochs)}}
        cluster.jobs[key] = cluster.stamp({**obj, "metadata": metadata})
        changed.append(cluster.jobs[key])
    return changed


# -- the run -----------------------------------------------------------------------------------------------------


def fill_caches(controller: Any, cluster: Cluster) -> None:
    """Give the controller's informers the cluster as their first list (no thread, no API: `start` is skipped)."""
    cache = controller.cache
    cache._started = True
    cache.namespaces._replace(list(cluster.namespaces.values()), str(cluster.version))
    cache.nodes._replace(list(cluster.nodes.values()), str(cluster.version))
    cache.volcano_jobs._replace(list(cluster.jobs.values()), str(cluster.version))
    cache.volcano_pods._replace(list(cluster.pods.values()), str(cluster.version))
    for informer in (cache.pytorchjobs, cache.kubeflow_pods, cache.autoscalers):
        informer._replace([], str(cluster.version))


def deliver(controller: Any, changed: list[dict[str, Any]]) -> None:
    """Watch events of the changed objects, to the informer that watches each."""
    cache = controller.cache
    for obj in changed:
        informer = cache.volcano_pods if obj["kind"] == "Pod" else cache.volcano_jobs
        deleted = obj.pop("deleted", False)
        informer._apply({"type": "DELETED" if deleted else "MODIFIED", "object": obj})


@dataclass
class GcClock:
    """Seconds the garbage collector ran, and its full collections (with thousands of cached objects alive, a
    full collection costs as much as a phase)."""

    seconds: float = 0.0
    full: int = 0
    _started: float = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        self.seconds += time.perf_counter() - self._started
        self.full += info["generation"] == 2


def timed(function: Callable[..., Any], seconds: list[float]) -> Callable[..., Any]:
    def wrapper(*args: Any) -> Any:
        started = time.perf_counter()
        result = function(*args)
        seconds.append(time.perf_counter() - started)
        return result

    return wrapper


def run(num_jobs: int, num_active: int, slots: int, folder: Path, profile: Path | None) -> dict[str, Any]:
    from dl2.kube.controller import Controller
    from dl2.kube.models import directory_loader
    from dl2.kube.settings import ControllerConfig

    models = folder / "models" / "dl2-policy"
    models.mkdir(parents=True, exist_ok=True)
    (models / "1").symlink_to(MODEL)
    built = time.perf_counter()
    cluster, workload = build_cluster(num_jobs, num_active, seed=0)
    build_s = time.perf_counter() - built
    api = MemoryApi()
    config = ControllerConfig("bench", decision_log=folder / "decisions", clock="cluster")
    controller = Controller(api, config, directory_loader(folder / "models"))
    controller.refresh_policy(policy_object())
    assert controller.runtime.current is not None, controller.runtime.load_error
    policy_s: list[float] = []
    incumbent_s: list[float] = []
    model = controller.runtime.current.scheduler
    model.schedule = timed(model.schedule, policy_s)  # type: ignore[method-assign]
    incumbent = controller.runtime.incumbent("drf")
    incumbent.schedule = timed(incumbent.schedule, incumbent_s)  # type: ignore[method-assign]
    fill_caches(controller, cluster)
    profiler = cProfile.Profile() if profile is not None else None
    rows: list[dict[str, Any]] = []
    kept: list[tuple[str, str, str, Any]] = []
    collector = GcClock()
    gc.callbacks.append(collector)
    for slot in range(slots):
        api.requests.clear()
        collector.seconds, collector.full = 0.0, 0
        if profiler is not None and slot > 0:
            profiler.enable()
        report = controller.run_slot(slot, slot * workload.slot_s, workload.slot_s)
        if profiler is not None:
            profiler.disable()
        assert report is not None
        phases = report.phases
        rows.append(
            {
                "slot": slot,
                "jobs": report.jobs,
                "pods": len(cluster.pods),
                "resizes": report.resizes,
                "records": report.records,
                "api_calls": report.api_calls,
                "observe_s": phases["observe"],
                "decide_s": phases["decide"],
                "policy_s": policy_s[-1],
                "incumbent_s": incumbent_s[-1],
                "decide_overhead_s": phases["decide"] - policy_s[-1] - incumbent_s[-1],
                "record_s": phases["record"],
                "act_s": phases["act"],
                "gc_s": collector.seconds,
                "full_collections": collector.full,
            }
        )
        # in a fixed order: the resizes run in parallel, and the order they land in places the new pods
        writes = sorted(
            (r for r in api.requests if "/events" not in r[1]), key=lambda r: (r[1], json.dumps(r[3], sort_keys=True))
        )
        kept += writes
        deliver(controller, apply_resizes(cluster, writes) + advance_progress(cluster))
    gc.callbacks.remove(collector)
    controller.events.stop()
    (folder / "decisions" / "requests.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))
    if profiler is not None and profile is not None:
        profiler.dump_stats(profile)
    steady = rows[1:] or rows
    medians = {name: statistics.median(row[name] for row in steady) for name in rows[0] if name.endswith("_s")}
    return {
        "jobs": num_jobs,
        "active_jobs": num_active,
        "nodes": len(cluster.nodes),
        "build_s": build_s,
        "slots": rows,
        "median": medians,
        "controller_cpu_s": medians["observe_s"] + medians["decide_overhead_s"] + medians["record_s"],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2000, help="first N Philly jobs, submitted at once")
    parser.add_argument(
        "--active", type=int, default=None, help="of which still running (default: the share of the 2,000-job run)"
    )
    parser.add_argument("--slots", type=int, default=6, help="slots to run (the first is not counted)")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    parser.add_argument("--keep", type=Path, default=None, help="keep the decision log and the requests here")
    parser.add_argument("--profile", type=Path, default=None, help="write a cProfile of the counted slots here")
    args = parser.parse_args(argv)
    active = args.active if args.active is not None else round(args.jobs * PHILLY_ACTIVE_SHARE)
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=False)
        result = run(args.jobs, active, args.slots, args.keep, args.profile)
    else:
        with tempfile.TemporaryDirectory(prefix="dl2-controller-cpu-") as folder:
            result = run(args.jobs, active, args.slots, Path(folder), args.profile)
    median = result["median"]
    print_table(
        f"one slot's phases at {args.jobs:,} jobs ({active:,} active, {result['slots'][-1]['pods']:,} pods), "
        f"median of {max(len(result['slots']) - 1, 1)} slots",
        ["phase", "median s"],
        [[name.removesuffix("_s"), f"{value:.4f}"] for name, value in median.items()]
        + [["controller CPU (observe + decide overhead + record)", f"{result['controller_cpu_s']:.4f}"]],
    )
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({**result, "environment": environment()}, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
