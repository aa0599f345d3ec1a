"""The real control plane for the Kubernetes tests: one per test process (`ControlPlane`: etcd, kube-apiserver with
RBAC and an audit log, kube-controller-manager, kube-scheduler, kwok), dl2 installed on it as an operator would
(`install_dl2`), every test starting from a clean cluster (`kube`).

At the end of the session the fixture reads the API server's audit log: a request of one of dl2's identities
(the controller, the extender, the promotion gate, each under its own ServiceAccount) that RBAC denied fails the
run. Which grants are used is proven by `tests/integration/kube/test_kube_rbac.py`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dl2.controlplane.assets import AssetsMissing
from dl2.controlplane.cluster import TWIN, ControlPlane
from dl2.controlplane.install import (
    CONTROLLER,
    EXTENDER,
    PROMOTER,
    Identities,
    install_dl2,
    service_account_user,
)
from dl2.controlplane.objectstore import ObjectStore
from dl2.kube.policy import POLICIES
from dl2.kube.rest import (
    CONFIGMAPS,
    EVENTS,
    NAMESPACES,
    NODES,
    PODS,
    PYTORCHJOBS,
    VOLCANO_JOBS,
    Resource,
    Rest,
)

LEASES = Resource("coordination.k8s.io", "v1", "leases")
CONTROLLER_AGENT = "dl2-serve"
DL2_USERS = {service_account_user(name) for name in (CONTROLLER, EXTENDER, PROMOTER)}


@dataclass
class KubeEnv:
    """The session's control plane, dl2's identities on it, and clients for each."""

    plane: ControlPlane
    identities: Identities

    @property
    def url(self) -> str:
        return self.plane.url

    def admin(self, user_agent: str = "dl2-test") -> Any:
        return self.plane.admin_client(user_agent)

    def rest(self) -> Rest:
        return Rest(self.admin())

    def twin_api(self) -> Any:
        return self.plane.client(TWIN, user_agent="dl2-twin")

    def controller_api(self, identity: str = "a", server: str | None = None) -> Any:
        """A client as `dl2 serve` has one in the cluster: the dl2-scheduler ServiceAccount's token."""
        return self.plane.client(
            token=self.identities.controller, server=server, user_agent=f"{CONTROLLER_AGENT}/{identity}"
        )

    def promoter_api(self) -> Any:
        return self.plane.client(token=self.identities.promoter, user_agent="dl2-promoter")

    def extender_api(self) -> Any:
        return self.plane.client(token=self.identities.extender, user_agent="dl2-extender")

    def kubeconfig(self, path: Path, token: str | None = None, server: str | None = None) -> Path:
        return self.plane.write_kubeconfig(path, token=token, server=server)

    def reset(self) -> None:
        """Back to a cluster with dl2 installed and nothing else: no jobs, pods, nodes, policy, clock, leases or
        events (namespaces stay: deleting one takes the namespace controller seconds)."""
        rest = self.rest()
        namespaces = [ns["metadata"]["name"] for ns in rest.list(NAMESPACES)]
        with contextlib.suppress(Exception):
            rest.request("DELETE", POLICIES.path(None, "default"))
        for namespace in namespaces:
            for resource in (PYTORCHJOBS, VOLCANO_JOBS, EVENTS):
                rest.request("DELETE", resource.path(namespace))
            if namespace != "kube-system":
                rest.request("DELETE", PODS.path(namespace), {"gracePeriodSeconds": 0})
        rest.request("DELETE", LEASES.path("dl2-system"))
        rest.request("DELETE", CONFIGMAPS.path("dl2-system"), query={"fieldSelector": "metadata.name=dl2-clock"})
        rest.request("DELETE", NODES.path(), query={"labelSelector": "type=kwok"})


def _start() -> tuple[ControlPlane, Identities]:
    plane = ControlPlane()
    try:
        plane.start()
    except AssetsMissing as error:
        pytest.fail(f"{error} (make test builds it)")
    return plane, install_dl2(plane)


@pytest.fixture(scope="session")
def kube_session() -> Iterator[KubeEnv]:
    plane, identities = _start()
    env = KubeEnv(plane, identities)
    try:
        yield env
    finally:
        denied = [e for e in plane.audit_events() if e.user in DL2_USERS and e.code == 403]
        plane.stop()
    assert not denied, "RBAC denied dl2's identities: " + "; ".join(
        f"{e.user} {e.verb} {e.rbac_resource} ({e.uri})" for e in denied[:10]
    )


@pytest.fixture
def kube(kube_session: KubeEnv) -> Iterator[KubeEnv]:
    kube_session.plane.check()
    yield kube_session
    kube_session.reset()


@pytest.fixture(scope="session")
def s3_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObjectStore]:
    """versitygw (a real S3 server over a folder) for the session, its endpoint and credentials in the environment
    as a pod's would be (botocore reads them; so do `dl2 serve` subprocesses)."""
    from dl2.controlplane.objectstore import object_store

    folder = tmp_path_factory.mktemp("s3")
    try:
        with object_store(folder / "data", folder / "logs") as store, store.exported():
            yield store
    except AssetsMissing as error:
        pytest.fail(f"{error} (make test builds it)")


@pytest.fixture
def s3_url(s3_session: ObjectStore, request: pytest.FixtureRequest) -> str:
    """A fresh prefix in the session's bucket for one test."""
    import re

    return f"{s3_session.bucket('dl2-tests')}/{re.sub(r'[^A-Za-z0-9_-]+', '-', request.node.name)}"
