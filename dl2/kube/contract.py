"""The job contract: how dl2 reads jobs, pods and nodes from the Kubernetes API, and how it resizes jobs.

The controller (`dl2 serve`) and the cluster twin (`testbed.twin`) both follow it.

- API group of dl2's own objects: `dl2.io`; labels and annotations are prefixed `dl2.io/`.
- Managed namespaces carry the label `dl2.io/managed: "true"`.
- All-reduce jobs are Kubeflow `PyTorchJob`s (`kubeflow.org/v1`) with `spec.elasticPolicy{minReplicas,
  maxReplicas}` and workers only, in `spec.pytorchReplicaSpecs.Worker.replicas` (the field the CRD's `scale`
  subresource reads and writes); they are resized by a merge patch of that field.
- Parameter-server jobs are Volcano `Job`s (`batch.volcano.sh/v1alpha1`) with `spec.tasks[]` named `ps` and
  `worker`; they are resized by JSON-patching `/spec/tasks/<i>/replicas` (with a `test` of
  `/spec/tasks/<i>/name`, so a patch never resizes the wrong task); their limits are the annotations
  `dl2.io/max-workers` and `dl2.io/max-ps` (Volcano has no elastic policy).
- Every managed job carries the annotations `dl2.io/model` (its model's name; one the catalogue,
  `dl2.workload.catalogue`, lacks is scheduled under the profile of the catalogue model nearest to it,
  `proxy_model`, and listed in the policy's status),
  `dl2.io/declared-epochs` and, once it has trained, `dl2.io/progress-epochs` (reported by the training job,
  `dl2.report`; by the simulator in simulated mode, every slot), or `dl2.io/progress-query`: a PromQL query of
  the metrics the job exports whose answer is its epochs done (`dl2.kube.progress_metrics`; the larger of the
  two counts). Optional: `dl2.io/arrival-s` (submission time on the
  simulated clock; otherwise `creationTimestamp`), `dl2.io/job-id` (the workload's job id; otherwise the name),
  `dl2.io/requested-workers`, `dl2.io/requested-ps`, `dl2.io/samples-per-epoch` (otherwise the catalogue's).
- Per-task resources are the pod template's container `resources.requests` (`nvidia.com/gpu`, `cpu`,
  `memory`), summed over containers; dl2's `mem_gb` is GiB (`24Gi`).
- A job's pods are found by the labels its operator sets, nothing of dl2's: Kubeflow's training operator labels
  a PyTorchJob's pods `training.kubeflow.org/job-name` and `training.kubeflow.org/replica-type` (`worker`; other
  replica types, such as a `master`, are not dl2's to size and are not counted) and `-index`; Volcano labels a
  Job's pods `volcano.sh/job-name` and `volcano.sh/task-spec` (the task's name, `ps` or `worker`).
- Jobs labelled `kueue.x-k8s.io/queue-name` are managed by Kueue: the controller leaves them alone (Kueue
  requeues a job whose size changes).
- Jobs whose size something else owns are left alone too, with the reason in the policy's status
  (`size_owner`, `autoscaled_jobs`): a PyTorchJob with `spec.elasticPolicy.metrics` (the training operator
  sizes it through an HPA), a job a HorizontalPodAutoscaler's `scaleTargetRef` names, a job whose replicas a
  server-side apply manager other than dl2 owns (a GitOps tool re-applying them would undo every resize), a
  job Argo CD or Flux tracks. The annotation `dl2.io/allow-resize: "true"` says the owner leaves the size to
  dl2 (e.g. Argo CD's `ignoreDifferences` on it).
- Finished jobs: a PyTorchJob has the condition `Succeeded` = "True"; a Volcano Job has
  `status.state.phase: Completed`.

The real CRDs needed no other choice: the PyTorchJob CRD's scale subresource reads and writes exactly
`.spec.pytorchReplicaSpecs.Worker.replicas`, and Volcano's task list is indexed, hence the JSON patch.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from dl2.core import Architecture, JobSpec, Resources
from dl2.workload.catalogue import CATALOGUE

GROUP = "dl2.io"
MANAGED_LABEL = "dl2.io/managed"
JOB_LABEL = "dl2.io/job"
ROLE_LABEL = "dl2.io/role"
NODE_INDEX_LABEL = "dl2.io/node-index"
MODEL = "dl2.io/model"
DECLARED_EPOCHS = "dl2.io/declared-epochs"
PROGRESS_EPOCHS = "dl2.io/progress-epochs"
PROGRESS_QUERY = "dl2.io/progress-query"
MAX_WORKERS = "dl2.io/max-workers"
MAX_PS = "dl2.io/max-ps"
ARRIVAL_S = "dl2.io/arrival-s"
JOB_ID = "dl2.io/job-id"
REQUESTED_WORKERS = "dl2.io/requested-workers"
REQUESTED_PS = "dl2.io/requested-ps"
SAMPLES_PER_EPOCH = "dl2.io/samples-per-epoch"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
ALLOW_RESIZE = "dl2.io/allow-resize"
GITOPS_MARKERS = {
    "argocd.argoproj.io/tracking-id": "Argo CD",  # annotation tracking
    "argocd.argoproj.io/instance": "Argo CD",  # label tracking (the usual custom key)
    "kustomize.toolkit.fluxcd.io/name": "Flux",
    "helm.toolkit.fluxcd.io/name": "Flux",
}
"""Labels or annotations a GitOps tool puts on what it applies: it re-applies the manifest's replicas."""
OWN_MANAGER_PREFIX = "dl2"
"""Field managers of dl2's own writes (`dl2-serve`, `dl2-twin`, ...)."""
GPU = "nvidia.com/gpu"

PYTORCHJOB = ("kubeflow.org", "v1", "pytorchjobs")
VOLCANO_JOB = ("batch.volcano.sh", "v1alpha1", "jobs")
KUBEFLOW_JOB_NAME = "training.kubeflow.org/job-name"
KUBEFLOW_REPLICA_TYPE = "training.kubeflow.org/replica-type"
KUBEFLOW_REPLICA_INDEX = "training.kubeflow.org/replica-index"
VOLCANO_JOB_NAME = "volcano.sh/job-name"
VOLCANO_TASK_SPEC = "volcano.sh/task-spec"
WORKER, PS = "worker", "ps"


class ContractError(ValueError):
    """An object that does not follow the contract (names the object and the field)."""


# -- quantities -------------------------------------------------------------------------------------------

_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))([eE][+-]?\d+|[KMGTPE]i|[numkMGTPE]?)$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}


def parse_quantity(text: Any) -> Decimal:
    """A Kubernetes resource quantity (`4`, `500m`, `24Gi`, `1.5e3`) as an exact decimal."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return Decimal(repr(text))
    match = _QUANTITY.match(str(text).strip())
    if not match:
        raise ContractError(f"not a resource quantity: {text!r}")
    number, suffix = Decimal(match[1]), match[2]
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix[:1] in ("e", "E"):
        return number.scaleb(int(suffix[1:]))
    return number * _DECIMAL[suffix]


def _decimal_text(value: float) -> str:
    """The shortest exact decimal of a float (repr's digits, without an exponent)."""
    text = format(Decimal(repr(float(value))), "f")
    return text[:-2] if text.endswith(".0") else text


def format_quantity(value: float, unit: str = "") -> str:
    """A quantity that parses back to `value` exactly: whole numbers as such, others by repr's digits."""
    if not math.isfinite(value) or value < 0:
        raise ContractError(f"resource amounts must be finite and non-negative, got {value}")
    return _decimal_text(value) + unit


def requests_of(demand: Resources) -> dict[str, str]:
    """The container `resources.requests` of one task's demand."""
    requests = {"cpu": format_quantity(demand.cpu), "memory": format_quantity(demand.mem_gb, "Gi")}
    if demand.gpu > 0:
        requests[GPU] = format_quantity(demand.gpu)
    return requests


def resources_from(quantities: dict[str, Any] | None) -> Resources:
    quantities = quantities or {}
    return Resources(
        gpu=float(parse_quantity(quantities.get(GPU, 0))),
        cpu=float(parse_quantity(quantities.get("cpu", 0))),
        mem_gb=float(parse_quantity(quantities.get("memory", 0)) / _BINARY["Gi"]),
    )


def pod_template_demand(template: dict[str, Any] | None) -> Resources:
    """A pod template's demand: its containers' requests, summed."""
    containers = ((template or {}).get("spec") or {}).get("containers") or []
    total = Resources()
    for container in containers:
        total = total + resources_from((container.get("resources") or {}).get("requests"))
    return total


# -- reading jobs -----------------------------------------------------------------------------------------


def kind_of(obj: dict[str, Any]) -> tuple[str, str, str]:
    """(group, version, plural) of a job object, checked to be one of the two job kinds."""
    api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    if api_version == "kubeflow.org/v1" and kind == "PyTorchJob":
        return PYTORCHJOB
    if api_version == "batch.volcano.sh/v1alpha1" and kind == "Job":
        return VOLCANO_JOB
    raise ContractError(f"{_where(obj)}: not a PyTorchJob or a Volcano Job ({api_version} {kind})")


def _where(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{obj.get('kind', 'object')} {metadata.get('namespace', '')}/{metadata.get('name', '?')}"


def _annotation(obj: dict[str, Any], key: str, default: str | None = None) -> str:
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(key, default)
    if value is None:
        raise ContractError(f"{_where(obj)}: missing annotation {key}")
    return str(value)


def _number(obj: dict[str, Any], key: str, default: str | None = None) -> float:
    text = _annotation(obj, key, default)
    try:
        value = float(Decimal(text))
    except InvalidOperation:
        raise ContractError(f"{_where(obj)}: annotation {key} is not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ContractError(f"{_where(obj)}: annotation {key} must be finite and non-negative, got {text!r}")
    return value


def _count(obj: dict[str, Any], key: str, default: str | None = None) -> int:
    value = _number(obj, key, default)
    if not value.is_integer():
        raise ContractError(f"{_where(obj)}: annotation {key} must be a whole number, got {value}")
    return int(value)


def volcano_task(obj: dict[str, Any], name: str) -> tuple[int, dict[str, Any]] | None:
    """(index, task) of the Volcano task with this name, or None."""
    for index, task in enumerate((obj.get("spec") or {}).get("tasks") or []):
        if task.get("name") == name:
            return index, task
    return None


def _arrival_s(obj: dict[str, Any]) -> float:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    if ARRIVAL_S in annotations:
        return _number(obj, ARRIVAL_S)
    created = (obj.get("metadata") or {}).get("creationTimestamp")
    try:
        return datetime.datetime.fromisoformat(str(created).replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ContractError(f"{_where(obj)}: no {ARRIVAL_S} annotation and no creationTimestamp") from None


def proxy_model(gpu_workers: bool, ps_mem_gb: float | None, samples_per_epoch: float | None) -> str:
    """The catalogue model whose profile stands in for a model the catalogue lacks: one of the same kind of worker
    (GPU or CPU-only), then the nearest in what the job shows of itself: its parameter servers' memory (sized to
    the model: `ModelProfile.ps_demand`), else its samples per epoch, else the first in the catalogue. Only a
    prior: what the job really does is in its observed progress, which online fits (`optimus-fitted`) and the
    calibration of decision records (`dl2.workload.calibration`, by demand) learn from."""
    same_kind = [p for p in CATALOGUE.values() if p.uses_gpu == gpu_workers] or list(CATALOGUE.values())
    if ps_mem_gb is not None:
        return min(same_kind, key=lambda p: (abs(p.ps_demand.mem_gb - ps_mem_gb), p.type_index)).name
    if samples_per_epoch is not None:
        return min(same_kind, key=lambda p: (abs(p.samples_per_epoch - samples_per_epoch), p.type_index)).name
    return same_kind[0].name


def unknown_model(obj: dict[str, Any]) -> str | None:
    """The model a job names when the catalogue lacks it (it is scheduled under `proxy_model`'s profile)."""
    model = _annotation(obj, MODEL)
    return None if model in CATALOGUE else model


def job_spec(obj: dict[str, Any]) -> JobSpec:
    """The `JobSpec` a PyTorchJob or Volcano Job describes (see the module docstring); a model the catalogue lacks
    gets the profile of `proxy_model`."""
    resource = kind_of(obj)
    model = _annotation(obj, MODEL)
    declared_samples = _annotation(obj, SAMPLES_PER_EPOCH, "")
    spec = obj.get("spec") or {}
    try:
        if resource == PYTORCHJOB:
            worker = (spec.get("pytorchReplicaSpecs") or {})["Worker"]
            elastic = spec.get("elasticPolicy") or {}
            architecture = Architecture.ALLREDUCE
            worker_demand, ps_demand = pod_template_demand(worker.get("template")), Resources()
            max_workers, max_ps = int(elastic.get("maxReplicas") or worker.get("replicas") or 1), 0
            requested_workers = _count(obj, REQUESTED_WORKERS, str(worker.get("replicas") or 1))
            requested_ps = 0
        else:
            worker_task, ps_task = volcano_task(obj, WORKER), volcano_task(obj, PS)
            if worker_task is None or ps_task is None:
                raise ContractError(f"{_where(obj)}: a parameter-server job needs tasks named {PS!r} and {WORKER!r}")
            architecture = Architecture.PS
            worker_demand = pod_template_demand(worker_task[1].get("template"))
            ps_demand = pod_template_demand(ps_task[1].get("template"))
            max_workers, max_ps = _count(obj, MAX_WORKERS), _count(obj, MAX_PS)
            requested_workers = _count(obj, REQUESTED_WORKERS, str(worker_task[1].get("replicas") or 1))
            requested_ps = _count(obj, REQUESTED_PS, str(ps_task[1].get("replicas") or 1))
    except (KeyError, TypeError) as error:
        raise ContractError(f"{_where(obj)}: missing {error}") from None
    if model not in CATALOGUE:
        ps_mem = ps_demand.mem_gb if architecture is Architecture.PS else None
        samples_declared = _number(obj, SAMPLES_PER_EPOCH) if declared_samples else None
        model = proxy_model(worker_demand.gpu > 0, ps_mem, samples_declared)
    samples = declared_samples or repr(CATALOGUE[model].samples_per_epoch)
    return JobSpec(
        job_id=_annotation(obj, JOB_ID, obj["metadata"]["name"]),
        model=model,
        arrival_s=_arrival_s(obj),
        declared_epochs=_number(obj, DECLARED_EPOCHS),
        samples_per_epoch=float(Decimal(samples)),
        worker_demand=worker_demand,
        ps_demand=ps_demand,
        max_workers=max_workers,
        max_ps=max_ps,
        architecture=architecture,
        requested_workers=requested_workers,
        requested_ps=requested_ps,
    )


def replicas(obj: dict[str, Any]) -> tuple[int, int]:
    """(workers, PS) the job asks for now."""
    spec = obj.get("spec") or {}
    if kind_of(obj) == PYTORCHJOB:
        worker = (spec.get("pytorchReplicaSpecs") or {}).get("Worker") or {}
        return int(worker.get("replicas") or 0), 0
    worker_task, ps_task = volcano_task(obj, WORKER), volcano_task(obj, PS)
    workers = int(worker_task[1].get("replicas") or 0) if worker_task else 0
    ps = int(ps_task[1].get("replicas") or 0) if ps_task else 0
    return workers, ps


def pod_job_role(labels: Mapping[str, str]) -> tuple[str, str] | None:
    """(job name, `WORKER` or `PS`) of a training pod, from its operator's labels; None for a pod of neither
    operator, or of a role dl2 does not size."""
    if KUBEFLOW_JOB_NAME in labels:
        role = labels.get(KUBEFLOW_REPLICA_TYPE, "").lower()
        return (labels[KUBEFLOW_JOB_NAME], role) if role == WORKER else None
    if VOLCANO_JOB_NAME in labels:
        role = labels.get(VOLCANO_TASK_SPEC, "")
        return (labels[VOLCANO_JOB_NAME], role) if role in (WORKER, PS) else None
    return None


def progress_epochs(obj: dict[str, Any]) -> float:
    return _number(obj, PROGRESS_EPOCHS, "0")


def progress_query(obj: dict[str, Any]) -> str | None:
    """The PromQL query whose answer is the job's epochs done (`dl2.kube.progress_metrics`), if it names one."""
    text = ((obj.get("metadata") or {}).get("annotations") or {}).get(PROGRESS_QUERY)
    return text.strip() or None if isinstance(text, str) else None


def is_kueue_managed(obj: dict[str, Any]) -> bool:
    return KUEUE_QUEUE_LABEL in ((obj.get("metadata") or {}).get("labels") or {})


def size_owner(obj: dict[str, Any]) -> str | None:
    """Why another controller owns this job's size (the controller then leaves it alone), or None. Resizing a
    job that an HPA or a GitOps tool also sizes starts a fight over `replicas` that neither wins."""
    metadata = obj.get("metadata") or {}
    labels, annotations = metadata.get("labels") or {}, metadata.get("annotations") or {}
    if str(annotations.get(ALLOW_RESIZE, "")).lower() == "true":
        return None
    spec = obj.get("spec") or {}
    if obj.get("kind") == "PyTorchJob" and ((spec.get("elasticPolicy") or {}).get("metrics")):
        return "hpa: spec.elasticPolicy.metrics (the training operator sizes it with an HPA)"
    for entry in metadata.get("managedFields") or []:
        manager = str(entry.get("manager", ""))
        applied = entry.get("operation") == "Apply" and not manager.startswith(OWN_MANAGER_PREFIX)
        if applied and _owns_replicas(entry.get("fieldsV1") or {}, obj.get("kind") == "PyTorchJob"):
            return f"gitops: field manager {manager!r} applies its replicas (server-side apply)"
    for key, tool in GITOPS_MARKERS.items():
        if key in labels or key in annotations:
            return f"gitops: {tool} tracks it ({key})"
    return None


def autoscaled_jobs(autoscalers: Iterable[dict[str, Any]]) -> dict[tuple[str, str, str], str]:
    """(namespace, kind, name) of each PyTorchJob or Volcano Job a HorizontalPodAutoscaler scales -> the reason
    the controller leaves it alone (an HPA writes the job's `replicas` through its `scale` subresource)."""
    kinds = {("kubeflow.org", "PyTorchJob"), ("batch.volcano.sh", "Job")}
    scaled: dict[tuple[str, str, str], str] = {}
    for autoscaler in autoscalers:
        metadata, target = autoscaler.get("metadata") or {}, (autoscaler.get("spec") or {}).get("scaleTargetRef") or {}
        group = str(target.get("apiVersion", "")).split("/")[0]
        if (group, target.get("kind")) in kinds and target.get("name"):
            namespace = str(metadata.get("namespace", ""))
            where = f"{namespace}/{metadata.get('name')}"
            scaled[(namespace, str(target["kind"]), str(target["name"]))] = f"hpa: HorizontalPodAutoscaler {where}"
    return scaled


def _owns_replicas(fields: dict[str, Any], pytorchjob: bool) -> bool:
    """Whether a managedFields entry (`fieldsV1`) covers the field dl2 resizes: a PyTorchJob's Worker replicas,
    or a Volcano Job's task list (an atomic list: whoever applies it owns every task's replicas)."""
    spec = fields.get("f:spec") or {}
    if pytorchjob:
        worker = ((spec.get("f:pytorchReplicaSpecs") or {}).get("f:Worker")) or {}
        return "f:replicas" in worker
    return "f:tasks" in spec


def is_finished(obj: dict[str, Any]) -> bool:
    status = obj.get("status") or {}
    if kind_of(obj) == PYTORCHJOB:
        return any(c.get("type") == "Succeeded" and c.get("status") == "True" for c in status.get("conditions") or [])
    return (status.get("state") or {}).get("phase") == "Completed"


def resize(obj: dict[str, Any], workers: int, ps: int) -> tuple[str | None, str, Any]:
    """How to resize a job: (subresource, patch content type, patch body) for a PATCH of the job: the field its
    `scale` subresource reads, merge-patched on the job itself (so that one request can carry the controller's
    stamp too), or a Volcano Job's task counts by JSON patch."""
    if kind_of(obj) == PYTORCHJOB:
        return (
            None,
            "application/merge-patch+json",
            {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": workers}}}},
        )
    operations: list[dict[str, Any]] = []
    for role, count in ((PS, ps), (WORKER, workers)):
        found = volcano_task(obj, role)
        if found is None:
            raise ContractError(f"{_where(obj)}: no task named {role!r}")
        index = found[0]
        operations += [
            {"op": "test", "path": f"/spec/tasks/{index}/name", "value": role},
            {"op": "replace", "path": f"/spec/tasks/{index}/replicas", "value": count},
        ]
    return None, "application/json-patch+json", operations


def node_resources(node: dict[str, Any]) -> Resources:
    """What a node offers to pods (`status.allocatable`)."""
    return resources_from((node.get("status") or {}).get("allocatable"))
