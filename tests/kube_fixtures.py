"""The real control plane for the Kubernetes tests: one per test process (`ControlPlane`: etcd, kube-apiserver with
RBAC and an audit log, kube-controller-manager, kube-scheduler, kwok), dl2 installed on it as an operator would
(`install_dl2`), every test starting from a clean cluster (`kube`).

What acts on that cluster is a fixture too, bound to the test's cluster: `policies` (create and read the
SchedulerPolicy), `twin` (a started cluster twin), `run_slot` (one slot of an in-process controller at the twin's
clock), `training_pods`, `heuristic_client` (a trivial controller), `serve_under_kills` (`dl2 serve` as a process,
SIGKILLed and restarted) and `uninterrupted_run` (the run a run under kills must equal). The plain pieces under them
(`Policies`, `running_twin`, `clock`, `run_clock_slot`, `HeuristicClient`, `ServeUnderKills`, `run_uninterrupted`)
live in `testbed.harness` and take the cluster as an argument, for what cannot use a function's fixtures: a
module-scoped fixture, and `benchmarks/kube_controller.py` on a control plane of its own. Plain data (workloads,
manifests, a stand-in model loader) is in `builders.py`.

At the end of the session the fixture reads the API server's audit log: a request of one of dl2's identities
(the controller, the extender, the promotion gate, each under its own ServiceAccount) that RBAC denied fails the
run. Which grants are used is proven by `tests/integration/kube/test_kube_rbac.py`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from dl2.core import Workload
from dl2.kube import contract
from dl2.kube.rest import PODS
from dl2.sim.config import SimConfig
from testbed.controlplane.assets import AssetsMissing
from testbed.controlplane.cluster import ControlPlane
from testbed.controlplane.install import (
    CONTROLLER,
    EXTENDER,
    PROMOTER,
    Identities,
    install_dl2,
    service_account_user,
)
from testbed.controlplane.objectstore import ObjectStore
from testbed.harness import (
    HeuristicClient,
    KubeEnv,
    Policies,
    ServeUnderKills,
    run_clock_slot,
    run_uninterrupted,
    running_twin,
)
from testbed.twin import ClusterTwin

DL2_USERS = {service_account_user(name) for name in (CONTROLLER, EXTENDER, PROMOTER)}


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
    from testbed.controlplane.objectstore import object_store

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


# -- `testbed.harness`'s pieces, bound to the test's cluster (`kube`: each test that uses one starts clean) ------------


@pytest.fixture
def policies(kube: KubeEnv) -> Policies:
    """`policies.create(mode="active", version="1", **spec)` and `policies.read()` of the test's cluster."""
    return Policies(kube)


@pytest.fixture
def twin(kube: KubeEnv) -> Callable[..., AbstractContextManager[ClusterTwin]]:
    """`with twin(workload, config, placer="load-balance", truth=None, **options) as cluster:` a started cluster
    twin on the test's cluster (see `running_twin`)."""
    return functools.partial(running_twin, kube)


@pytest.fixture
def run_slot(kube: KubeEnv) -> Callable[[Any], Any]:
    """`run_slot(controller)`: one slot of an in-process controller at the twin's clock (see `run_clock_slot`)."""
    rest = kube.rest()
    return lambda controller: run_clock_slot(controller, rest)


@pytest.fixture
def training_pods(kube: KubeEnv) -> Callable[..., list[dict[str, Any]]]:
    """`training_pods(namespace=None, job=None)`: the pods of PyTorchJobs and Volcano Jobs (of the job named `job`),
    found as the controller finds them: by the labels their operators set."""
    rest = kube.rest()

    def pods(namespace: str | None = None, job: str | None = None) -> list[dict[str, Any]]:
        found = []
        for label in (contract.KUBEFLOW_JOB_NAME, contract.VOLCANO_JOB_NAME):
            found += rest.list(PODS, namespace, labelSelector=label if job is None else f"{label}={job}")
        return found

    return pods


@pytest.fixture
def heuristic_client(kube: KubeEnv) -> Iterator[Callable[[Any, str], HeuristicClient]]:
    """`heuristic_client(scheduler, user_agent)`: a `HeuristicClient` on the test's cluster as the admin, under
    that user agent (closed at the end of the test, if the test has not closed it)."""
    clients: list[HeuristicClient] = []

    def make(scheduler: Any, user_agent: str) -> HeuristicClient:
        clients.append(HeuristicClient(kube.admin(user_agent), scheduler))
        return clients[-1]

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def serve_under_kills(kube: KubeEnv) -> Iterator[Callable[..., ServeUnderKills]]:
    """`serve_under_kills(cluster, folder, models_dir, kills, identity=..., limit=..., decision_log=...)`: a
    `ServeUnderKills` on the test's cluster (its process stopped at the end of the test, if still running)."""
    runs: list[ServeUnderKills] = []

    def make(*args: Any, **kwargs: Any) -> ServeUnderKills:
        runs.append(ServeUnderKills(kube, *args, **kwargs))
        return runs[-1]

    yield make
    for run in runs:
        run.stop()


@pytest.fixture
def uninterrupted_run(
    kube: KubeEnv,
) -> Callable[[Workload, SimConfig, Path, Any], tuple[list[Any], dict[str, Any], dict[int, int]]]:
    """`uninterrupted_run(workload, config, folder, loader)` on the test's cluster (see `run_uninterrupted`)."""
    return functools.partial(run_uninterrupted, kube)
