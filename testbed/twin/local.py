"""A local cluster: the real control plane with dl2 installed, and a twin running a workload on it.

    with LocalCluster(folder, workload, SimConfig.realistic(seed=0)) as local:
        local.serve_kubeconfig           # dl2 serve as the dl2-scheduler ServiceAccount (k8s/rbac.yaml)
        local.admin_kubeconfig           # kubectl as cluster admin
        local.create_policy("shadow", 3, "drf")
        run_lockstep(local.twin)         # the twin advances as the controller reports each slot

What `dl2 cluster`, the closed loop of `make demo` and the controller benchmarks share.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dl2.core import Workload
from dl2.kube.policy import API_VERSION, DEFAULT_NAME, KIND, POLICIES
from dl2.kube.rest import Rest
from dl2.sim.config import SimConfig
from dl2.truth import Truth
from testbed.controlplane.cluster import TWIN, AuditEvent, ControlPlane
from testbed.controlplane.install import CONTROLLER, Identities, install_dl2, service_account_user
from testbed.twin import ClusterTwin, TwinOptions, start_twin

RESIZES = (("kubeflow.org", "pytorchjobs"), ("batch.volcano.sh", "jobs"))


class LocalCluster:
    def __init__(
        self,
        folder: Path | None = None,
        workload: Workload | None = None,
        config: SimConfig | None = None,
        placer: str = "load-balance",
        options: TwinOptions | None = None,
        port: int = 0,
        truth: Truth | None = None,
    ) -> None:
        """`folder` keeps the control plane's files and the kubeconfigs (a temporary one when None); without a
        `workload` only the control plane runs; its jobs behave as `truth` says (None: as the catalogue)."""
        self.plane = ControlPlane(folder, port=port)
        self.folder = self.plane.folder
        self.workload = workload
        self.config = config or SimConfig.realistic()
        self.placer = placer
        self.options = options
        self.truth = truth
        self.twin: ClusterTwin | None = None
        self.identities: Identities | None = None
        self.admin_kubeconfig = self.folder / "admin.kubeconfig"
        self.serve_kubeconfig = self.folder / "serve.kubeconfig"
        self.promoter_kubeconfig = self.folder / "promoter.kubeconfig"

    def start(self) -> LocalCluster:
        try:
            self.plane.start()
            namespaces = (self.options or TwinOptions()).namespaces
            identities = self.identities = install_dl2(self.plane, namespaces)
            self.plane.write_kubeconfig(self.admin_kubeconfig)
            self.plane.write_kubeconfig(self.serve_kubeconfig, token=identities.controller)
            self.plane.write_kubeconfig(self.promoter_kubeconfig, token=identities.promoter)
            if self.workload is not None:
                api = self.plane.client(TWIN, user_agent="dl2-twin")
                self.twin = start_twin(api, self.workload, self.config, self.placer, self.options, self.truth)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.twin is not None:
            self.twin.close()
        self.plane.stop()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return self.plane.url

    def admin(self) -> Rest:
        return Rest(self.plane.admin_client("dl2-cluster"))

    def promoter_api(self) -> Any:
        """A client as the promotion gate (the dl2-promoter ServiceAccount)."""
        assert self.identities is not None, "start() the cluster first"
        return self.plane.client(token=self.identities.promoter, user_agent="dl2-promoter")

    def create_policy(
        self,
        mode: str,
        version: int | None,
        incumbent: str,
        name: str = DEFAULT_NAME,
        guardrails: dict[str, int] | None = None,
    ) -> None:
        spec: dict[str, Any] = {"mode": mode, "incumbent": incumbent}
        if guardrails:
            spec["guardrails"] = guardrails
        if version is not None:
            spec["model"] = {"name": "dl2-policy", "version": str(version)}
        body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": spec}
        self.admin().create(POLICIES, None, body)

    def controller_requests(self, offset: int = 0) -> list[AuditEvent]:
        """The controller's requests (its ServiceAccount's) since audit log `offset`."""
        user = service_account_user(CONTROLLER)
        return [event for event in self.plane.audit_events(offset) if event.user == user]

    def resizes(self, offset: int = 0) -> int:
        """Resize requests the controller sent and the API server accepted (patches of PyTorchJobs and Volcano
        Jobs: the controller writes nothing else to them)."""
        return sum(
            1
            for e in self.controller_requests(offset)
            if e.verb == "patch" and e.code < 300 and (e.api_group, e.rbac_resource) in RESIZES
        )
