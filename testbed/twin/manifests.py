"""The objects the cluster twin writes, built from dl2's data model as the job contract (`dl2.kube.contract`) reads
them: namespaces, kwok nodes, the jobs a user submits (PyTorchJob for all-reduce, Volcano Job for parameter
servers), the pods their operators create, and the jobs' status as the operators report it."""

from __future__ import annotations

from typing import Any

from dl2.core import Architecture, JobSpec, NodeSpec, Resources
from dl2.kube import contract as c
from dl2.kube.accelerator_labels import product_labels
from dl2.workload.catalogue import CATALOGUE

IMAGE = "dl2.io/simulated-trainer:{model}"
KWOK_NODE = "kwok.x-k8s.io/node"
"""The annotation kwok manages nodes by (`ControlPlane` runs kwok with this selector)."""
ELASTIC_MIN_REPLICAS = 1


def namespace(name: str, managed: bool) -> dict[str, Any]:
    labels = {"kubernetes.io/metadata.name": name}
    if managed:
        labels[c.MANAGED_LABEL] = "true"
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def node_name(cluster_name: str, index: int, num_nodes: int) -> str:
    """Zero-padded, so that names sort in node order."""
    prefix = "".join(ch if ch.isalnum() else "-" for ch in cluster_name.lower()).strip("-") or "node"
    return f"{prefix}-{index:0{max(3, len(str(num_nodes - 1)))}d}"


def node(spec: NodeSpec, name: str) -> dict[str, Any]:
    """A Node kwok plays the kubelet of: it keeps the capacity given here and reports the node Ready; a node of an
    accelerator type other than the reference carries GPU feature discovery's labels for it (`nvidia.com/gpu.product`,
    `nvidia.com/gpu.memory`: `dl2.kube.accelerator_labels`), which the controller reads its type from."""
    capacity = {**c.requests_of(spec.capacity), "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE: "fake"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                "node.kubernetes.io/instance-type": spec.kind,
                c.NODE_INDEX_LABEL: str(spec.node_id),
                **product_labels(spec.accelerator),  # as GPU feature discovery labels a GPU node
            },
        },
        "spec": {},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def job_name(index: int, num_jobs: int, model: str) -> str:
    """`job-0042-resnet-50`: the workload index first and zero-padded, so names sort in workload order."""
    return f"job-{index:0{max(4, len(str(num_jobs - 1)))}d}-{model}"


def image(spec: JobSpec) -> str:
    return IMAGE.format(model=spec.model)


def _container(spec: JobSpec, demand: Resources) -> dict[str, Any]:
    requests = c.requests_of(demand)
    limits = {c.GPU: requests[c.GPU]} if c.GPU in requests else {}
    return {
        "name": "trainer",
        "image": image(spec),
        "resources": {"requests": requests, "limits": limits} if limits else {"requests": requests},
    }


def _pod_spec(spec: JobSpec, demand: Resources, scheduler: str) -> dict[str, Any]:
    return {
        "schedulerName": scheduler,
        "restartPolicy": "OnFailure",
        "automountServiceAccountToken": False,  # the trainer never calls the API
        "containers": [_container(spec, demand)],
    }


def _template(spec: JobSpec, demand: Resources, scheduler: str) -> dict[str, Any]:
    return {"spec": _pod_spec(spec, demand, scheduler)}


def job(
    spec: JobSpec, name: str, namespace: str, kueue_queue: str | None = None, scheduler: str = "default-scheduler"
) -> dict[str, Any]:
    """What a user submits: a PyTorchJob for an all-reduce job, a Volcano Job for a parameter-server job; its
    pods go to `scheduler`."""
    annotations = {
        c.JOB_ID: spec.job_id,
        c.MODEL: spec.model,
        c.DECLARED_EPOCHS: repr(float(spec.declared_epochs)),
        c.ARRIVAL_S: repr(float(spec.arrival_s)),
        c.REQUESTED_WORKERS: str(spec.requested_workers),
    }
    if float(spec.samples_per_epoch) != float(CATALOGUE[spec.model].samples_per_epoch):
        annotations[c.SAMPLES_PER_EPOCH] = repr(float(spec.samples_per_epoch))
    labels = {c.JOB_LABEL: name}
    if kueue_queue is not None:
        labels[c.KUEUE_QUEUE_LABEL] = kueue_queue
    metadata = {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations}
    if spec.architecture is Architecture.ALLREDUCE:
        return {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": metadata,
            "spec": {
                "elasticPolicy": {
                    "minReplicas": ELASTIC_MIN_REPLICAS,
                    "maxReplicas": spec.max_workers,
                    "rdzvBackend": "c10d",
                },
                "runPolicy": {"cleanPodPolicy": "None"},
                "pytorchReplicaSpecs": {
                    "Worker": {
                        "replicas": spec.requested_workers,
                        "restartPolicy": "OnFailure",
                        "template": _template(spec, spec.worker_demand, scheduler),
                    }
                },
            },
        }
    annotations[c.REQUESTED_PS] = str(spec.requested_ps)
    annotations[c.MAX_WORKERS] = str(spec.max_workers)
    annotations[c.MAX_PS] = str(spec.max_ps)
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "schedulerName": scheduler,
            "queue": "default",
            "minAvailable": 2,  # one PS and one worker: the least a parameter-server job runs with
            "tasks": [
                {
                    "name": c.PS,
                    "replicas": spec.requested_ps,
                    "template": _template(spec, spec.ps_demand, scheduler),
                },
                {
                    "name": c.WORKER,
                    "replicas": spec.requested_workers,
                    "template": _template(spec, spec.worker_demand, scheduler),
                },
            ],
        },
    }


def pod_name(job: str, role: str, index: int) -> str:
    return f"{job}-{role}-{index}"


def pod(
    spec: JobSpec,
    job: str,
    namespace: str,
    plural: str,
    uid: str,
    role: str,
    index: int,
    node: str | None,
    scheduler: str,
) -> dict[str, Any]:
    """A pod of one task as the job's operator creates it (owned by the job, so the garbage collector removes it
    with the job): on `node`, or Pending for `scheduler` to place."""
    labels: dict[str, str]  # the operator's labels only: what the controller finds a job's pods by
    if plural == "pytorchjobs":
        labels = {c.KUBEFLOW_JOB_NAME: job, c.KUBEFLOW_REPLICA_TYPE: role, c.KUBEFLOW_REPLICA_INDEX: str(index)}
        owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob"}
    else:
        labels = {c.VOLCANO_JOB_NAME: job, c.VOLCANO_TASK_SPEC: role, "volcano.sh/job-namespace": namespace}
        owner = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job"}
    demand = spec.worker_demand if role == c.WORKER else spec.ps_demand
    pod_spec = _pod_spec(spec, demand, scheduler)
    if node is not None:
        pod_spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(job, role, index),
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": [{**owner, "name": job, "uid": uid, "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": pod_spec,
    }


def job_status(
    job_object: dict[str, Any],
    running: dict[str, int],
    pending: dict[str, int],
    finished: bool,
    started: bool,
    previous: dict[str, Any] | None,
    now: str,
) -> dict[str, Any]:
    """The status an operator reports: replica counts per role and the job's phase (conditions or state)."""
    previous = previous or {}
    if job_object["kind"] == "PyTorchJob":
        name = job_object["metadata"]["name"]
        selector = f"{c.KUBEFLOW_JOB_NAME}={name},{c.KUBEFLOW_REPLICA_TYPE}={c.WORKER}"
        worker: dict[str, Any] = {"active": 0 if finished else running.get(c.WORKER, 0), "selector": selector}
        if finished:
            worker["succeeded"] = running.get(c.WORKER, 0)
        types = ["Created"] + (["Running"] if started else []) + (["Succeeded"] if finished else [])
        old = {condition["type"]: condition for condition in previous.get("conditions") or []}
        conditions = []
        for kind in types:
            status = "False" if kind == "Running" and finished else "True"
            kept = old.get(kind)
            if kept is not None and kept.get("status") == status:
                conditions.append(kept)
            else:
                conditions.append(
                    {
                        "type": kind,
                        "status": status,
                        "reason": f"PyTorchJob{kind}",
                        "lastTransitionTime": now,
                        "lastUpdateTime": now,
                    }
                )
        status_body: dict[str, Any] = {"conditions": conditions, "replicaStatuses": {"Worker": worker}}
        if started:
            status_body["startTime"] = previous.get("startTime", now)
        if finished:
            status_body["completionTime"] = previous.get("completionTime", now)
        return status_body
    phase = "Completed" if finished else "Running" if running.get(c.WORKER, 0) and running.get(c.PS, 0) else "Pending"
    old_state = previous.get("state") or {}
    state = old_state if old_state.get("phase") == phase else {"phase": phase, "lastTransitionTime": now}
    conditions = list(previous.get("conditions") or [])
    if not conditions or conditions[-1].get("status") != phase:
        conditions.append({"status": phase, "lastTransitionTime": now})
    total_running = 0 if finished else sum(running.values())
    return {
        "state": state,
        "minAvailable": 2,
        "running": total_running,
        "pending": 0 if finished else sum(pending.values()),
        "succeeded": sum(running.values()) if finished else 0,
        "taskStatusCount": {
            role: {
                "phase": {
                    "Succeeded" if finished else "Running": running.get(role, 0),
                    **({} if finished else {"Pending": pending.get(role, 0)}),
                }
            }
            for role in (c.PS, c.WORKER)
        },
        "version": 1,
        "conditions": conditions,
    }
