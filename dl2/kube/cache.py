"""What the controller and the extender know of the cluster: informers of the five resources a slot needs.

Managed namespaces (label `dl2.io/managed=true`), PyTorchJobs, Volcano Jobs, their pods (by the labels their
operators set: `training.kubeflow.org/job-name`, `volcano.sh/job-name`; one informer each, since a selector
cannot name either of two labels) and the nodes, each kept by its own informer (`dl2.kube.informer`): a slot
reads them from memory rather than listing them, so what a slot costs the API server no longer grows with the
cluster. `read` gives the raw objects `dl2.kube.observe.snapshot` turns into the policies' view; with a barrier
(per resource, the version each cache must reflect: the simulated clock's), it first waits until each cache is
that fresh.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dl2.kube import contract as c
from dl2.kube.informer import Informer
from dl2.kube.metrics import Metrics
from dl2.kube.observe import RawCluster
from dl2.kube.rest import AUTOSCALERS, KUBEFLOW_PODS, NAMESPACES, NODES, PYTORCHJOBS, VOLCANO_JOBS, VOLCANO_PODS, Rest


class CacheStale(RuntimeError):
    """A cache did not reach the version a slot needs in time."""


def holds_resources(pod: dict[str, Any]) -> bool:
    """A pod of a job that occupies its node: bound, not finished, not being deleted."""
    phase = (pod.get("status") or {}).get("phase")
    return (
        bool((pod.get("spec") or {}).get("nodeName"))
        and phase not in ("Succeeded", "Failed")
        and not ((pod.get("metadata") or {}).get("deletionTimestamp"))
    )


class ClusterCache:
    def __init__(self, rest: Rest, metrics: Metrics, seed: int = 0, autoscalers: bool = False) -> None:
        """`autoscalers`: also watch HorizontalPodAutoscalers (the controller leaves a job one scales alone; the
        extender, which only places pods, needs neither them nor the grant)."""
        self.namespaces = Informer(rest, NAMESPACES, metrics, label_selector=f"{c.MANAGED_LABEL}=true", seed=seed)
        self.pytorchjobs = Informer(rest, PYTORCHJOBS, metrics, seed=seed + 1)
        self.volcano_jobs = Informer(rest, VOLCANO_JOBS, metrics, seed=seed + 2)
        self.kubeflow_pods = Informer(rest, KUBEFLOW_PODS, metrics, label_selector=c.KUBEFLOW_JOB_NAME, seed=seed + 3)
        self.volcano_pods = Informer(rest, VOLCANO_PODS, metrics, label_selector=c.VOLCANO_JOB_NAME, seed=seed + 4)
        self.nodes = Informer(rest, NODES, metrics, seed=seed + 5)
        self.autoscalers = Informer(rest, AUTOSCALERS, metrics, seed=seed + 6) if autoscalers else None
        self.informers = (
            self.namespaces, self.pytorchjobs, self.volcano_jobs, self.kubeflow_pods, self.volcano_pods, self.nodes,
            *((self.autoscalers,) if self.autoscalers is not None else ()),
        )  # fmt: skip
        self._started = False

    def start(self, timeout_s: float = 30.0) -> ClusterCache:
        """Start every informer and wait for their first lists (idempotent)."""
        if not self._started:
            self._started = True
            for informer in self.informers:
                informer.start()
        for informer in self.informers:
            if not informer.wait_synced(timeout_s):
                raise CacheStale(f"the {informer.resource.key} cache did not sync within {timeout_s:g} s")
        return self

    def stop(self) -> None:
        for informer in self.informers:
            informer.stop()

    @property
    def synced(self) -> bool:
        return all(informer.synced for informer in self.informers)

    def wait_for(self, barrier: Mapping[str, int], timeout_s: float) -> None:
        """Wait until each cache reflects the version `barrier` names for its resource (`CacheStale` if not)."""
        for informer in self.informers:
            wanted = barrier.get(informer.resource.key, 0)
            if wanted and not informer.wait_for(wanted, timeout_s):
                raise CacheStale(
                    f"the {informer.resource.key} cache is at version {informer.version}, the slot needs {wanted}"
                )

    def read(self, barrier: Mapping[str, int] | None = None, timeout_s: float = 10.0) -> RawCluster:
        """The cluster as the caches hold it (after `wait_for(barrier)`): managed namespaces, their jobs, the pods
        of those jobs that hold a node, every node."""
        self.start()
        if barrier:
            self.wait_for(barrier, timeout_s)
        managed = {ns["metadata"]["name"] for ns in self.namespaces.items()}
        jobs = [
            job
            for informer in (self.pytorchjobs, self.volcano_jobs)
            for job in informer.items()
            if job["metadata"].get("namespace") in managed
        ]
        pods = [
            pod
            for informer in (self.kubeflow_pods, self.volcano_pods)
            for pod in informer.items()
            if pod["metadata"].get("namespace") in managed and holds_resources(pod)
        ]
        autoscalers = tuple(self.autoscalers.items()) if self.autoscalers is not None else ()
        return RawCluster(tuple(sorted(managed)), tuple(jobs), tuple(pods), tuple(self.nodes.items()), autoscalers)
