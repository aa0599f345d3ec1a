"""dl2 on a control plane, as an operator would install it: the job operators' CRDs, the SchedulerPolicy CRD,
dl2's namespace, ServiceAccounts, RBAC and admission policy (`k8s/`), the managed namespaces (labelled, and the
controller's resize bound in each, as `k8s/managed-namespaces.yaml` binds it in the sample's), and credentials for
each component's ServiceAccount.

    identities = install_dl2(plane)
    plane.write_kubeconfig(path, token=identities.controller)   # `dl2 serve` under dl2-scheduler's RBAC
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dl2.kube.contract import MANAGED_LABEL
from dl2.kube.rest import Rest
from dl2.paths import REPO_ROOT
from testbed.controlplane.apply import apply, documents, install_crds
from testbed.controlplane.cluster import ControlPlane

K8S = REPO_ROOT / "k8s"
THIRD_PARTY_CRDS = (
    K8S / "third-party" / "kubeflow.org_pytorchjobs.yaml",
    K8S / "third-party" / "batch.volcano.sh_jobs.yaml",
)
"""The real CRDs of the job kinds dl2 resizes (Kubeflow PyTorchJob, Volcano Job), shipped unmodified."""
POLICY_CRD = K8S / "crd-schedulerpolicy.yaml"
IDENTITY_MANIFESTS = (
    K8S / "namespace.yaml",
    K8S / "serviceaccount.yaml",
    K8S / "rbac.yaml",
    K8S / "admission.yaml",
)
RESIZE_BINDING = K8S / "managed-namespaces.yaml"
"""The controller's RoleBinding in one managed namespace (the sample's); `managed_namespace` copies it to another."""
MANAGED_NAMESPACES = ("team-a", "team-b")
"""The namespaces the cluster twin submits jobs to by default (`TwinOptions.namespaces`)."""
SYSTEM_NAMESPACE = "dl2-system"
CONTROLLER, EXTENDER, PROMOTER = "dl2-scheduler", "dl2-extender", "dl2-promoter"


def service_account_user(name: str, namespace: str = SYSTEM_NAMESPACE) -> str:
    """The user name RBAC and the audit log know a ServiceAccount by."""
    return f"system:serviceaccount:{namespace}:{name}"


@dataclass(frozen=True, slots=True)
class Identities:
    """Bearer tokens of dl2's ServiceAccounts (TokenRequest, a day long)."""

    controller: str
    extender: str
    promoter: str


def managed_namespace(name: str) -> list[dict[str, Any]]:
    """What makes `name` a namespace dl2 manages: the namespace labelled `dl2.io/managed: "true"`, and the
    controller's resize bound in it (`k8s/managed-namespaces.yaml`'s RoleBinding, moved to `name`)."""
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {MANAGED_LABEL: "true"}}}
    bindings = [
        {**doc, "metadata": {**doc["metadata"], "namespace": name}}
        for doc in documents(RESIZE_BINDING)
        if doc["kind"] == "RoleBinding"
    ]
    return [namespace, *bindings]


def identity_documents(managed_namespaces: Sequence[str] = MANAGED_NAMESPACES) -> list[dict[str, Any]]:
    """Every object `install_dl2` applies but the CRDs, in order (a namespace before what goes in it)."""
    return [*documents(*IDENTITY_MANIFESTS), *(doc for name in managed_namespaces for doc in managed_namespace(name))]


def install_dl2(plane: ControlPlane, managed_namespaces: Sequence[str] = MANAGED_NAMESPACES) -> Identities:
    """Install the CRDs, dl2's identities and its managed namespaces (idempotent) and issue the identities'
    tokens. The controller may resize jobs in `managed_namespaces` only."""
    rest = Rest(plane.admin_client())
    install_crds(rest, *THIRD_PARTY_CRDS, POLICY_CRD)
    apply(rest, identity_documents(managed_namespaces))
    return Identities(
        plane.service_account_token(SYSTEM_NAMESPACE, CONTROLLER),
        plane.service_account_token(SYSTEM_NAMESPACE, EXTENDER),
        plane.service_account_token(SYSTEM_NAMESPACE, PROMOTER),
    )
