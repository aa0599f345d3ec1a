"""The Kubeflow training operator on the local control plane: what makes and removes a PyTorchJob's pods on real
nodes, so that a resize dl2 writes is carried out by the real operator and not by the twin.

It runs as a process beside the control plane (as kube-scheduler does here), authenticated as the ServiceAccount
its own manifests give it (`kubeflow/training-operator`) and authorized by the ClusterRole of the same release
(`role.yaml`, which `make training-operator` copies from the module beside the binary). Only the PyTorchJob
controller is enabled. Its validating webhook is not served to the API server: the API server reaches a webhook
through a Service, and nothing here routes Service addresses (no kube-proxy); the webhook configuration exists with
no webhooks, so that the operator's certificate rotator, which waits for it, lets the controllers start.
"""

from __future__ import annotations

import base64
import contextlib
import shutil
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from dl2.kube.rest import Rest
from testbed.controlplane import assets
from testbed.controlplane.apply import KINDS, apply
from testbed.controlplane.cluster import ControlPlane
from testbed.controlplane.processes import Component, free_port, wait_until

NAMESPACE = "kubeflow"
"""The operator's namespace: its ServiceAccount and its webhook Secret live there (the operator's default)."""
NAME = "training-operator"
WEBHOOK_CONFIGURATION = "validator.training-operator.kubeflow.org"
"""What the operator's certificate rotator injects its CA into, and waits for."""
WEBHOOK_SECRET = "training-operator-webhook-cert"
CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
"""Where the operator reads its webhook's serving certificate (fixed in the operator, `pkg/cert/cert.go`; in a
cluster, its Secret mounted by the kubelet). Shared by every operator on the machine, so never removed: a test bed
stopping must not take the file from one starting (whose certificate rotator waits for it); the API server is given
no webhook to call, so which bed's certificate is there does not matter."""


def objects(role: dict[str, Any]) -> list[dict[str, Any]]:
    """What the operator's kustomize base installs besides its CRDs and Deployment: its namespace, ServiceAccount,
    ClusterRole `role` and the binding between them, the webhook's Secret, and the webhook configuration (here
    without webhooks, see the module's docstring)."""
    role = {**role, "metadata": {**role["metadata"], "name": NAME}}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NAME, "namespace": NAMESPACE}},
        role,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": NAME},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
        },
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": WEBHOOK_SECRET, "namespace": NAMESPACE}},
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": WEBHOOK_CONFIGURATION},
            "webhooks": [],
        },
    ]


class TrainingOperator:
    """The operator against `plane` (whose PyTorchJob CRD must be installed); a context manager."""

    def __init__(self, plane: ControlPlane, folder: Path | None = None) -> None:
        """`folder` holds its kubeconfig and log (a temporary one, removed on stop, when None)."""
        self.plane = plane
        self._owned = folder is None
        self.folder = folder or Path(tempfile.mkdtemp(prefix="dl2-operator-"))
        self.component: Component | None = None
        self.probe_port = 0
        self._installed: list[dict[str, Any]] = []
        """What `start` applied, deleted on stop."""

    def start(self, timeout_s: float = 60.0) -> TrainingOperator:
        """Install its objects, start it and wait until it is ready (its certificates made, its controllers
        started); on failure everything is stopped."""
        where = assets.TRAINING_OPERATOR.folder()
        binary = assets.TRAINING_OPERATOR.path()
        try:
            rest = Rest(self.plane.admin_client())
            self._installed = objects(yaml.safe_load((where / "role.yaml").read_text()))
            apply(rest, self._installed)
            token = self.plane.service_account_token(NAMESPACE, NAME)
            kubeconfig = self.plane.write_kubeconfig(self.folder / "operator.kubeconfig", token=token)
            self.probe_port = free_port()
            self.component = Component(
                NAME,
                [
                    binary,
                    f"--kubeconfig={kubeconfig}",
                    "--enable-scheme=pytorchjob",
                    f"--metrics-bind-address=127.0.0.1:{free_port()}",
                    f"--health-probe-bind-address=127.0.0.1:{self.probe_port}",
                    f"--webhook-server-port={free_port()}",
                ],
                self.folder / "logs",
            ).start()
            wait_until(
                lambda: self._mount_certificates(rest),
                timeout_s,
                "the operator's webhook certificate",
                [self.component],
            )
            wait_until(self.ready, timeout_s, "the training operator ready", [self.component])
        except BaseException:
            self.stop()
            raise
        return self

    def _mount_certificates(self, rest: Rest) -> bool:
        """What the kubelet does for the operator's pod: project its webhook Secret, once the operator's rotator
        has filled it, into the folder the operator reads its serving certificate from (the operator waits for
        it before it starts its controllers)."""
        data = (rest.get(KINDS[("v1", "Secret")], NAMESPACE, WEBHOOK_SECRET).get("data")) or {}
        if "tls.crt" not in data or "tls.key" not in data:
            return False
        CERT_DIR.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key", "ca.crt"):
            if name in data:
                (CERT_DIR / name).write_bytes(base64.b64decode(data[name]))
        return True

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.probe_port}/readyz", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        """Stop the process, delete what `start` installed, and remove its files."""
        if self.component is not None:
            self.component.stop()
        with contextlib.suppress(Exception):
            rest = Rest(self.plane.admin_client())
            for obj in reversed(self._installed):
                resource = KINDS[(obj["apiVersion"], obj["kind"])]
                namespace = obj["metadata"].get("namespace")
                with contextlib.suppress(Exception):
                    rest.delete_now(resource, namespace, obj["metadata"]["name"])
        if self._owned:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> TrainingOperator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
