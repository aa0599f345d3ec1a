"""The simulated cluster's kube-scheduler with a scheduler extender (`extenders[]` of a KubeSchedulerConfiguration).

For every task of a managed job it places, the scheduler first finds the nodes the pod fits on (its own filter),
then asks the extender, as kube-scheduler does: `filter` with those nodes, `prioritize` with the nodes that passed;
the pod goes to the node the extender scores highest (the extender's weight dominates the scheduler's own scores,
which only break ties: the scheduler's placer picks among the best). An extender that gives no usable answer in
time (`ExtenderUnavailable`: refused, slow, an HTTP error, a body of the wrong shape) is skipped for that pod, as
kube-scheduler does with an `ignorable` extender: the pod is placed as without it, and scheduling never waits
longer than the client's timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dl2.core import JobSpec
from dl2.kube.apiserver import contract as c
from dl2.kube.extender import ExtenderArgs
from dl2.kube.extender_http import ExtenderClient, ExtenderUnavailable
from dl2.schedulers.placement import Demand, NodeState, Placer

PodOf = Callable[[JobSpec, bool], dict[str, Any]]
"""The Pending pod of a job's next worker (False) or PS (True), as the API would hand it to the scheduler."""


@dataclass(frozen=True, slots=True)
class ExtenderDecision:
    """One pod the extender was asked about: its scores, and where the scheduler put it."""

    namespace: str
    job: str
    role: str
    scores: dict[str, int]
    """Host -> score, of the nodes that passed the extender's filter."""
    node: str
    """Where the scheduler put the pod."""
    default: str
    """Where it would have put the pod without the extender."""


class ExtenderPlacer:
    """A placer that consults a scheduler extender for each task, falling back to `base` when it cannot."""

    needs_tenancy = True

    def __init__(self, base: Placer, client: ExtenderClient, node_names: Sequence[str]) -> None:
        self.base = base
        self.client = client
        self.node_names = list(node_names)
        self.name = f"{getattr(base, 'name', 'placer')}+extender"
        self.pod_of: PodOf | None = None
        """Set by the simulated cluster (it knows the jobs' objects)."""
        self.decisions: list[ExtenderDecision] = []
        self.unavailable = 0
        """Pods placed without the extender because it gave no usable answer."""

    def choose(self, state: NodeState, demand: Demand, job_nodes: Sequence[int]) -> int:
        tenancy = state.tenancy
        fallback = self.base.choose(state, demand, job_nodes)
        if tenancy is None or self.pod_of is None or fallback < 0:
            return fallback  # nothing fits (the pod stays Pending) or nothing to ask about
        spec = tenancy.jobs[tenancy.placing].spec
        pod = self.pod_of(spec, tenancy.placing_ps)
        fitting = [int(node) for node in state.fitting_nodes(demand)]
        index = {self.node_names[node]: node for node in fitting}
        try:
            passed = [name for name in self.client.filter(ExtenderArgs(pod, tuple(index), None)) if name in index]
            if not passed:
                return -1  # the extender filtered every node out: the pod stays Pending
            scores = self.client.prioritize(ExtenderArgs(pod, tuple(passed), None))
        except ExtenderUnavailable:
            self.unavailable += 1
            return fallback
        ranked = {name: scores.get(name, 0) for name in passed}
        top = max(ranked.values())
        best = [index[name] for name, score in ranked.items() if score == top]
        node = fallback if fallback in best else min(best)
        metadata = pod["metadata"]
        labels = metadata.get("labels") or {}
        self.decisions.append(
            ExtenderDecision(
                metadata.get("namespace", ""),
                labels.get(c.JOB_LABEL, ""),
                labels.get(c.ROLE_LABEL, ""),
                ranked,
                self.node_names[node],
                self.node_names[fallback],
            )
        )
        return node
