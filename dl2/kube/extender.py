"""Harmony's placer as a kube-scheduler extender: `filter` and `prioritize` for pods of managed jobs.

A second kube-scheduler profile (`k8s/scheduler-extender.yaml`) sends every pod it schedules here, as the
extender protocol's `ExtenderArgs` (`{"Pod": {...}, "NodeNames": [...]}` with `nodeCacheCapable: true`, or
`"Nodes": {"items": [...]}` without). `prioritize` answers a `HostPriorityList` (`[{"Host": name, "Score": 0-10}]`):
the placer's policy network scores every candidate server for the pod's job and role, given the tasks each server
already runs (Harmony §4: which jobs share a server decides the interference), and the best server gets 10.
`filter` answers an `ExtenderFilterResult` that keeps every node the pod fits on as far as dl2 sees (dl2 counts only
the pods of managed jobs, so it never refuses a node kube-scheduler would accept).

A pod that is not a managed job's (no operator's job label, an unknown job, an unmanaged namespace) gets the same
score everywhere and passes the filter: the extender has no say about it. The cluster's state comes from a
`SnapshotCache` refreshed off the request path (a request never waits for the API server), so a request costs one
network evaluation; kube-scheduler's `httpTimeout` and `ignorable: true` keep a slow or broken extender from
blocking scheduling.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dl2.core import ClusterSpec, InputError, JobSpec
from dl2.kube import contract as c
from dl2.kube.observe import RawCluster, Snapshot, snapshot
from dl2.placement.policy import HarmonyPlacer, candidates, job_inputs
from dl2.schedulers.accelerator_types import NO_TYPE, AcceleratorTypes
from dl2.schedulers.placement import Demand, NodeState
from dl2.schedulers.tenancy import Tenancy

MAX_EXTENDER_PRIORITY = 10
"""The highest score an extender may give (kube-scheduler's `MaxExtenderPriority`)."""
FILTER_VERB = "filter"
PRIORITIZE_VERB = "prioritize"


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    """What kube-scheduler sends: the pod and its candidate nodes (by name)."""

    pod: Mapping[str, Any]
    node_names: tuple[str, ...]
    nodes: tuple[Mapping[str, Any], ...] | None
    """The full Node objects, when the extender is not `nodeCacheCapable`."""

    @classmethod
    def from_json(cls, data: Any) -> ExtenderArgs:
        """Parse an `ExtenderArgs` object (Go field names: `Pod`, `Nodes`, `NodeNames`); InputError naming the field."""
        if not isinstance(data, dict):
            raise InputError("ExtenderArgs", f"expected a JSON object, got {type(data).__name__}")
        pod = data.get("Pod")
        if not isinstance(pod, dict) or not isinstance(pod.get("metadata"), dict):
            raise InputError("ExtenderArgs", "expected a Pod object with metadata", field="Pod")
        names = data.get("NodeNames")
        node_list = data.get("Nodes")
        if names is not None:
            if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
                raise InputError("ExtenderArgs", "expected a list of node names", field="NodeNames")
            return cls(pod, tuple(names), None)
        if isinstance(node_list, dict) and isinstance(node_list.get("items"), list):
            items = node_list["items"]
            if not all(isinstance(node, dict) and isinstance(node.get("metadata"), dict) for node in items):
                raise InputError("ExtenderArgs", "expected Node objects with metadata", field="Nodes.items")
            return cls(pod, tuple(str(node["metadata"].get("name", "")) for node in items), tuple(items))
        raise InputError("ExtenderArgs", "needs NodeNames or Nodes.items", field="NodeNames")

    def to_json(self) -> dict[str, Any]:
        if self.nodes is not None:
            return {"Pod": dict(self.pod), "Nodes": {"items": [dict(node) for node in self.nodes]}}
        return {"Pod": dict(self.pod), "NodeNames": list(self.node_names)}


def filter_result(
    args: ExtenderArgs, passed: Sequence[str], failed: Mapping[str, str], error: str = ""
) -> dict[str, Any]:
    """An `ExtenderFilterResult` in the shape the request used (names, or Node objects)."""
    result: dict[str, Any] = {"FailedNodes": dict(failed), "FailedAndUnresolvableNodes": {}, "Error": error}
    if args.nodes is not None:
        kept = set(passed)
        result["Nodes"] = {"items": [dict(node) for node in args.nodes if node["metadata"].get("name") in kept]}
        result["NodeNames"] = None
    else:
        result["Nodes"] = None
        result["NodeNames"] = list(passed)
    return result


def host_priorities(scores: Mapping[str, int]) -> list[dict[str, Any]]:
    """A `HostPriorityList`."""
    return [{"Host": host, "Score": int(score)} for host, score in scores.items()]


class SnapshotCache:
    """The latest `Snapshot` of the managed cluster, refreshed by `refresh()` from the informers' caches
    (`dl2.kube.cache`; a thread calls it every few seconds in `dl2 extender`, tests call it when they need to).
    Requests read it and never wait for the API."""

    def __init__(self, read: Callable[[], RawCluster], cluster_name: str = "kubernetes") -> None:
        self._read = read
        self._cluster_name = cluster_name
        self._lock = threading.Lock()
        self._state: tuple[Snapshot, dict[str, int]] | None = None

    def refresh(self) -> None:
        raw = self._read()
        view = snapshot(raw, 0.0, 0, 1.0, self._cluster_name)
        names = sorted(node["metadata"]["name"] for node in raw.nodes)
        with self._lock:
            self._state = (view, {name: i for i, name in enumerate(names)})

    def current(self) -> tuple[Snapshot, dict[str, int]] | None:
        with self._lock:
            return self._state


_Placing = tuple[NodeState, Tenancy, Demand, dict[str, int], dict[str, int] | None]
"""A pod's placement round: the nodes' free resources, who holds what, the pod's demand, node name -> index, and
node name -> the rank of its accelerator type for the pod (`worker_type_ranks`; None where types do not matter)."""


def worker_type_ranks(cluster: ClusterSpec, spec: JobSpec, held_workers: Sequence[int]) -> list[int] | None:
    """Per node, the rank of its accelerator type for a new worker of `spec` (0 first), as dl2's placers choose
    types (`dl2.schedulers.placement`): a synchronous job runs at its slowest worker's pace, so first the type(s)
    its other workers run on, then the others in the catalogue's order for its model (fastest for it first,
    `AcceleratorTypes.order`); a node without GPUs ranks last. None on a cluster whose GPU nodes are all of one
    type, or for a worker that needs no GPU: there, types change nothing and the ranking is the placer's alone."""
    types = AcceleratorTypes.of(cluster)
    if not types.is_mixed or spec.worker_demand.gpu <= 0:
        return None
    order = types.order(spec.model)
    held = {types.type_of_node[node] for node in held_workers} - {NO_TYPE}
    ranked = [kind for kind in order if kind in held] + [kind for kind in order if kind not in held]
    rank = {kind: position for position, kind in enumerate(ranked)}
    return [rank.get(kind, len(ranked)) for kind in types.type_of_node]


class HarmonyExtender:
    """Scores and filters nodes for pods of managed jobs with Harmony's placer (greedy policy network)."""

    def __init__(self, placer: HarmonyPlacer, cache: SnapshotCache) -> None:
        self.placer = placer
        self.cache = cache

    def prioritize(self, args: ExtenderArgs) -> list[dict[str, Any]]:
        scores = dict.fromkeys(args.node_names, 0)
        placing = self._placing(args)
        logits = self._logits(args, placing) if placing is not None else {}
        ranks = placing[4] if placing is not None else None
        if ranks is None or not logits:
            if logits:
                best = max(logits.values())
                for name, logit in logits.items():
                    scores[name] = round(MAX_EXTENDER_PRIORITY * math.exp(max(logit - best, -50.0)))
            return host_priorities(scores)
        # several accelerator types: the nodes of the best type the worker fits on rank first (1 to 10, by the
        # placer within the type), every other node 0 (`worker_type_ranks`)
        first = min(ranks[name] for name in logits)
        tier = {name: logit for name, logit in logits.items() if ranks[name] == first}
        best = max(tier.values())
        for name, logit in tier.items():
            scores[name] = max(1, round(MAX_EXTENDER_PRIORITY * math.exp(max(logit - best, -50.0))))
        return host_priorities(scores)

    def filter(self, args: ExtenderArgs) -> dict[str, Any]:
        placing = self._placing(args)
        if placing is None:
            return filter_result(args, args.node_names, {})
        state, _, demand, index, _ = placing
        passed, failed = [], {}
        for name in args.node_names:
            node = index.get(name)
            if node is None or state.fits(node, demand):
                passed.append(name)  # a node dl2 does not know is kube-scheduler's business
            else:
                failed[name] = "dl2: the pod's job does not fit the node's free resources"
        return filter_result(args, passed, failed)

    def _logits(self, args: ExtenderArgs, placing: _Placing) -> dict[str, float]:
        """The policy's logit of every candidate node the pod fits on (empty for a pod dl2 does not manage)."""
        state, tenancy, demand, index, _ = placing
        rank, is_ps = tenancy.placing, tenancy.placing_ps
        nodes, rows = candidates(state, tenancy, rank, demand, may_skip=False)
        if len(rows) == 0:
            return {}
        logits = self.placer.policy.logits(rows, job_inputs(tenancy, rank, is_ps))
        wanted = {index[name]: name for name in args.node_names if name in index}
        return {wanted[int(node)]: float(logit) for node, logit in zip(nodes, logits, strict=True) if node in wanted}

    def _placing(self, args: ExtenderArgs) -> _Placing | None:
        """The placement round of the pod's job as the placer sees it: every running task registered, the job and
        role being placed named; None for a pod of no managed job (or before the first refresh)."""
        state = self.cache.current()
        if state is None:
            return None
        snap, index = state
        metadata = args.pod.get("metadata") or {}
        labels = metadata.get("labels") or {}
        owner = c.pod_job_role(labels)
        if owner is None:
            return None
        job_name, role = owner
        ranks = {(job.namespace, job.name): rank for rank, job in enumerate(snap.jobs)}
        rank = ranks.get((str(metadata.get("namespace", "")), str(job_name)))
        if rank is None:
            return None
        view = snap.view
        targets = [job.replicas for job in snap.jobs]
        tenancy = Tenancy(view.jobs, targets, view.cluster.num_nodes)
        used: dict[Demand, list[int]] = {}
        for r, job_view in enumerate(view.jobs):
            spec, held = job_view.spec, job_view.allocation
            tenancy.register(r, held.worker_nodes, held.ps_nodes)
            used.setdefault(spec.worker_demand.as_tuple(), []).extend(held.worker_nodes)
            used.setdefault(spec.ps_demand.as_tuple(), []).extend(held.ps_nodes)
        tenancy.placing, tenancy.placing_ps = rank, role == c.PS
        spec = view.jobs[rank].spec
        demand = (spec.ps_demand if role == c.PS else spec.worker_demand).as_tuple()
        types = None
        if role != c.PS:
            by_node = worker_type_ranks(view.cluster, spec, view.jobs[rank].allocation.worker_nodes)
            types = None if by_node is None else {name: by_node[node] for name, node in index.items()}
        return NodeState(view.cluster, used, tenancy), tenancy, demand, index, types


def best_hosts(priorities: Sequence[Mapping[str, Any]]) -> set[str]:
    """The hosts with the highest score of a `HostPriorityList`."""
    if not priorities:
        return set()
    top = max(int(entry["Score"]) for entry in priorities)
    return {str(entry["Host"]) for entry in priorities if int(entry["Score"]) == top}


__all__ = [
    "ExtenderArgs",
    "HarmonyExtender",
    "SnapshotCache",
    "best_hosts",
    "filter_result",
    "host_priorities",
    "worker_type_ranks",
]
