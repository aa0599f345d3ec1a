"""Shared pieces of the Kubernetes tests: clients of a local API server, manifests, and a watch in a thread."""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client, watch

from dl2.kube.apiserver import THIRD_PARTY_CRDS, LocalApiServer

NS = "team-a"
PJ = ("kubeflow.org", "v1", "pytorchjobs")
VJ = ("batch.volcano.sh", "v1alpha1", "jobs")


def api_client(server: LocalApiServer, user_agent: str = "dl2-test") -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = server.url
    api = client.ApiClient(configuration)
    api.user_agent = user_agent
    return api


def namespace(api: client.ApiClient, name: str = NS) -> None:
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name, "labels": {"dl2.io/managed": "true"}}})


def pod(name: str, labels: dict[str, str] | None = None, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "trainer", "image": "trainer:1"}]}
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def pytorchjob(name: str, workers: int = 2, max_workers: int = 8) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "elasticPolicy": {"minReplicas": 1, "maxReplicas": max_workers, "rdzvBackend": "c10d"},
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": workers,
                    "template": {"spec": {"containers": [{"name": "pytorch", "image": "trainer:1"}]}},
                }
            },
        },
    }


def volcano_job(name: str, ps: int = 1, workers: int = 2) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "trainer", "image": "trainer:1"}]}}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "minAvailable": 2,
            "schedulerName": "volcano",
            "tasks": [
                {"name": "ps", "replicas": ps, "template": template},
                {"name": "worker", "replicas": workers, "template": template},
            ],
        },
    }


class WatchThread:
    """Runs `watch.Watch().stream(function, **kwargs)` in a daemon thread and keeps (type, name, rv) per event."""

    def __init__(self, function: Callable[..., Any], stop_after: int | None = None, **kwargs: Any) -> None:
        self.events: list[tuple[str, str | None, str]] = []
        self.error: BaseException | None = None
        self.watch = watch.Watch()
        self.arrived = threading.Condition()
        self._stop_after = stop_after
        self._thread = threading.Thread(target=self._run, args=(function, kwargs), daemon=True)
        self._thread.start()

    def _run(self, function: Callable[..., Any], kwargs: dict[str, Any]) -> None:
        try:
            for event in self.watch.stream(function, **kwargs):
                metadata = event["raw_object"].get("metadata") or {}
                with self.arrived:
                    self.events.append((event["type"], metadata.get("name"), metadata.get("resourceVersion")))
                    self.arrived.notify_all()
                if self._stop_after is not None and len(self.events) >= self._stop_after:
                    self.watch.stop()
                    return
        except BaseException as error:  # reported to the test
            self.error = error
        finally:
            with self.arrived:
                self.arrived.notify_all()

    def wait_for(self, count: int, timeout_s: float = 10.0) -> list[tuple[str, str | None, str]]:
        with self.arrived:
            self.arrived.wait_for(lambda: len(self.events) >= count or not self._thread.is_alive(), timeout_s)
        return list(self.events)

    def join(self, timeout_s: float = 10.0) -> None:
        self._thread.join(timeout_s)

    def stop(self) -> None:
        self.watch.stop()


class HeuristicClient:
    """A trivial controller: each slot it reads the cluster through the API, asks a dl2 heuristic for an allocation
    and resizes every job whose replicas differ (PyTorchJobs through `scale`, Volcano Jobs by JSON patch)."""

    def __init__(self, api: client.ApiClient, scheduler: Any) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.scheduler = scheduler
        self.scheduler.reset()
        self.resizes = 0
        self.short_of_max = 0
        """Decisions that gave a job fewer workers than its maximum (the cluster was contended)."""

    def view(self) -> tuple[Any, list[dict[str, Any]]]:
        """The cluster view and the job objects in its order, read as the controller reads them."""
        from dl2.kube.observe import read_cluster, snapshot

        data = self.core.read_namespaced_config_map("dl2-clock", "dl2-system").data
        snap = snapshot(read_cluster(self.api), float(data["time_s"]), int(data["slot"]), float(data["slot_s"]), "")
        return snap.view, [job.obj for job in snap.jobs]

    def step(self) -> None:
        from dl2.kube.apiserver import contract

        view, objects = self.view()
        allocation = self.scheduler.schedule(view)
        for job_view, job in zip(view.jobs, objects, strict=True):
            decided = allocation.get(job_view.spec.job_id)
            wanted = (decided.num_workers, decided.num_ps)
            self.short_of_max += decided.num_workers < job_view.spec.max_workers
            if contract.replicas(job) == wanted:
                continue
            subresource, content_type, body = contract.resize(job, *wanted)
            group, version, plural = contract.kind_of(job)
            namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
            if subresource == "scale":
                self.custom.patch_namespaced_custom_object_scale(group, version, namespace, plural, name, body)
            else:
                self.custom.patch_namespaced_custom_object(
                    group, version, namespace, plural, name, body, _content_type=content_type
                )
            self.resizes += 1


# -- the controller (dl2 serve) against a simulated cluster ---------------------------------------------------

POLICY_CRD = Path(__file__).resolve().parent.parent / "k8s" / "crd-schedulerpolicy.yaml"
POLICIES = "dl2.io/v1alpha1/schedulerpolicies"
CONTROLLER_AGENT = "dl2-serve"
"""User-agent prefix of every controller client in the tests: the requests the least-privilege check counts."""
REQUEST_LOG_ENV = "DL2_KUBE_REQUEST_LOG"
"""The session's JSONL of every request the local servers answered (set by tests/conftest.py)."""


def kube_server(**options: Any) -> LocalApiServer:
    """A server with the job kinds' CRDs and the SchedulerPolicy CRD, recording into the session's request log."""
    record = os.environ.get(REQUEST_LOG_ENV)
    return LocalApiServer(
        crd_files=[*THIRD_PARTY_CRDS, POLICY_CRD], record_path=Path(record) if record else None, **options
    )


def policy_object(mode: str = "active", version: str | None = "1", **spec: Any) -> dict[str, Any]:
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


def clock(server: LocalApiServer) -> tuple[int, float, float]:
    data = server.objects("v1/configmaps", "dl2-system")["dl2-clock"]["data"]
    return int(data["slot"]), float(data["time_s"]), float(data["slot_s"])


def controller_api(server: LocalApiServer, identity: str = "a") -> client.ApiClient:
    """A client as `dl2 serve` builds one: the controller retries itself (with backoff), urllib3 does not."""
    configuration = client.Configuration()
    configuration.host = server.url
    configuration.retries = False
    api = client.ApiClient(configuration)
    api.user_agent = f"{CONTROLLER_AGENT}/{identity}"
    return api


class ServeUnderKills:
    """`dl2 serve` as a separate process on a simulated cluster in lock step, SIGKILLed at chosen points of its slot
    loop (`DL2_SERVE_CRASH_AT`) and restarted each time, as a pod's container would be.

    `kills` is a list of (point, slot), at most one per slot; every one that lies ahead is armed at each start, and
    the process dies at the first it reaches (a point that its slot never reaches, such as a resize in a slot
    without one, does not fire). `resizes()` counts the controller's resize requests per (slot, job) from the
    server's records."""

    def __init__(
        self,
        server: LocalApiServer,
        cluster: Any,
        folder: Path,
        models_dir: Path,
        kills: list[tuple[str, int]],
        identity: str = "serve-0",
        limit: int | None = None,
    ) -> None:
        """`limit`: stop arming kill points once that many kills have happened."""
        self.server = server
        self.cluster = cluster
        self.folder = folder
        self.kubeconfig = server.write_kubeconfig(folder / "kubeconfig")
        self.models_dir = models_dir
        self.pending = sorted(kills, key=lambda kill: kill[1])
        self.identity = identity
        self.limit = limit
        self.kills: list[tuple[str, int]] = []
        """The kills that happened: (point, slot)."""
        self.starts = 0
        self.process: Any = None
        self.slot_marks: list[tuple[int, int]] = []
        """(slot, index of the first server record of that slot)."""

    def start(self, armed_from: int) -> None:
        import subprocess
        import sys

        self.pending = [kill for kill in self.pending if kill[1] >= armed_from]
        if self.limit is not None and len(self.kills) >= self.limit:
            self.pending = []
        env = {**os.environ, "DL2_SERVE_CRASH_AT": ",".join(f"{point}@{at}" for point, at in self.pending)}
        command = [
            sys.executable, "-m", "dl2.cli.main", "serve", "--kubeconfig", str(self.kubeconfig), "--clock", "cluster",
            "--decision-log", str(self.folder / "decisions"), "--models-dir", str(self.models_dir),
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
            # the latest armed point at or before the clock's slot (after a kill at `status` the cluster may
            # already have moved on: the slot was reported done)
            fired = [kill for kill in self.pending if kill[1] <= slot]
            assert fired, f"killed in slot {slot} with nothing armed there"
            self.kills.append(fired[-1])
            self.start(fired[-1][1] + 1)

    def run(self, slot_timeout_s: float = 120.0) -> None:
        from dl2.kube.lockstep import clock_slot, run_lockstep

        self.start(clock_slot(self.server))
        try:
            while not self.cluster.done:
                self.slot_marks.append((clock_slot(self.server), len(self.server.records())))
                run_lockstep(self.server, self.cluster, slot_timeout_s, max_slots=1, waiting=self.waiting)
            # the last slot's records are completed at the slot after it (the cluster publishes it when done)
            final = clock_slot(self.server)
            from dl2.kube.lockstep import reported_slot

            while (reported_slot(self.server) or -1) < final:
                self.waiting(final)
                import time

                time.sleep(0.02)
        finally:
            self.stop()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(20)

    def resizes(self) -> dict[tuple[int, str], int]:
        """(slot, job name) -> resize requests the controller sent in that slot."""
        from collections import Counter

        records = self.server.records()
        counts: Counter[tuple[int, str]] = Counter()
        marks = [*self.slot_marks, (10**9, len(records))]
        for (slot, first), (_, end) in itertools.pairwise(marks):
            for record in records[first:end]:
                resize = record.rbac_resource == "pytorchjobs/scale" or (
                    record.rbac_resource == "jobs" and record.api_group == "batch.volcano.sh"
                )
                if CONTROLLER_AGENT in record.user_agent and record.verb == "patch" and resize and record.code < 300:
                    counts[(slot, record.name)] += 1
        return dict(counts)


def uninterrupted_run(
    workload: Any, config: Any, folder: Path, loader: Any
) -> tuple[list[Any], dict[str, Any], dict[int, int]]:
    """A workload run in active mode by an in-process controller that is never killed: its records (the final
    slot's completed too), each job's finish time, and the resizes of each slot. What a run under kills must
    equal."""
    from dl2.kube.apiserver.sim import simulate_cluster
    from dl2.kube.controller import Controller, ControllerConfig
    from dl2.sim.decision_log import read_log

    with kube_server() as server:
        cluster = simulate_cluster(server, workload, config)
        server.create(POLICIES, None, policy_object("active"))
        settings = ControllerConfig("reference", decision_log=folder, clock="cluster")
        controller = Controller(controller_api(server, "reference"), settings, loader)
        controller.refresh_policy(server.objects(POLICIES)["default"])
        resizes = {}
        while True:
            report = controller.run_slot(*clock(server))
            resizes[report.slot] = report.resizes
            if cluster.done:
                break
            cluster.advance()
        controller.run_slot(*clock(server))
        finish = {job.job_id: job.finish_s for job in cluster.result().jobs}
    return read_log(folder / "dl2-local"), finish, resizes
