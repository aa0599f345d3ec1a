"""The real control plane for the Kubernetes tests: one per test process (`ControlPlane`: etcd, kube-apiserver with
RBAC and an audit log, kube-controller-manager, kube-scheduler, kwok), dl2 installed on it as an operator would
(`install_dl2`), every test starting from a clean cluster (`kube`).

What acts on that cluster is a fixture too, bound to the test's cluster: `policies` (create and read the
SchedulerPolicy), `twin` (a started cluster twin), `run_slot` (one slot of an in-process controller at the twin's
clock), `training_pods`, `heuristic_client` (a trivial controller), `serve_under_kills` (`dl2 serve` as a process,
SIGKILLed and restarted) and `uninterrupted_run` (the run a run under kills must equal). The plain pieces under them
(`Policies`, `running_twin`, `clock`, `run_clock_slot`, `HeuristicClient`, `ServeUnderKills`, `run_uninterrupted`)
take the cluster as an argument, for what cannot use a function's fixtures: a module-scoped fixture, and
`benchmarks/kube_controller.py` on a control plane of its own. Plain data (workloads, manifests, a stand-in model
loader) is in `builders.py`.

At the end of the session the fixture reads the API server's audit log: a request of one of dl2's identities
(the controller, the extender, the promotion gate, each under its own ServiceAccount) that RBAC denied fails the
run. Which grants are used is proven by `tests/integration/kube/test_kube_rbac.py`.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dl2.core import Workload
from dl2.kube import clock as slot_clock
from dl2.kube import contract
from dl2.kube.cache import ClusterCache
from dl2.kube.metrics import Metrics
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
from dl2.sim.config import SimConfig
from dl2.truth import Truth
from testbed.controlplane.assets import AssetsMissing
from testbed.controlplane.cluster import TWIN, ControlPlane
from testbed.controlplane.install import (
    CONTROLLER,
    EXTENDER,
    PROMOTER,
    Identities,
    install_dl2,
    service_account_user,
)
from testbed.controlplane.objectstore import ObjectStore
from testbed.twin import ClusterTwin, TwinOptions, start_twin
from tests.builders import CONTROLLER_AGENT, policy_object, sent_resizes

LEASES = Resource("coordination.k8s.io", "v1", "leases")
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
        # kwok keeps a node's lease in kube-node-lease, owned by that node's uid. A later test that creates a node of
        # the same name would find the old lease (kwok sets owners only on a lease that has none), the garbage
        # collector would delete it under kwok, and the node could stay NotReady: drop the leases with their nodes.
        rest.request("DELETE", LEASES.path("kube-node-lease"))


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


# -- what acts on a cluster, given it: under the fixtures below, and for what has no function's fixtures ----------


class Policies:
    """The cluster's SchedulerPolicy `default`: created from `builders.policy_object`, and read back."""

    def __init__(self, kube: KubeEnv) -> None:
        self.kube = kube

    def create(self, mode: str = "active", version: str | None = "1", **spec: Any) -> dict[str, Any]:
        return self.kube.rest().create(POLICIES, None, policy_object(mode, version, **spec))

    def read(self) -> dict[str, Any]:
        return self.kube.rest().get(POLICIES, None, "default")


@contextmanager
def running_twin(
    kube: KubeEnv,
    workload: Workload,
    config: SimConfig,
    placer: str = "load-balance",
    truth: Truth | None = None,
    **options: Any,
) -> Iterator[ClusterTwin]:
    """A started cluster twin on the control plane `kube` (its thread pool closed afterwards)."""
    running = start_twin(kube.twin_api(), workload, config, placer, TwinOptions(**options), truth)
    try:
        yield running
    finally:
        running.close()


def clock(rest: Rest) -> slot_clock.SlotClock:
    """The twin's clock as it is now."""
    parsed = slot_clock.parse_clock(rest.get(CONFIGMAPS, slot_clock.NAMESPACE, slot_clock.NAME).get("data"))
    assert parsed is not None, "the twin has published no slot yet"
    return parsed


def run_clock_slot(controller: Any, rest: Rest) -> Any:
    """One slot of an in-process controller at the twin's clock (with its barrier), as `Controller.run` runs it."""
    now = clock(rest)
    return controller.run_slot(now.slot, now.time_s, now.slot_s, dict(now.resource_versions))


class HeuristicClient:
    """A trivial controller: each slot it reads the cluster from informers (once they are as fresh as the twin's
    clock says), asks a dl2 heuristic for an allocation and resizes every job whose replicas differ (PyTorchJobs
    through `scale`, Volcano Jobs by JSON patch)."""

    def __init__(self, api: Any, scheduler: Any) -> None:
        self.rest = Rest(api)
        self.cache = ClusterCache(self.rest, Metrics()).start()
        self.scheduler = scheduler
        self.scheduler.reset()
        self.resizes = 0
        self.short_of_max = 0
        """Decisions that gave a job fewer workers than its maximum (the cluster was contended)."""

    def view(self) -> tuple[Any, list[dict[str, Any]]]:
        """The cluster view and the job objects in its order, read as the controller reads them."""
        from dl2.kube.observe import snapshot

        now = clock(self.rest)
        barrier = {**self.rest.written}
        for key, version in now.resource_versions.items():
            barrier[key] = max(barrier.get(key, 0), version)
        snap = snapshot(self.cache.read(barrier), now.time_s, now.slot, now.slot_s, "")
        return snap.view, [job.obj for job in snap.jobs]

    def step(self) -> None:
        view, objects = self.view()
        allocation = self.scheduler.schedule(view)
        for job_view, job in zip(view.jobs, objects, strict=True):
            decided = allocation.get(job_view.spec.job_id)
            wanted = (decided.num_workers, decided.num_ps)
            self.short_of_max += decided.num_workers < job_view.spec.max_workers
            if contract.replicas(job) == wanted:
                continue
            subresource, content_type, body = contract.resize(job, *wanted)
            resource = PYTORCHJOBS if job["kind"] == "PyTorchJob" else VOLCANO_JOBS
            namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
            self.rest.patch(resource, namespace, name, body, content_type, subresource)
            self.resizes += 1

    def close(self) -> None:
        self.cache.stop()


class ServeUnderKills:
    """`dl2 serve` as a separate process on the cluster twin in lock step, SIGKILLed at chosen points of its slot
    loop (`DL2_SERVE_CRASH_AT`) and restarted each time, as a pod's container would be.

    `kills` is a list of (point, slot), at most one per slot; every one that lies ahead is armed at each start, and
    the process dies at the first it reaches (a point that its slot never reaches, such as a resize in a slot
    without one, does not fire). `resizes()` counts the controller's resize requests per (slot, job) from the API
    server's audit log."""

    def __init__(
        self,
        kube: KubeEnv,
        cluster: ClusterTwin,
        folder: Path,
        models_dir: Path,
        kills: list[tuple[str, int]],
        identity: str = "serve-0",
        limit: int | None = None,
        decision_log: str | None = None,
    ) -> None:
        """`limit`: stop arming kill points once that many kills have happened; `decision_log`: where the records
        go (default: `<folder>/decisions`; an `s3://` URL puts them in object storage)."""
        self.kube = kube
        self.decision_log = decision_log or str(folder / "decisions")
        self.cluster = cluster
        self.folder = folder
        self.kubeconfig = kube.kubeconfig(folder / "kubeconfig", token=kube.identities.controller)
        self.models_dir = models_dir
        self.pending = sorted(kills, key=lambda kill: kill[1])
        self.identity = identity
        self.limit = limit
        self.kills: list[tuple[str, int]] = []
        """The kills that happened: (point, slot)."""
        self.starts = 0
        self.process: Any = None
        self.slot_marks: list[tuple[int, int]] = []
        """(slot, audit log offset when the twin published that slot)."""

    def start(self, armed_from: int) -> None:
        self.pending = [kill for kill in self.pending if kill[1] >= armed_from]
        if self.limit is not None and len(self.kills) >= self.limit:
            self.pending = []
        env = {**os.environ, "DL2_SERVE_CRASH_AT": ",".join(f"{point}@{at}" for point, at in self.pending)}
        command = [
            sys.executable, "-m", "dl2.cli.main", "serve", "--kubeconfig", str(self.kubeconfig), "--clock", "cluster",
            "--decision-log", self.decision_log, "--models-dir", str(self.models_dir),
            "--metrics-port", "0", "--metrics-host", "127.0.0.1", "--identity", self.identity,
            "--lease-s", "3", "--renew-deadline-s", "2", "--retry-s", "0.2", "--log-level", "WARNING",
        ]  # fmt: skip
        log = open(self.folder / f"serve-{self.starts}.log", "w")  # noqa: SIM115 (the process writes it)
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.starts += 1

    def waiting(self, slot: int) -> None:
        if self.process is not None and self.process.poll() is not None:
            code = self.process.returncode
            if code != -9:
                raise RuntimeError(f"dl2 serve exited with {code}: see {self.folder}/serve-{self.starts - 1}.log")
            # the latest armed point at or before the clock's slot (after a kill at `status` the twin may already
            # have moved on: the slot was reported done)
            fired = [kill for kill in self.pending if kill[1] <= slot]
            assert fired, f"killed in slot {slot} with nothing armed there"
            self.kills.append(fired[-1])
            self.start(fired[-1][1] + 1)

    def run(self, slot_timeout_s: float = 120.0) -> None:
        from testbed.twin.lockstep import clock_slot, reported_slot, run_lockstep

        rest = self.cluster.rest
        self.start(clock_slot(rest))
        try:
            while not self.cluster.done:
                self.slot_marks.append((clock_slot(rest), self.kube.plane.audit_offset()))
                run_lockstep(self.cluster, slot_timeout_s, max_slots=1, waiting=self.waiting)
            # the last slot's records are completed at the slot after it (the twin publishes it when done)
            final = clock_slot(rest)
            deadline = time.monotonic() + slot_timeout_s
            while (reported_slot(rest) or -1) < final:
                self.waiting(final)
                assert time.monotonic() < deadline, f"the controller did not report the final slot {final}"
                time.sleep(0.02)
        finally:
            self.stop()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(20)

    def resizes(self) -> dict[tuple[int, str], int]:
        """(slot, job name) -> resize requests the controller sent in that slot that took effect (`sent_resizes`: a
        kill amid a slot's resizes may cut one off after the API server wrote it)."""
        counts: Counter[tuple[int, str]] = Counter()
        end = self.kube.plane.audit_offset()
        marks = [*self.slot_marks, (10**9, end)]
        for (slot, first), (_, last) in itertools.pairwise(marks):
            events, _ = _audit_between(self.kube, first, last)
            for name, count in sent_resizes(events).items():
                counts[(slot, name)] += count
        return dict(counts)


def _audit_between(kube: KubeEnv, first: int, last: int) -> tuple[list[Any], int]:
    from testbed.controlplane.cluster import read_audit_log

    return read_audit_log(kube.plane.audit_log, first, last)


def run_uninterrupted(
    kube: KubeEnv, workload: Workload, config: SimConfig, folder: Path, loader: Any
) -> tuple[list[Any], dict[str, Any], dict[int, int]]:
    """A workload run in active mode by an in-process controller that is never killed: its records (the final
    slot's completed too), each job's finish time, and the resizes of each slot. What a run under kills must
    equal. The cluster is reset afterwards."""
    from dl2.core.log_format import read_log
    from dl2.kube.controller import Controller, ControllerConfig

    policies = Policies(kube)
    policies.create("active")
    settings = ControllerConfig("reference", decision_log=folder, clock="cluster")
    controller = Controller(kube.controller_api("reference"), settings, loader)
    try:
        with running_twin(kube, workload, config) as cluster:
            controller.refresh_policy(policies.read())
            resizes = {}
            while True:
                report = run_clock_slot(controller, cluster.rest)
                resizes[report.slot] = report.resizes
                if cluster.done:
                    break
                cluster.advance()
            run_clock_slot(controller, cluster.rest)
            finish = {job.job_id: job.finish_s for job in cluster.result().jobs}
    finally:
        controller.cache.stop()
        controller.events.stop()
        kube.reset()
    return read_log(folder / "dl2-local"), finish, resizes


# -- the same, bound to the test's cluster (`kube`: each test that uses one starts from a clean cluster) ----------


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
