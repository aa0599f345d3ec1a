"""Observation: the cluster at a slot boundary, turned into the `ClusterView` policies decide on.

The raw objects come from the controller's caches (`dl2.kube.cache`). `snapshot` is pure: raw objects in, the
view and what the controller needs to act on each job out, following the job contract (`dl2.kube.contract`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dl2.core import Allocation, ClusterSpec, ClusterView, JobAllocation, JobSpec, JobView, NodeSpec, Resources
from dl2.kube import contract as c
from dl2.kube.accelerator_labels import node_accelerator
from dl2.kube.progress_metrics import ProgressQuery
from dl2.kube.quarantine import Cause, Quarantined, Room, job_problem, reserved

RESIZED_SLOT = "dl2.io/resized-slot"
"""Annotation the controller puts on a job it resizes: the slot of that resize (its cooldown is counted from it)."""
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
DISBELIEVED = (Cause.PROGRESS, Cause.PROGRESS_BACKWARDS)
"""Causes of quarantine under which a job's progress is not taken for what it did (its last record observes 0)."""


@dataclass(frozen=True, slots=True)
class RawCluster:
    """What one read of the API returned (plain JSON objects)."""

    namespaces: tuple[str, ...]
    """Names of the namespaces labelled `dl2.io/managed: "true"`."""
    jobs: tuple[dict[str, Any], ...]
    pods: tuple[dict[str, Any], ...]
    """Pods of PyTorchJobs and Volcano Jobs (by their operators' labels) that hold a node (bound, not finished)."""
    nodes: tuple[dict[str, Any], ...]
    autoscalers: tuple[dict[str, Any], ...] = ()
    """HorizontalPodAutoscalers (a job one of them scales is left alone)."""


@dataclass(frozen=True, slots=True)
class ManagedJob:
    """One job of the view, as the controller acts on it."""

    job_id: str
    namespace: str
    name: str
    obj: dict[str, Any]
    """The object as read (never mutated: the actuator builds patches from it)."""
    replicas: tuple[int, int]
    """(workers, PS) its spec asks for now: what a resize compares with."""
    kueue: bool
    """Managed by Kueue: left alone (a resize makes Kueue requeue it)."""
    resized_slot: int | None
    size_owner: str | None = None
    """Why another controller owns its size (an HPA, a GitOps tool: `contract.size_owner`): left alone."""
    unknown_model: str | None = None
    """The model it names when the catalogue lacks it (scheduled under its spec's model's profile)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def labels(self) -> Mapping[str, str]:
        return dict((self.obj.get("metadata") or {}).get("labels") or {})


@dataclass(frozen=True, slots=True)
class Snapshot:
    view: ClusterView
    """Active (arrived, unfinished) jobs in workload order: arrival time, then name; quarantined jobs are not in
    it, and what their pods hold is taken off its nodes (`quarantine.reserved`)."""
    jobs: tuple[ManagedJob, ...]
    """Aligned with `view.jobs`."""
    cluster: ClusterSpec
    """The cluster as its nodes are (what the decision log describes)."""
    progress: Mapping[str, float] = field(default_factory=dict)
    """Epochs done of every job read, finished ones included (a slot's observed progress is its difference), except
    jobs quarantined for their progress (`DISBELIEVED`)."""
    quarantined: tuple[Quarantined, ...] = ()
    """Unfinished jobs left alone because their inputs break the contract or are out of range, in key order."""

    @property
    def num_kueue(self) -> int:
        return sum(job.kueue for job in self.jobs)


def cluster_spec(nodes: Sequence[dict[str, Any]], name: str) -> tuple[ClusterSpec, dict[str, int]]:
    """Nodes in name order as dl2's cluster (node i = the i-th name), and name -> index. A node's accelerator type is
    its GPU product label's (`accelerator_labels.node_accelerator`; without one, the reference accelerator)."""
    ordered = sorted(nodes, key=lambda node: node["metadata"]["name"])
    specs = []
    for i, node in enumerate(ordered):
        labels = node["metadata"].get("labels") or {}
        accelerator, _ = node_accelerator(labels)
        specs.append(NodeSpec(i, c.node_resources(node), labels.get(INSTANCE_TYPE) or "default", accelerator))
    return ClusterSpec(tuple(specs), name), {node["metadata"]["name"]: i for i, node in enumerate(ordered)}


def _held(pods: Sequence[dict[str, Any]], node_index: Mapping[str, int]) -> dict[tuple[str, str], JobAllocation]:
    """(namespace, job name) -> the nodes its running pods are on, workers and PS in pod-index order."""
    placed: dict[tuple[str, str], dict[str, list[tuple[int, int]]]] = {}
    for pod in pods:
        metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        labels = metadata.get("labels") or {}
        node = node_index.get(spec.get("nodeName") or "")
        owner = c.pod_job_role(labels)
        if node is None or owner is None:
            continue
        job_name, role = owner
        index = _pod_index(metadata.get("name", ""), labels)
        key = (metadata.get("namespace", ""), job_name)
        roles = placed.get(key)
        if roles is None:  # not `setdefault`, which would build the lists for each of thousands of pods
            roles = placed[key] = {c.WORKER: [], c.PS: []}
        roles[role].append((index, node))
    return {
        key: JobAllocation(tuple(n for _, n in sorted(r[c.WORKER])), tuple(n for _, n in sorted(r[c.PS])))
        for key, r in placed.items()
    }


def _pod_index(name: str, labels: Mapping[str, str]) -> int:
    text = labels.get(c.KUBEFLOW_REPLICA_INDEX) or name.rsplit("-", 1)[-1]
    return int(text) if text.isdigit() else 0


def _resized_slot(obj: dict[str, Any]) -> int | None:
    text = ((obj.get("metadata") or {}).get("annotations") or {}).get(RESIZED_SLOT)
    return int(text) if text is not None and str(text).isdigit() else None


class SpecCache:
    """What observing parses, kept between slots. Each job's `JobSpec` as last parsed, by uid: a spec changes with
    the job's spec or its contract annotations, not with its progress or resize stamp, which change every slot
    (parsing thousands of quantities each slot is most of what observing a large cluster costs). And the cluster
    as last parsed from its nodes, while they are the same objects.

    The objects come from the informers, which never change one in place (a change is a new object): the object
    last parsed, seen again, needs no check at all."""

    VOLATILE = (c.PROGRESS_EPOCHS, RESIZED_SLOT)

    def __init__(self) -> None:
        self._specs: dict[str, tuple[dict[str, Any], tuple[Any, ...], JobSpec]] = {}
        """uid -> (the object last seen, what its spec depends on, its spec)."""
        self._cluster: tuple[tuple[dict[str, Any], ...], str, ClusterSpec, dict[str, int]] | None = None

    def spec(self, obj: dict[str, Any]) -> JobSpec:
        metadata = obj.get("metadata") or {}
        uid = metadata.get("uid")
        if not uid:
            return c.job_spec(obj)
        cached = self._specs.get(uid)
        if cached is not None and cached[0] is obj:  # a finished job's object stays the same, slot after slot
            return cached[2]
        annotations = metadata.get("annotations") or {}
        key = (
            metadata.get("generation"),
            metadata.get("name"),
            metadata.get("creationTimestamp"),
            {k: v for k, v in annotations.items() if k not in self.VOLATILE},
        )
        spec = cached[2] if cached is not None and cached[1] == key else c.job_spec(obj)
        self._specs[uid] = (obj, key, spec)
        return spec

    def cluster(self, nodes: Sequence[dict[str, Any]], name: str) -> tuple[ClusterSpec, dict[str, int]]:
        """`cluster_spec(nodes, name)`, the same result while the nodes are the same objects (nodes change
        rarely; then the decision log's `describe_cluster` knows the cluster at once too). The result is shared:
        read it, never change it."""
        last = self._cluster
        if (
            last is not None
            and last[1] == name
            and len(last[0]) == len(nodes)
            and all(old is new for old, new in zip(last[0], nodes, strict=True))
        ):
            return last[2], last[3]
        cluster, index = cluster_spec(nodes, name)
        self._cluster = (tuple(nodes), name, cluster, index)
        return cluster, index

    def keep(self, uids: set[str]) -> None:
        """Forget the jobs that are gone."""
        for uid in set(self._specs) - uids:
            del self._specs[uid]


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace")), str(metadata.get("name"))


def progress_queries(raw: RawCluster, active: set[tuple[str, str]]) -> list[ProgressQuery]:
    """The progress queries of the jobs that name one and are unfinished or were `active` last slot (a job that
    finished since has its last slot's progress still to be recorded)."""
    queries = []
    for obj in raw.jobs:
        text = c.progress_query(obj)
        if text is not None and (_key(obj) in active or not c.is_finished(obj)):
            queries.append(ProgressQuery(*_key(obj), text))
    return queries


def _throughput(
    spec: JobSpec, epochs: float, last_slot: Mapping[str, float] | None, slot: int, slot_s: float, resized: int | None
) -> float:
    """Samples/s over the slot just before: the epochs it gained since its record of that slot. 0 where it was not
    decided then, gained nothing, or was resized at its start: the simulator's views give a job's speed while it
    ran, and the progress of a slot that began with a resize holds the resize's pause too, which the controller
    cannot tell apart (so `dl2.sim.rescale_fit` learns nothing here, and no fit takes a pause for slowness)."""
    before = (last_slot or {}).get(spec.job_id)
    if before is None or epochs <= before or slot_s <= 0 or (resized is not None and resized >= slot - 1):
        return 0.0
    return (epochs - before) * spec.samples_per_epoch / slot_s


def snapshot(
    raw: RawCluster,
    time_s: float,
    slot: int,
    slot_s: float,
    cluster_name: str,
    specs: SpecCache | None = None,
    measured: Mapping[tuple[str, str], float] | None = None,
    recorded: Mapping[str, float] | None = None,
    last_slot: Mapping[str, float] | None = None,
) -> Snapshot:
    """The view of a slot from one read: active jobs in workload order with the tasks they hold (`specs` keeps
    the parsed job specs between slots; `measured`: (namespace, name) -> epochs from the jobs' own metrics, which
    count where they are ahead of the reported annotation; `recorded`: job id -> its progress in its last decision
    record; `last_slot`: job id -> its progress in its record of the slot just before, from which each job's
    observed throughput over that slot follows, as the simulator's views carry it: what a fit per job or per server
    learns from, `dl2.rl.fitted_lookahead`). A job whose inputs break the contract or are out of range is
    quarantined (`dl2.kube.quarantine`)."""
    if specs is not None:
        cluster, node_index = specs.cluster(raw.nodes, cluster_name)
    else:
        cluster, node_index = cluster_spec(raw.nodes, cluster_name)
    held = _held(raw.pods, node_index)
    autoscaled = c.autoscaled_jobs(raw.autoscalers)
    active: list[tuple[float, str, JobView, ManagedJob]] = []
    progress: dict[str, float] = {}
    quarantined: list[Quarantined] = []
    seen: set[str] = set()
    room = Room.of(cluster)
    for obj in raw.jobs:
        metadata = obj.get("metadata") or {}
        namespace, name = str(metadata.get("namespace")), str(metadata.get("name"))
        try:
            spec: JobSpec = specs.spec(obj) if specs is not None else c.job_spec(obj)
            done = c.is_finished(obj)
            epochs = c.progress_epochs(obj)
            if measured:  # only jobs that name a progress query, where a Prometheus is configured
                epochs = max(epochs, measured.get(_key(obj), 0.0))
            replicas = c.replicas(obj)
        except (c.ContractError, ValueError, TypeError) as error:
            quarantined.append(Quarantined(namespace, name, Cause.CONTRACT, str(error), obj))
            continue
        if spec.job_id in seen:
            message = f"job id {spec.job_id!r} is used by another job"
            quarantined.append(Quarantined(namespace, name, Cause.DUPLICATE_ID, message, obj))
            continue
        seen.add(spec.job_id)
        if done:
            progress[spec.job_id] = epochs
            continue
        problem = job_problem(spec, epochs, replicas, room, (recorded or {}).get(spec.job_id))
        if problem is not None:
            quarantined.append(Quarantined(namespace, name, *problem, obj))
            if problem[0] not in DISBELIEVED:  # its last record's outcome: what it really did
                progress[spec.job_id] = epochs
            continue
        progress[spec.job_id] = epochs
        allocation = held.get((namespace, name), JobAllocation())
        throughput = _throughput(spec, epochs, last_slot, slot, slot_s, _resized_slot(obj))
        job_view = JobView(spec, epochs, 0.0, allocation, throughput, 0.0, 0)
        owner = c.size_owner(obj) or autoscaled.get((namespace, str(obj.get("kind")), name))
        managed = ManagedJob(
            spec.job_id, namespace, name, obj, replicas, c.is_kueue_managed(obj), _resized_slot(obj), owner,
            c.unknown_model(obj),
        )  # fmt: skip
        active.append((spec.arrival_s, name, job_view, managed))
    if specs is not None:
        specs.keep({str((obj.get("metadata") or {}).get("uid")) for obj in raw.jobs})
    active.sort(key=lambda entry: (entry[0], entry[1]))
    views = tuple(entry[2] for entry in active)
    previous = Allocation({v.spec.job_id: v.allocation for v in views})
    left_alone = {(q.namespace, q.name) for q in quarantined}
    decided_on = reserved(cluster, _requests_on_nodes(raw.pods, node_index, left_alone))
    view = ClusterView(time_s, slot, slot_s, decided_on, views, previous)
    quarantined.sort(key=lambda q: q.key)
    return Snapshot(view, tuple(entry[3] for entry in active), cluster, progress, tuple(quarantined))


def _requests_on_nodes(
    pods: Sequence[dict[str, Any]], node_index: Mapping[str, int], jobs: set[tuple[str, str]]
) -> dict[int, Resources]:
    """Node index -> what the training pods of `jobs` ((namespace, job name)) request on it."""
    if not jobs:
        return {}
    taken: dict[int, Resources] = {}
    for pod in pods:
        metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        owner = c.pod_job_role(metadata.get("labels") or {})
        node = node_index.get(spec.get("nodeName") or "")
        if node is None or owner is None or (metadata.get("namespace", ""), owner[0]) not in jobs:
            continue
        try:
            demand = c.pod_template_demand(pod)
        except c.ContractError:
            continue  # a request the API server would not have stored
        taken[node] = taken.get(node, Resources()) + demand
    return taken
