"""Shared pieces of the Kubernetes tests: workloads, manifests, a trivial controller, and `dl2 serve` under kills,
all against the real control plane of `tests/kube_fixtures.py`."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from dl2.core import Workload
from dl2.kube import clock as slot_clock
from dl2.kube import contract
from dl2.kube.cache import ClusterCache
from dl2.kube.metrics import Metrics
from dl2.kube.rest import CONFIGMAPS, PODS, Rest
from dl2.sim.config import SimConfig
from dl2.truth import Truth
from dl2.twin import ClusterTwin, TwinOptions, start_twin
from dl2.workload.mapping import TraceMapping
from dl2.workload.synthetic import PRESETS, generate
from tests.kube_fixtures import CONTROLLER_AGENT, KubeEnv

NS = "team-a"


def training_pods(rest: Rest, namespace: str | None = None, job: str | None = None) -> list[dict[str, Any]]:
    """The pods of PyTorchJobs and Volcano Jobs (of the job named `job`), found as the controller finds them: by
    the labels their operators set."""
    pods = []
    for label in (contract.KUBEFLOW_JOB_NAME, contract.VOLCANO_JOB_NAME):
        pods += rest.list(PODS, namespace, labelSelector=label if job is None else f"{label}={job}")
    return pods


def tiny_workload(num_jobs: int = 8, num_nodes: int = 2, seed: int = 3) -> Workload:
    """Half all-reduce PyTorchJobs, half parameter-server Volcano Jobs, on 8-GPU nodes."""
    spec = replace(
        PRESETS["synthetic-small"], num_jobs=num_jobs, num_nodes=num_nodes, mapping=TraceMapping(allreduce_fraction=0.5)
    )
    return generate(spec, seed, "tiny")


@contextmanager
def twin(
    kube: KubeEnv,
    workload: Workload,
    config: SimConfig,
    placer: str = "load-balance",
    truth: Truth | None = None,
    **options: Any,
) -> Iterator[ClusterTwin]:
    """A started cluster twin on the session's control plane (its thread pool closed afterwards)."""
    running = start_twin(kube.twin_api(), workload, config, placer, TwinOptions(**options), truth)
    try:
        yield running
    finally:
        running.close()


def policy_object(mode: str = "active", version: str | None = "1", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"mode": mode, **spec}
    if version is not None:
        body["model"] = {"name": "dl2-policy", "version": version}
    return {"apiVersion": "dl2.io/v1alpha1", "kind": "SchedulerPolicy", "metadata": {"name": "default"}, "spec": body}


def create_policy(kube: KubeEnv, mode: str = "active", version: str | None = "1", **spec: Any) -> dict[str, Any]:
    from dl2.kube.policy import POLICIES

    return kube.rest().create(POLICIES, None, policy_object(mode, version, **spec))


def read_policy(kube: KubeEnv) -> dict[str, Any]:
    from dl2.kube.policy import POLICIES

    return kube.rest().get(POLICIES, None, "default")


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


def clock(rest: Rest) -> slot_clock.SlotClock:
    """The twin's clock as it is now."""
    parsed = slot_clock.parse_clock(rest.get(CONFIGMAPS, slot_clock.NAMESPACE, slot_clock.NAME).get("data"))
    assert parsed is not None, "the twin has published no slot yet"
    return parsed


def run_slot(controller: Any, rest: Rest) -> Any:
    """One slot of an in-process controller at the twin's clock (with its barrier), as `Controller.run` runs it."""
    now = clock(rest)
    return controller.run_slot(now.slot, now.time_s, now.slot_s, dict(now.resource_versions))


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
        from dl2.kube import contract
        from dl2.kube.rest import PYTORCHJOBS, VOLCANO_JOBS

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


# -- the controller (dl2 serve) as a process, killed and restarted ----------------------------------------------


def resize_requests(events: list[Any]) -> list[Any]:
    """The controller's resize requests that the API server accepted, from its audit log."""
    return [
        event
        for event in events
        if CONTROLLER_AGENT in event.user_agent
        and event.verb == "patch"
        and event.code < 300
        and (event.rbac_resource == "pytorchjobs" or (event.api_group, event.resource) == ("batch.volcano.sh", "jobs"))
    ]


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
        from dl2.twin.lockstep import clock_slot, reported_slot, run_lockstep

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
        """(slot, job name) -> resize requests the controller sent in that slot."""
        counts: Counter[tuple[int, str]] = Counter()
        end = self.kube.plane.audit_offset()
        marks = [*self.slot_marks, (10**9, end)]
        for (slot, first), (_, last) in itertools.pairwise(marks):
            events, _ = _audit_between(self.kube, first, last)
            for event in resize_requests(events):
                counts[(slot, event.name)] += 1
        return dict(counts)


def _audit_between(kube: KubeEnv, first: int, last: int) -> tuple[list[Any], int]:
    from dl2.controlplane.cluster import read_audit_log

    return read_audit_log(kube.plane.audit_log, first, last)


def uninterrupted_run(
    kube: KubeEnv, workload: Workload, config: SimConfig, folder: Path, loader: Any
) -> tuple[list[Any], dict[str, Any], dict[int, int]]:
    """A workload run in active mode by an in-process controller that is never killed: its records (the final
    slot's completed too), each job's finish time, and the resizes of each slot. What a run under kills must
    equal. The cluster is reset afterwards."""
    from dl2.core.log_format import read_log
    from dl2.kube.controller import Controller, ControllerConfig

    create_policy(kube, "active")
    settings = ControllerConfig("reference", decision_log=folder, clock="cluster")
    controller = Controller(kube.controller_api("reference"), settings, loader)
    try:
        with twin(kube, workload, config) as cluster:
            controller.refresh_policy(read_policy(kube))
            resizes = {}
            while True:
                report = run_slot(controller, cluster.rest)
                resizes[report.slot] = report.resizes
                if cluster.done:
                    break
                cluster.advance()
            run_slot(controller, cluster.rest)
            finish = {job.job_id: job.finish_s for job in cluster.result().jobs}
    finally:
        controller.cache.stop()
        controller.events.stop()
        kube.reset()
    return read_log(folder / "dl2-local"), finish, resizes
