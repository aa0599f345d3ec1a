"""A Kubernetes API server on one machine, for the controller's tests and demos: `dl2 cluster`.

No real API server can run on the development machines, so this one speaks the Kubernetes API on 127.0.0.1
over real HTTP, built on kmock (`KubernetesScaffold` + `Server`), and the official `kubernetes` client and
`kubectl` talk to it as to a cluster. What a controller relies on is there:

- discovery (`/api`, `/apis`, `/apis/{group}/{version}`, `/version`) from the installed CRDs (the real Kubeflow
  PyTorchJob and Volcano Job CRDs in `k8s/third-party/`, and any other CRD file or CRD object created through the
  API) and the core kinds: namespaces, nodes, pods (+ `binding`), events, configmaps, `coordination.k8s.io`
  leases, customresourcedefinitions;
- get, list (label and field selectors, `limit`/`continue`), watch from a resource version (410 Expired past the
  retained history, BOOKMARK events), create (201, `generateName`, uid, `creationTimestamp`, `generation`),
  update, patch (merge, JSON, strategic merge for core kinds), delete (finalizers, preconditions);
- status and scale subresources, `generation` counting spec changes, 409 Conflict on stale resource versions;
- injectable faults (errors, delays, dropped watches: `faults`), and every request recorded in RBAC terms
  (`recording`), to prove a ClusterRole least-privilege;
- a simulated-cluster mode (`sim`): a workload's jobs run on its nodes by dl2's simulator.

Gaps a real cluster would show (test those there): no authentication, RBAC, admission or webhooks; no schema
validation, pruning or defaulting of custom resources; no garbage collector (the simulated cluster deletes the
pods of a deleted job itself); core objects keep a `status` given at creation; strategic merge knows its list
merge keys by field name, not from the kinds' schemas; lists page from the current state, not a snapshot;
`events.k8s.io` events, protobuf, server-side apply, OpenAPI documents (so `kubectl apply` needs
`--validate=false`) and `kubectl get -w` tables are not served.

The job contract between dl2 and the cluster (kinds, labels, annotations, how jobs are resized) is
`dl2.kube.apiserver.contract`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dl2.kube.apiserver.faults import Fault, FaultKind
    from dl2.kube.apiserver.recording import RequestRecord, load_records, permissions
    from dl2.kube.apiserver.server import THIRD_PARTY_CRDS, LocalApiServer

_EXPORTS = {
    "Fault": "faults",
    "FaultKind": "faults",
    "RequestRecord": "recording",
    "load_records": "recording",
    "permissions": "recording",
    "THIRD_PARTY_CRDS": "server",
    "LocalApiServer": "server",
}


def __getattr__(name: str) -> Any:
    """Imported on first use, so that the controller can read `contract` without loading kmock and aiohttp."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)


__all__ = ["THIRD_PARTY_CRDS", "Fault", "FaultKind", "LocalApiServer", "RequestRecord", "load_records", "permissions"]
