"""A simulated cluster behind the local API server: dl2's simulator plays the operators, kube-scheduler, the
kubelets and the training processes.

Every slot (`advance`):
1. the cluster reads what each job asks for now (its replicas, as a user or a controller set them through the
   API; a job whose object was deleted is cancelled and gets nothing), clamped to the job's limits;
2. "kube-scheduler" places the tasks with one of dl2's placers (`place_sticky`: running tasks stay where they
   are; tasks that fit nowhere stay Pending), which is how every dl2 heuristic turns worker/PS counts into
   placements in realistic mode, so a client that sets the counts a heuristic decides gets the heuristic's run;
3. the simulator runs the slot in realistic mode (placement- and interference-dependent speed, noise, the
   rescale cost of every change);
4. "the operators and kubelets" write the outcome back: pods created, bound, deleted (a resize), Running,
   Succeeded; job status with replica counts; `dl2.io/progress-epochs` on every job that trained; finished jobs
   Succeeded/Completed;
5. the next slot begins: jobs that have arrived are created through the API as a user would submit them (their
   pods at once, Pending until the slot places them), and the clock ConfigMap (`dl2-system/dl2-clock`:
   `time_s`, `slot`, `slot_s`, ...) moves on.

All of it runs on the server's event loop (through `Verbs`, so the writes produce the same resource versions and
watch events as a client's); `ClusterHandle` calls it from other threads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dl2.core import Allocation, Architecture, ClusterView, JobSpec, Workload
from dl2.kube.apiserver import contract as c
from dl2.kube.apiserver.resources import ResourceType
from dl2.kube.apiserver.sim import manifests
from dl2.kube.apiserver.verbs import MERGE_PATCH, Verbs
from dl2.schedulers.placement import Placer, place_sticky
from dl2.sim.config import Mode, SimConfig
from dl2.sim.metrics import RunMetrics, summarize
from dl2.sim.run import interference_model, speed_model
from dl2.sim.simulator import SimResult, Simulation
from dl2.workload.interference import InterferenceModel
from dl2.workload.speed import SpeedModel


@dataclass(frozen=True, slots=True)
class ClusterOptions:
    """How the workload's jobs are submitted."""

    namespaces: tuple[str, ...] = ("team-a", "team-b")
    """Managed namespaces (label `dl2.io/managed: "true"`); each job goes to one, drawn with `seed`."""
    kueue_fraction: float = 0.0
    """Share of jobs submitted to Kueue (label `kueue.x-k8s.io/queue-name`), drawn with `seed`."""
    kueue_queue: str = "user-queue"
    seed: int = 0
    """Seed of the namespace and Kueue draws (the simulation has its own, in `SimConfig`)."""
    system_namespace: str = "dl2-system"
    clock_name: str = "dl2-clock"

    def __post_init__(self) -> None:
        if not self.namespaces:
            raise ValueError("a simulated cluster needs at least one managed namespace")
        if not 0.0 <= self.kueue_fraction <= 1.0:
            raise ValueError(f"kueue_fraction must be in [0, 1], got {self.kueue_fraction}")


@dataclass(slots=True)
class _Job:
    """What the cluster tracks of one workload job."""

    index: int
    spec: JobSpec
    name: str
    namespace: str
    resource: ResourceType
    kueue: bool
    created: bool = False
    cancelled: bool = False
    started: bool = False
    finished: bool = False
    pods: dict[str, list[int | None]] = field(default_factory=lambda: {c.WORKER: [], c.PS: []})
    """Per role, pod i's node index (None: Pending)."""
    progress: float = 0.0
    """The progress last written on the object."""


class SimulatedCluster:
    def __init__(
        self,
        verbs: Verbs,
        workload: Workload,
        config: SimConfig,
        placer: Placer,
        options: ClusterOptions | None = None,
        speed: SpeedModel | None = None,
        interference: InterferenceModel | None = None,
    ) -> None:
        if config.mode is not Mode.REALISTIC:
            raise ValueError("the simulated cluster runs realistic mode (pods have nodes, so placement matters)")
        self.verbs = verbs
        self.workload = workload
        self.config = config
        self.placer = placer
        self.options = options or ClusterOptions()
        self.simulation = Simulation(
            workload, config, speed or speed_model(config.mode), interference or interference_model()
        )
        registry = verbs.registry
        self._pytorchjobs = _installed(registry.lookup(*c.PYTORCHJOB), "kubeflow.org_pytorchjobs.yaml")
        self._vcjobs = _installed(registry.lookup(*c.VOLCANO_JOB), "batch.volcano.sh_jobs.yaml")
        self._pods = _installed(registry.lookup("", "v1", "pods"), "")
        self._nodes = _installed(registry.lookup("", "v1", "nodes"), "")
        self._namespaces = _installed(registry.lookup("", "v1", "namespaces"), "")
        self._configmaps = _installed(registry.lookup("", "v1", "configmaps"), "")
        cluster = workload.cluster
        self.node_names = [manifests.node_name(cluster.name, n.node_id, cluster.num_nodes) for n in cluster.nodes]
        rng = np.random.default_rng(self.options.seed)
        namespaces = rng.integers(0, len(self.options.namespaces), workload.num_jobs)
        kueue = rng.random(workload.num_jobs) < self.options.kueue_fraction
        self.jobs: dict[str, _Job] = {}
        for index, job in enumerate(workload.jobs):
            spec = job.spec
            resource = self._pytorchjobs if spec.architecture is Architecture.ALLREDUCE else self._vcjobs
            self.jobs[spec.job_id] = _Job(
                index,
                spec,
                manifests.job_name(index, workload.num_jobs, spec.model),
                self.options.namespaces[int(namespaces[index])],
                resource,
                bool(kueue[index]),
            )
        self._view: ClusterView | None = None
        self._stopped = False

    # -- lifecycle ------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Create the namespaces, nodes and clock, and submit the jobs that arrive in the first slot."""
        system = self.options.system_namespace
        for name, managed in [(system, False), *((ns, True) for ns in self.options.namespaces)]:
            if self.verbs.store.get(self._namespaces, "", name) is None:
                self.verbs.create(self._namespaces, None, manifests.namespace(name, managed))
        for spec, name in zip(self.workload.cluster.nodes, self.node_names, strict=True):
            self.verbs.create(self._nodes, None, manifests.node(spec, name))
        self.verbs.create(self._configmaps, system, {"metadata": {"name": self.options.clock_name}, "data": {}})
        self._begin_slot()

    @property
    def done(self) -> bool:
        return self._stopped or self.simulation.done

    def advance(self, slots: int = 1) -> dict[str, Any]:
        """Run `slots` simulated slots (fewer if the workload finishes); returns `status()`."""
        for _ in range(slots):
            if self.done:
                break
            self._step()
        return self.status()

    def run_to_end(self, max_slots: int | None = None) -> dict[str, Any]:
        slots = 0
        while not self.done and (max_slots is None or slots < max_slots):
            self._step()
            slots += 1
        return self.status()

    # -- one slot -------------------------------------------------------------------------------------------

    def _step(self) -> None:
        view = self._view
        assert view is not None, "start() the cluster first"
        targets = [self._desired(job_view.spec.job_id) for job_view in view.jobs]
        sim = self.simulation
        if all(self.jobs[j.spec.job_id].cancelled for j in view.jobs) and sim.next_arrival >= len(sim.specs):
            self._stopped = True  # only cancelled jobs are left: nothing will ever finish
            self._publish_clock()
            return
        allocation = place_sticky(view, targets, self.placer)
        outcome = sim.apply(allocation)
        now = self.verbs.now()
        finished = set(outcome.finished)
        for job_view, target in zip(view.jobs, targets, strict=True):
            self._sync_job(self.jobs[job_view.spec.job_id], allocation, target, job_view.spec.job_id in finished, now)
        if sim.done:
            self._view = None
            self._publish_clock()
        else:
            self._begin_slot()

    def _desired(self, job_id: str) -> tuple[int, int]:
        """What the job's object asks for now, within its limits; (0, 0) once the object is gone."""
        job = self.jobs[job_id]
        stored = self.verbs.store.get(job.resource, job.namespace, job.name)
        if stored is None:
            if not job.cancelled:
                job.cancelled = True
                self._delete_pods(job)
            return 0, 0
        try:
            workers, ps = c.replicas(stored.raw)
        except (c.ContractError, ValueError, TypeError):
            return 0, 0
        spec = job.spec
        workers = min(max(workers, 0), spec.max_workers)
        ps = min(max(ps, 0), spec.max_ps) if spec.architecture is Architecture.PS else 0
        return workers, ps

    def _begin_slot(self) -> None:
        view = self._view = self.simulation.begin_slot()
        for job_view in view.jobs:
            job = self.jobs[job_view.spec.job_id]
            if not job.created:
                self._submit(job)
        self._publish_clock()

    def _submit(self, job: _Job) -> None:
        body = manifests.job(job.spec, job.name, job.namespace, self.options.kueue_queue if job.kueue else None)
        stored = self.verbs.create(job.resource, job.namespace, body)
        job.created = True
        now = self.verbs.now()
        # the operator creates the job's pods at once; they stay Pending until the next slot places them
        workers, ps = self._desired(job.spec.job_id)
        self._sync_pods(job, stored.raw, c.WORKER, [None] * workers, now)
        self._sync_pods(job, stored.raw, c.PS, [None] * ps, now)
        status = manifests.job_status(stored.raw, {}, {c.WORKER: workers, c.PS: ps}, False, False, None, now)
        self.verbs.replace(job.resource, job.namespace, job.name, {"status": status}, "status")

    def pending_pod(self, spec: JobSpec, is_ps: bool) -> dict[str, Any]:
        """The Pending pod of the job's next worker or PS, as the scheduler would read it from the API."""
        job = self.jobs[spec.job_id]
        stored = self.verbs.store.get(job.resource, job.namespace, job.name)
        assert stored is not None, "a job whose object is gone asks for no tasks"
        role = c.PS if is_ps else c.WORKER
        return manifests.pod(spec, stored.raw, role, len(job.pods[role]), None, self.verbs.now())

    # -- writing the outcome back ---------------------------------------------------------------------------

    def _sync_job(self, job: _Job, allocation: Allocation, target: tuple[int, int], finished: bool, now: str) -> None:
        if job.cancelled:
            return
        stored = self.verbs.store.get(job.resource, job.namespace, job.name)
        if stored is None:
            return
        placed = allocation.get(job.spec.job_id)
        nodes = {c.WORKER: placed.worker_nodes, c.PS: placed.ps_nodes}
        counts = {c.WORKER: target[0], c.PS: target[1]}
        running = {role: 0 for role in nodes}
        pending = {role: 0 for role in nodes}
        for role in (c.WORKER, c.PS):
            desired: list[int | None] = [nodes[role][i] if i < len(nodes[role]) else None for i in range(counts[role])]
            if finished:
                desired = [node for node in desired if node is not None]
            self._sync_pods(job, stored.raw, role, desired, now)
            running[role] = sum(node is not None for node in desired)
            pending[role] = len(desired) - running[role]
            if finished:
                for index in range(len(desired)):
                    name = manifests.pod_name(job.name, role, index)
                    body = {"status": manifests.pod_status("Succeeded", now, manifests.image(job.spec))}
                    self.verbs.replace(self._pods, job.namespace, name, body, "status")
        job.started = job.started or running[c.WORKER] > 0
        job.finished = finished
        index = self.simulation.index_of[job.spec.job_id]
        progress = self.simulation.progress[index]
        if progress != job.progress:
            annotation = {"metadata": {"annotations": {c.PROGRESS_EPOCHS: repr(float(progress))}}}
            stored = self.verbs.patch(job.resource, job.namespace, job.name, MERGE_PATCH, annotation)
            job.progress = progress
        status = manifests.job_status(
            stored.raw, running, pending, finished, job.started, stored.raw.get("status"), now
        )
        if status != stored.raw.get("status"):
            self.verbs.replace(job.resource, job.namespace, job.name, {"status": status}, "status")

    def _sync_pods(self, job: _Job, job_object: dict[str, Any], role: str, desired: list[int | None], now: str) -> None:
        """Make the pods of one role match `desired` (pod i on node desired[i], or Pending) with the fewest writes:
        scale-down deletes the highest indices, a Pending pod that found room is bound."""
        current = job.pods[role]
        for index in range(len(current) - 1, len(desired) - 1, -1):
            self._delete_pod(job, role, index)
        for index, node in enumerate(desired):
            if index >= len(current):
                self._create_pod(job, job_object, role, index, node, now)
            elif current[index] != node:
                name = manifests.pod_name(job.name, role, index)
                if current[index] is None and node is not None:
                    body = {"target": {"kind": "Node", "name": self.node_names[node]}}
                    self.verbs.bind(self._pods, job.namespace, name, body)
                    status = {"status": manifests.pod_status("Running", now, manifests.image(job.spec))}
                    self.verbs.replace(self._pods, job.namespace, name, status, "status")
                else:  # moved, or lost its place: a new pod (a restart of that task)
                    self._delete_pod(job, role, index)
                    self._create_pod(job, job_object, role, index, node, now)
        job.pods[role] = list(desired)

    def _create_pod(
        self, job: _Job, job_object: dict[str, Any], role: str, index: int, node: int | None, now: str
    ) -> None:
        node_name = self.node_names[node] if node is not None else None
        self.verbs.create(self._pods, job.namespace, manifests.pod(job.spec, job_object, role, index, node_name, now))

    def _delete_pod(self, job: _Job, role: str, index: int) -> None:
        name = manifests.pod_name(job.name, role, index)
        if self.verbs.store.get(self._pods, job.namespace, name) is not None:
            self.verbs.delete(self._pods, job.namespace, name)

    def _delete_pods(self, job: _Job) -> None:
        """Pods of a deleted job go with it (a real cluster's garbage collector follows their owner reference)."""
        for role, nodes in job.pods.items():
            for index in range(len(nodes)):
                self._delete_pod(job, role, index)
            job.pods[role] = []

    def _publish_clock(self) -> None:
        status = self.status()
        data = {key: str(value).lower() if isinstance(value, bool) else str(value) for key, value in status.items()}
        data["time_s"] = repr(float(status["time_s"]))
        data["slot_s"] = repr(float(status["slot_s"]))
        self.verbs.replace(
            self._configmaps,
            self.options.system_namespace,
            self.options.clock_name,
            {"metadata": {"name": self.options.clock_name}, "data": data},
        )

    # -- reports --------------------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        sim = self.simulation
        finished = sim.num_finished
        return {
            "workload": self.workload.name,
            "slot": sim.slot,
            "time_s": sim.time_s,
            "slot_s": sim.slot_s,
            "jobs": len(self.jobs),
            "arrived": sim.next_arrival,
            "active": len(sim.active),
            "finished": finished,
            "cancelled": sum(job.cancelled for job in self.jobs.values()),
            "done": self.done,
        }

    def job_results(self) -> list[dict[str, Any]]:
        """Every workload job: where it is, when it arrived and finished, its JCT (None while unfinished)."""
        sim = self.simulation
        results = []
        for job in self.jobs.values():
            i = sim.index_of[job.spec.job_id]
            finish = sim.finish_s[i]
            results.append(
                {
                    "job_id": job.spec.job_id,
                    "name": job.name,
                    "namespace": job.namespace,
                    "kind": job.resource.kind,
                    "kueue": job.kueue,
                    "arrival_s": job.spec.arrival_s,
                    "finish_s": finish,
                    "jct_s": None if finish is None else finish - job.spec.arrival_s,
                    "num_rescales": sim.num_rescales[i],
                    "cancelled": job.cancelled,
                }
            )
        return results

    def result(self, scheduler_name: str = "through-the-api") -> SimResult:
        """The finished run, as `dl2 simulate` reports one (`summarize` gives its metrics)."""
        return self.simulation.result(scheduler_name)

    def metrics(self, scheduler_name: str = "through-the-api") -> RunMetrics:
        return summarize(self.result(scheduler_name))


def _installed(resource: ResourceType | None, crd_file: str) -> ResourceType:
    if resource is None:
        raise ValueError(f"install the CRD {crd_file} (k8s/third-party/) before starting a simulated cluster")
    return resource


class ClusterHandle:
    """Thread-safe access to a `SimulatedCluster` running on a server's loop (each call runs there)."""

    def __init__(self, cluster: SimulatedCluster, call: Callable[..., Any]) -> None:
        self.cluster = cluster
        self._call = call

    def advance(self, slots: int = 1) -> dict[str, Any]:
        status: dict[str, Any] = self._call(self.cluster.advance, slots)
        return status

    def run_to_end(self, max_slots: int | None = None) -> dict[str, Any]:
        status: dict[str, Any] = self._call(self.cluster.run_to_end, max_slots)
        return status

    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = self._call(self.cluster.status)
        return status

    def job_results(self) -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = self._call(self.cluster.job_results)
        return results

    @property
    def done(self) -> bool:
        done: bool = self._call(lambda: self.cluster.done)
        return done

    def result(self, scheduler_name: str = "through-the-api") -> SimResult:
        result: SimResult = self._call(self.cluster.result, scheduler_name)
        return result
