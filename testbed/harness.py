"""What drives dl2 on a running control plane, given it: the plain pieces under the Kubernetes tests' fixtures
(`tests/kube_fixtures.py`) and the controller benchmarks (`benchmarks/kube_controller.py`), which start a control
plane of their own.

`KubeEnv` is a control plane with dl2 installed and clients as each of dl2's identities; `Policies` creates and reads
the SchedulerPolicy; `running_twin` starts a cluster twin; `clock` and `run_clock_slot` run an in-process controller
at the twin's clock; `HeuristicClient` is a trivial controller; `ServeUnderKills` runs `dl2 serve` as a process
SIGKILLed and restarted, and `run_uninterrupted` the run that one under kills must equal. With them, the data they
share: the controller's user agent, a SchedulerPolicy object, a stand-in model loader (`heuristic_loader`) and a
count of the controller's resize requests in an audit log (`sent_resizes`).

Nothing here imports pytest: a failed expectation is an `AssertionError` or a `RuntimeError`.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dl2.core import Workload
from dl2.kube import clock as slot_clock
from dl2.kube import contract
from dl2.kube.cache import ClusterCache
from dl2.kube.metrics import Metrics
from dl2.kube.policy import POLICIES
from dl2.kube.rest import CONFIGMAPS, EVENTS, NAMESPACES, NODES, PODS, PYTORCHJOBS, VOLCANO_JOBS, Resource, Rest
from dl2.sim.config import SimConfig
from dl2.truth import Truth
from testbed.controlplane.cluster import TWIN, ControlPlane
from testbed.controlplane.install import Identities
from testbed.twin import ClusterTwin, TwinOptions, start_twin

CONTROLLER_AGENT = "dl2-serve"
"""The user agent of the controller's client (`KubeEnv.controller_api`), as its requests show in the audit log."""


def policy_object(mode: str = "active", version: str | None = "1", **spec: Any) -> dict[str, Any]:
    """The SchedulerPolicy `default` in `mode`, serving `version` of the model `dl2-policy` (no model when None),
    with the other fields of its spec from `spec`."""
    body: dict[str, Any] = {"mode": mode, **spec}
    if version is not None:
        body["model"] = {"name": "dl2-policy", "version": version}
    return {"apiVersion": "dl2.io/v1alpha1", "kind": "SchedulerPolicy", "metadata": {"name": "default"}, "spec": body}


def heuristic_loader(
    name: str = "drf", failing: tuple[str, ...] = (), placer: str = "load-balance"
) -> Callable[[str, str], Any]:
    """Every version is heuristic `name` (a stand-in model that needs no training), except `failing` ones; it
    places with `placer`, as the cluster does (a heuristic's counts depend on where its tasks fit)."""
    from dl2.schedulers.registry import make_scheduler
    from dl2.sim.config import Mode
    from dl2.sim.run import speed_model

    def load(model: str, version: str) -> Any:
        if version in failing:
            raise FileNotFoundError(f"no version {version} of {model}")
        return make_scheduler(name, speed_model(Mode.REALISTIC), False, placer)

    return load


CUT_OFF = 504
"""What kube-apiserver answers, and audits, for a request whose client went away while it handled it ("request did
not complete within requested timeout - context canceled"): its write may have landed all the same."""


def _controller_resizes(events: list[Any]) -> list[Any]:
    return [
        event
        for event in events
        if CONTROLLER_AGENT in event.user_agent
        and event.verb == "patch"
        and (event.rbac_resource == "pytorchjobs" or (event.api_group, event.resource) == ("batch.volcano.sh", "jobs"))
    ]


def sent_resizes(events: list[Any]) -> Counter[str]:
    """Job name -> the controller's resize requests in `events` (one slot's, in the audit log's order) that took
    effect: each one the API server accepted, and each one cut off by its client's death (`CUT_OFF`: a kill amid
    the slot's parallel resizes) unless an accepted one for the job follows it. The restart that replays the slot
    resends a resize only where the job does not hold its target yet, so a cut-off request it does not resend had
    landed; counting accepted requests only would call that resize lost. (A resize really lost shows in the run's
    outcome too. A cut-off request that landed and was resent all the same, a repeat, counts once: the audit log
    cannot tell it from one that had not landed.)"""
    counts: Counter[str] = Counter()
    cut_off: list[str] = []
    for event in _controller_resizes(events):
        if event.code < 300:
            counts[event.name] += 1
            if event.name in cut_off:
                cut_off.remove(event.name)  # resent: the cut-off request had not landed
        elif event.code == CUT_OFF:
            cut_off.append(event.name)
    counts.update(cut_off)
    return counts


LEASES = Resource("coordination.k8s.io", "v1", "leases")
"""The controller's leader election and the kwok nodes' heartbeats: what `KubeEnv.reset` drops."""


@dataclass
class KubeEnv:
    """A control plane with dl2 installed (`install_dl2`), dl2's identities on it, and clients for each."""

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


class Policies:
    """The cluster's SchedulerPolicy `default`: created from `policy_object`, and read back."""

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
    from dl2.kube.controller import Controller
    from dl2.kube.settings import ControllerConfig

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
