"""The objects a simulated cluster writes, built from dl2's data model as the contract (`..contract`) reads them:
namespaces, nodes, the jobs a user submits (PyTorchJob for all-reduce, Volcano Job for parameter servers), the
pods the operators create for them, and their status as the operators report it."""

from __future__ import annotations

from typing import Any

from dl2.core import Architecture, JobSpec, NodeSpec, Resources
from dl2.kube.apiserver import contract as c
from dl2.workload.catalogue import CATALOGUE

KUBELET_VERSION = "v1.35.0-dl2sim"
IMAGE = "dl2.io/simulated-trainer:{model}"
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
    capacity = {**c.requests_of(spec.capacity), "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": spec.kind,
                c.NODE_INDEX_LABEL: str(spec.node_id),
            },
        },
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": name,
                "containerRuntimeVersion": "simulated://1.0",
                "kernelVersion": "simulated",
                "kubeProxyVersion": KUBELET_VERSION,
                "kubeletVersion": KUBELET_VERSION,
                "machineID": name,
                "operatingSystem": "linux",
                "osImage": "dl2 simulated node",
                "systemUUID": name,
            },
        },
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


def _template(spec: JobSpec, demand: Resources, labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"labels": labels}, "spec": {"containers": [_container(spec, demand)]}}


def job(spec: JobSpec, name: str, namespace: str, kueue_queue: str | None = None) -> dict[str, Any]:
    """What a user submits: a PyTorchJob for an all-reduce job, a Volcano Job for a parameter-server job."""
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
                        "template": _template(spec, spec.worker_demand, {c.JOB_LABEL: name}),
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
            "schedulerName": "volcano",
            "queue": "default",
            "minAvailable": 2,  # one PS and one worker: the least a parameter-server job runs with
            "tasks": [
                {
                    "name": c.PS,
                    "replicas": spec.requested_ps,
                    "template": _template(spec, spec.ps_demand, {c.JOB_LABEL: name}),
                },
                {
                    "name": c.WORKER,
                    "replicas": spec.requested_workers,
                    "template": _template(spec, spec.worker_demand, {c.JOB_LABEL: name}),
                },
            ],
        },
    }


def pod_name(job: str, role: str, index: int) -> str:
    return f"{job}-{role}-{index}"


def pod(
    spec: JobSpec,
    job_object: dict[str, Any],
    role: str,
    index: int,
    node: str | None,
    now: str,
) -> dict[str, Any]:
    """A pod of one task as the job's operator creates it: bound and Running, or Pending when it fits nowhere."""
    metadata = job_object["metadata"]
    name = metadata["name"]
    labels = {c.JOB_LABEL: name, c.ROLE_LABEL: role}
    if job_object["kind"] == "PyTorchJob":
        labels |= {c.KUBEFLOW_JOB_NAME: name, c.KUBEFLOW_REPLICA_TYPE: role, c.KUBEFLOW_REPLICA_INDEX: str(index)}
        scheduler = "default-scheduler"
    else:
        labels |= {
            c.VOLCANO_JOB_NAME: name,
            c.VOLCANO_TASK_SPEC: role,
            "volcano.sh/job-namespace": metadata["namespace"],
        }
        scheduler = "volcano"
    demand = spec.worker_demand if role == c.WORKER else spec.ps_demand
    owner = {
        "apiVersion": job_object["apiVersion"],
        "kind": job_object["kind"],
        "name": name,
        "uid": metadata["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    pod_spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "restartPolicy": "OnFailure",
        "containers": [_container(spec, demand)],
    }
    if node is not None:
        pod_spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(name, role, index),
            "namespace": metadata["namespace"],
            "labels": labels,
            "ownerReferences": [owner],
        },
        "spec": pod_spec,
        "status": pod_status("Running" if node is not None else "Pending", now, image(spec)),
    }


def pod_status(phase: str, now: str, image: str) -> dict[str, Any]:
    if phase == "Pending":
        return {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "no node has the free resources the task requests",
                }
            ],
        }
    running = phase == "Running"
    state = {"running": {"startedAt": now}} if running else {"terminated": {"exitCode": 0, "reason": "Completed"}}
    return {
        "phase": phase,
        "startTime": now,
        "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": str(running)}],
        "containerStatuses": [
            {"name": "trainer", "image": image, "imageID": image, "ready": running, "restartCount": 0, "state": state}
        ],
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
