"""dl2 on a control plane, as an operator would install it: the job operators' CRDs, the SchedulerPolicy CRD,
dl2's namespace, ServiceAccounts and RBAC (`k8s/`), and credentials for each component's ServiceAccount.

    identities = install_dl2(plane)
    plane.write_kubeconfig(path, token=identities.controller)   # `dl2 serve` under dl2-scheduler's RBAC
"""

from __future__ import annotations

from dataclasses import dataclass

from dl2.controlplane.apply import apply, documents, install_crds
from dl2.controlplane.cluster import ControlPlane
from dl2.kube.rest import Rest
from dl2.paths import REPO_ROOT

K8S = REPO_ROOT / "k8s"
THIRD_PARTY_CRDS = (
    K8S / "third-party" / "kubeflow.org_pytorchjobs.yaml",
    K8S / "third-party" / "batch.volcano.sh_jobs.yaml",
)
"""The real CRDs of the job kinds dl2 resizes (Kubeflow PyTorchJob, Volcano Job), shipped unmodified."""
POLICY_CRD = K8S / "crd-schedulerpolicy.yaml"
IDENTITY_MANIFESTS = (K8S / "namespace.yaml", K8S / "serviceaccount.yaml", K8S / "rbac.yaml")
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


def install_dl2(plane: ControlPlane) -> Identities:
    """Install the CRDs and dl2's identities (idempotent) and issue their tokens."""
    rest = Rest(plane.admin_client())
    install_crds(rest, *THIRD_PARTY_CRDS, POLICY_CRD)
    apply(rest, documents(*IDENTITY_MANIFESTS))
    return Identities(
        plane.service_account_token(SYSTEM_NAMESPACE, CONTROLLER),
        plane.service_account_token(SYSTEM_NAMESPACE, EXTENDER),
        plane.service_account_token(SYSTEM_NAMESPACE, PROMOTER),
    )
