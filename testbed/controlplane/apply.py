"""Installing manifests on the control plane from Python: server-side apply (`kubectl apply --server-side` without
kubectl) of the kinds dl2 ships, and waiting for CRDs to be served.

Server-side apply makes installing idempotent (applying the same file again changes nothing) and has the API
server check every object as it would `kubectl apply`'s: a CRD with a schema it refuses fails here with its 422.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from dl2.kube.rest import Resource, Rest

FIELD_MANAGER = "dl2"
APPLY_PATCH = "application/apply-patch+yaml"
KINDS: dict[tuple[str, str], Resource] = {
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): Resource(
        "apiextensions.k8s.io", "v1", "customresourcedefinitions", namespaced=False
    ),
    ("v1", "Namespace"): Resource("", "v1", "namespaces", namespaced=False),
    ("v1", "ServiceAccount"): Resource("", "v1", "serviceaccounts"),
    ("v1", "ConfigMap"): Resource("", "v1", "configmaps"),
    ("v1", "Secret"): Resource("", "v1", "secrets"),
    ("v1", "PersistentVolume"): Resource("", "v1", "persistentvolumes", namespaced=False),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): Resource(
        "rbac.authorization.k8s.io", "v1", "clusterroles", namespaced=False
    ),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): Resource(
        "rbac.authorization.k8s.io", "v1", "clusterrolebindings", namespaced=False
    ),
    ("rbac.authorization.k8s.io/v1", "Role"): Resource("rbac.authorization.k8s.io", "v1", "roles"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): Resource("rbac.authorization.k8s.io", "v1", "rolebindings"),
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"): Resource(
        "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", namespaced=False
    ),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): Resource(
        "admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", namespaced=False
    ),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): Resource(
        "admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings", namespaced=False
    ),
    ("dl2.io/v1alpha1", "SchedulerPolicy"): Resource("dl2.io", "v1alpha1", "schedulerpolicies", namespaced=False),
}
CRDS = KINDS[("apiextensions.k8s.io/v1", "CustomResourceDefinition")]


def documents(*paths: Path) -> list[dict[str, Any]]:
    return [doc for path in paths for doc in yaml.safe_load_all(path.read_text()) if doc]


def apply(rest: Rest, objects: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Server-side apply each object (ValueError for a kind not in `KINDS`); the objects as stored."""
    applied = []
    for obj in objects:
        resource = KINDS.get((obj.get("apiVersion", ""), obj.get("kind", "")))
        if resource is None:
            raise ValueError(f"dl2 does not apply {obj.get('apiVersion')} {obj.get('kind')}; use kubectl apply")
        metadata = obj["metadata"]
        namespace = metadata.get("namespace") if resource.namespaced else None
        path = resource.path(namespace, metadata["name"])
        query = {"fieldManager": FIELD_MANAGER, "force": "true"}
        applied.append(rest.request("PATCH", path, obj, query=query, content_type=APPLY_PATCH))
    return applied


def wait_established(rest: Rest, names: Iterable[str], timeout_s: float = 30.0) -> None:
    """Wait until every CRD named is `Established` (its resource is served)."""
    deadline = time.monotonic() + timeout_s
    for name in names:
        while True:
            conditions = (rest.get(CRDS, None, name).get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not established within {timeout_s:g} s")
            time.sleep(0.05)


def install_crds(rest: Rest, *paths: Path) -> list[str]:
    """Apply the CRD files and wait for them; their names."""
    crds = [doc for doc in documents(*paths) if doc.get("kind") == "CustomResourceDefinition"]
    apply(rest, crds)
    names = [crd["metadata"]["name"] for crd in crds]
    wait_established(rest, names)
    return names
