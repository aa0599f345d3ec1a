"""The cluster twin: what cannot exist on one machine (training processes, their operators, GPUs), played against a
real API server by dl2's simulator, as a client like any controller.

Nodes are real Node objects run by kwok. Every slot (`advance`):
1. the twin lists the jobs and reads what each asks for now (its replicas, as a user or a controller set them;
   a job whose object is gone is cancelled and gets nothing; one deleted later in the slot, from then on),
   clamped to the job's limits;
2. it places the tasks: as dl2's placer does (`place_sticky`: running tasks stay; what fits nowhere stays
   Pending) and binds the pods itself (`pods/binding`, as a scheduler does), which is how every dl2 heuristic
   turns worker/PS counts into placements, so a client that sets a heuristic's counts gets that heuristic's run;
   or, with `TwinOptions.scheduler_name`, it leaves its pods to that kube-scheduler profile (an extender's, say)
   and takes the placement from where they were bound;
3. the simulator runs the slot in realistic mode (placement- and interference-dependent speed, noise, the cost of
   every change);
4. it writes the outcome as the operators and the training processes would: pods created and deleted (a resize),
   job status with replica counts, `dl2.io/progress-epochs` on every job that trained, finished jobs
   Succeeded/Completed and their pods removed;
5. the next slot begins: jobs that have arrived are created as a user submits them (their pods Pending until the
   slot places them); once kwok reports every bound pod Running (or the pod is gone: a deleted job's), the clock
   ConfigMap (`dl2.kube.clock`) is published last, naming the version of the last write of each resource the
   controller watches.

Writes of different jobs go out in parallel (`TwinOptions.parallel`). The twin authenticates as `dl2-twin`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from dl2.core import Allocation, Architecture, ClusterView, JobAllocation, JobSpec, Workload
from dl2.kube import clock as slot_clock
from dl2.kube import contract as c
from dl2.kube.informer import Informer
from dl2.kube.metrics import Metrics
from dl2.kube.rest import (
    CONFIGMAPS,
    KUBEFLOW_PODS,
    NAMESPACES,
    NODES,
    PYTORCHJOBS,
    SERVICEACCOUNTS,
    VOLCANO_JOBS,
    VOLCANO_PODS,
    Resource,
    Rest,
)
from dl2.schedulers.placement import Placer, place_sticky
from dl2.sim.config import Mode, SimConfig
from dl2.sim.metrics import RunMetrics, summarize
from dl2.sim.run import interference_model, speed_model
from dl2.sim.simulator import SimResult, Simulation
from dl2.workload.interference import InterferenceModel
from dl2.workload.speed import SpeedModel
from testbed.twin import manifests

TWIN_SCHEDULER = "dl2-twin"
"""The schedulerName of the twin's own pods: no kube-scheduler takes them, the twin binds them."""
POD_RESOURCES = {KUBEFLOW_PODS: c.KUBEFLOW_JOB_NAME, VOLCANO_PODS: c.VOLCANO_JOB_NAME}
"""The pods of each operator's jobs, as the controller watches them: by the operator's label."""
BARRIER_RESOURCES = (NAMESPACES, NODES, *POD_RESOURCES, PYTORCHJOBS, VOLCANO_JOBS)
"""What the controller watches, so what the clock's barrier names."""


@dataclass(frozen=True, slots=True)
class TwinOptions:
    """How the workload's jobs are submitted and scheduled."""

    namespaces: tuple[str, ...] = ("team-a", "team-b")
    """Managed namespaces (label `dl2.io/managed: "true"`); each job goes to one, drawn with `seed`."""
    kueue_fraction: float = 0.0
    """Share of jobs submitted to Kueue (label `kueue.x-k8s.io/queue-name`), drawn with `seed`."""
    kueue_queue: str = "user-queue"
    seed: int = 0
    """Seed of the namespace and Kueue draws (the simulation has its own, in `SimConfig`)."""
    system_namespace: str = slot_clock.NAMESPACE
    clock_name: str = slot_clock.NAME
    scheduler_name: str | None = None
    """None: the twin places and binds its pods; a name: that kube-scheduler profile does (`schedulerName`)."""
    scheduling_timeout_s: float = 30.0
    """With `scheduler_name`: how long a slot waits for the scheduler to bind or refuse each new pod."""
    parallel: int = 8
    """Requests in flight at once."""
    settle: bool = True
    """Before publishing a slot, wait until kwok reports every bound pod Running (as kubelets would have long
    before the next slot on a real cluster), and name kwok's last write in the clock's barrier."""
    settle_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if not self.namespaces:
            raise ValueError("a cluster twin needs at least one managed namespace")
        if not 0.0 <= self.kueue_fraction <= 1.0:
            raise ValueError(f"kueue_fraction must be in [0, 1], got {self.kueue_fraction}")
        if self.parallel < 1:
            raise ValueError(f"parallel must be at least 1, got {self.parallel}")


@dataclass(slots=True)
class _Job:
    """What the twin tracks of one workload job."""

    index: int
    spec: JobSpec
    name: str
    namespace: str
    resource: Resource
    kueue: bool
    uid: str = ""
    created: bool = False
    cancelled: bool = False
    started: bool = False
    finished: bool = False
    pods: dict[str, list[int | None]] = field(default_factory=lambda: {c.WORKER: [], c.PS: []})
    """Per role, pod i's node index (None: Pending)."""
    progress: float = 0.0
    """The progress last written on the object."""
    status: dict[str, Any] | None = None
    """The status last written."""

    @property
    def pods_resource(self) -> Resource:
        """Its pods, as the controller watches them (by its operator's label)."""
        return KUBEFLOW_PODS if self.resource is PYTORCHJOBS else VOLCANO_PODS


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ClusterTwin:
    def __init__(
        self,
        api: Any,
        workload: Workload,
        config: SimConfig,
        placer: Placer,
        options: TwinOptions | None = None,
        speed: SpeedModel | None = None,
        interference: InterferenceModel | None = None,
    ) -> None:
        """`api`: a `kubernetes.client.ApiClient` with the twin's credentials."""
        if config.mode is not Mode.REALISTIC:
            raise ValueError("the cluster twin runs realistic mode (pods have nodes, so placement matters)")
        self.rest = Rest(api)
        self.workload = workload
        self.config = config
        self.placer = placer
        self.options = options or TwinOptions()
        self.simulation = Simulation(
            workload, config, speed or speed_model(config.mode), interference or interference_model()
        )
        cluster = workload.cluster
        self.node_names = [manifests.node_name(cluster.name, n.node_id, cluster.num_nodes) for n in cluster.nodes]
        self.node_index = {name: i for i, name in enumerate(self.node_names)}
        rng = np.random.default_rng(self.options.seed)
        namespaces = rng.integers(0, len(self.options.namespaces), workload.num_jobs)
        kueue = rng.random(workload.num_jobs) < self.options.kueue_fraction
        self.jobs: dict[str, _Job] = {}
        for index, job in enumerate(workload.jobs):
            spec = job.spec
            resource = PYTORCHJOBS if spec.architecture is Architecture.ALLREDUCE else VOLCANO_JOBS
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
        self._pool = ThreadPoolExecutor(self.options.parallel, thread_name_prefix="dl2-twin")
        self._pods: dict[Resource, Informer] = {}
        if self.options.settle:
            self._pods = {
                resource: Informer(self.rest, resource, Metrics(), label_selector=label)
                for resource, label in POD_RESOURCES.items()
            }
        self.slot_seconds: list[float] = []
        """Wall time of each slot the twin ran (its writes included)."""

    @property
    def scheduler_name(self) -> str:
        return self.options.scheduler_name or TWIN_SCHEDULER

    # -- lifecycle ------------------------------------------------------------------------------------------

    def start(self) -> ClusterTwin:
        """Create the namespaces (waiting for their default ServiceAccount, which pods need), the nodes and the
        clock, and submit the jobs that arrive in the first slot."""
        for informer in self._pods.values():
            informer.start()
        system = self.options.system_namespace
        existing = {ns["metadata"]["name"] for ns in self.rest.list(NAMESPACES)}
        for name, managed in [(system, False), *((ns, True) for ns in self.options.namespaces)]:
            if name not in existing:
                self.rest.create(NAMESPACES, None, manifests.namespace(name, managed))
        self._parallel(
            lambda pair: self.rest.create(NODES, None, manifests.node(*pair)),
            list(zip(self.workload.cluster.nodes, self.node_names, strict=True)),
        )
        for name in self.options.namespaces:
            self._wait_for_service_account(name)
        self._wait_for_nodes()
        clock = {"metadata": {"name": self.options.clock_name}, "data": {}}
        self.rest.create(CONFIGMAPS, system, clock)
        self._begin_slot()
        return self

    def _wait_for_service_account(self, namespace: str, timeout_s: float = 30.0) -> None:
        """kube-controller-manager creates `default` in a new namespace; the ServiceAccount admission plugin
        refuses pods there until it exists."""
        deadline = time.monotonic() + timeout_s
        while not self.rest.list(SERVICEACCOUNTS, namespace, fieldSelector="metadata.name=default"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no ServiceAccount default in {namespace} after {timeout_s:g} s")
            time.sleep(0.05)

    def _wait_for_nodes(self, timeout_s: float | None = None) -> None:
        """Until kwok reports every node Ready and the node lifecycle controller has lifted the `not-ready` taint
        the API server puts on a new node: a kube-scheduler that saw the taint would refuse the first pods for it
        rather than for want of room. The default deadline grows with the nodes (kwok and the node lifecycle
        controller share one loaded API server: the 352 Philly nodes take minutes on two cores)."""
        names = set(self.node_names)
        timeout_s = 60.0 + 0.5 * len(names) if timeout_s is None else timeout_s
        started = time.monotonic()
        deadline = started + timeout_s
        while True:
            waiting = [
                node["metadata"]["name"]
                for node in self.rest.list(NODES)
                if node["metadata"]["name"] in names and not _schedulable(node)
            ]
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(waiting)} nodes not Ready after {timeout_s:g} s (first: {waiting[0]})")
            time.sleep(0.1 if time.monotonic() - started < 5 else 1.0)  # a LIST of every node is not free

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        for informer in self._pods.values():
            informer.stop()

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
        started = time.perf_counter()
        view = self._view
        assert view is not None, "start() the twin first"
        objects = self._job_objects()
        targets = [self._desired(job_view.spec.job_id, objects) for job_view in view.jobs]
        sim = self.simulation
        if all(self.jobs[j.spec.job_id].cancelled for j in view.jobs) and sim.next_arrival >= len(sim.specs):
            self._stopped = True  # only cancelled jobs are left: nothing will ever finish
            self._publish_clock()
            return
        if self.options.scheduler_name is None:
            allocation = place_sticky(view, targets, self.placer)
        else:
            allocation = self._scheduled(view, targets)
        outcome = sim.apply(allocation)
        finished = set(outcome.finished)
        now = _now()
        work = [
            (self.jobs[job_view.spec.job_id], allocation.get(job_view.spec.job_id), target)
            for job_view, target in zip(view.jobs, targets, strict=True)
        ]

        def sync(item: tuple[_Job, JobAllocation, tuple[int, int]]) -> None:
            job, placed, target = item
            self._unless_deleted(job, lambda: self._sync_job(job, placed, target, job.spec.job_id in finished, now))

        self._parallel(sync, work)
        if sim.done:
            self._view = None
            self._publish_clock()
        else:
            self._begin_slot()
        self.slot_seconds.append(time.perf_counter() - started)

    def _job_objects(self) -> dict[tuple[str, str], dict[str, Any]]:
        """The twin's jobs as they are now, by (namespace, name): one list per kind."""
        objects: dict[tuple[str, str], dict[str, Any]] = {}
        for resource in (PYTORCHJOBS, VOLCANO_JOBS):
            for obj in self.rest.list(resource, labelSelector=c.JOB_LABEL):
                metadata = obj["metadata"]
                objects[(metadata["namespace"], metadata["name"])] = obj
        return objects

    def _desired(self, job_id: str, objects: dict[tuple[str, str], dict[str, Any]]) -> tuple[int, int]:
        """What the job's object asks for now, within its limits; (0, 0) once the object is gone."""
        job = self.jobs[job_id]
        if not job.created:
            return 0, 0
        stored = objects.get((job.namespace, job.name))
        if stored is None or (stored["metadata"].get("uid") not in ("", job.uid)):
            if not job.cancelled:
                self._cancel(job)
            return 0, 0
        try:
            workers, ps = c.replicas(stored)
        except (c.ContractError, ValueError, TypeError):
            return 0, 0
        spec = job.spec
        workers = min(max(workers, 0), spec.max_workers)
        ps = min(max(ps, 0), spec.max_ps) if spec.architecture is Architecture.PS else 0
        return workers, ps

    def _cancel(self, job: _Job) -> None:
        """The job's object is gone (a user deleted it): it gets nothing from now on and its pods go (its
        operator's garbage collector takes them too: one already gone is fine)."""
        job.cancelled = True
        for role in job.pods:
            for index in range(len(job.pods[role])):
                self._delete_pod(job, role, index)
            job.pods[role] = []

    def _unless_deleted(self, job: _Job, write: Callable[[], None]) -> None:
        """`write` the job's objects; if one is not found because a user deleted the job since the slot listed it,
        the job is cancelled instead (it ran this slot, and gets nothing after)."""
        from kubernetes.client.exceptions import ApiException

        try:
            write()
        except ApiException as error:
            if error.status != 404 or not self._deleted(job):
                raise
            self._cancel(job)

    def _deleted(self, job: _Job) -> bool:
        """Is the job's object gone (or replaced by another of its name)? A write that found nothing asks."""
        from kubernetes.client.exceptions import ApiException

        try:
            stored = self.rest.get(job.resource, job.namespace, job.name)
        except ApiException as error:
            if error.status == 404:
                return True
            raise
        return bool(stored["metadata"].get("uid") not in ("", job.uid))

    def _begin_slot(self) -> None:
        view = self._view = self.simulation.begin_slot()
        arriving = [self.jobs[v.spec.job_id] for v in view.jobs if not self.jobs[v.spec.job_id].created]
        self._parallel(self._submit, arriving)
        self._publish_clock()

    def _submit(self, job: _Job) -> None:
        """Create the job as a user would; its operator creates its pods at once, Pending until a slot places
        them."""
        body = manifests.job(
            job.spec, job.name, job.namespace, self.options.kueue_queue if job.kueue else None, self.scheduler_name
        )
        stored = self.rest.create(job.resource, job.namespace, body)
        job.uid = stored["metadata"]["uid"]
        job.created = True
        self._unless_deleted(job, lambda: self._start_pods(job, stored))

    def _start_pods(self, job: _Job, stored: dict[str, Any]) -> None:
        """A new job's pods, Pending, and its first status (as its operator writes them)."""
        workers, ps = c.replicas(stored)
        spec = job.spec
        workers = min(workers, spec.max_workers)
        ps = min(ps, spec.max_ps) if spec.architecture is Architecture.PS else 0
        self._sync_pods(job, c.WORKER, [None] * workers)
        self._sync_pods(job, c.PS, [None] * ps)
        status = manifests.job_status(stored, {}, {c.WORKER: workers, c.PS: ps}, False, False, None, _now())
        self.rest.merge_patch(job.resource, job.namespace, job.name, {"status": status}, "status")
        job.status = status

    # -- placement by a kube-scheduler ----------------------------------------------------------------------

    def _scheduled(self, view: ClusterView, targets: list[tuple[int, int]]) -> Allocation:
        """Create the pods the targets add (Pending, for `scheduler_name`), delete the ones they drop, wait until
        the scheduler has bound or refused each new pod, and read where every pod is."""
        work = [(self.jobs[v.spec.job_id], target) for v, target in zip(view.jobs, targets, strict=True)]
        self._parallel(lambda item: self._resize_pending(*item), work)
        deadline = time.monotonic() + self.options.scheduling_timeout_s
        while True:
            pods = [pod for r, label in POD_RESOURCES.items() for pod in self.rest.list(r, labelSelector=label)]
            undecided = [pod for pod in pods if _undecided(pod)]
            if not undecided or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        placed: dict[tuple[str, str], dict[str, list[tuple[int, int]]]] = {}
        for pod in pods:
            metadata, labels = pod["metadata"], pod["metadata"].get("labels") or {}
            node = self.node_index.get((pod.get("spec") or {}).get("nodeName") or "")
            job_name, role = c.pod_job_role(labels) or ("", "")
            held = placed.setdefault((metadata["namespace"], job_name), {c.WORKER: [], c.PS: []})
            if node is not None and role in held:
                held[role].append((int(metadata["name"].rsplit("-", 1)[-1]), node))
        jobs = {}
        for v in view.jobs:
            job = self.jobs[v.spec.job_id]
            roles = placed.get((job.namespace, job.name), {c.WORKER: [], c.PS: []})
            for role, entries in roles.items():
                current = job.pods[role]
                for index, node in entries:
                    if index < len(current):
                        current[index] = node
            workers = tuple(n for _, n in sorted(roles[c.WORKER]))
            ps = tuple(n for _, n in sorted(roles[c.PS]))
            jobs[v.spec.job_id] = JobAllocation(workers, ps)
        return Allocation(jobs)

    def _resize_pending(self, job: _Job, target: tuple[int, int]) -> None:
        if job.cancelled or not job.created:
            return
        for role, count in zip((c.WORKER, c.PS), target, strict=True):
            current = job.pods[role]
            for index in range(len(current) - 1, count - 1, -1):
                self._delete_pod(job, role, index)
            for index in range(len(current), count):
                self._create_pod(job, role, index, None)
            job.pods[role] = current[:count] + [None] * max(0, count - len(current))

    # -- writing the outcome back ---------------------------------------------------------------------------

    def _sync_job(self, job: _Job, placed: JobAllocation, target: tuple[int, int], finished: bool, now: str) -> None:
        if job.cancelled or not job.created:
            return
        nodes = {c.WORKER: placed.worker_nodes, c.PS: placed.ps_nodes}
        counts = {c.WORKER: target[0], c.PS: target[1]}
        running = {role: 0 for role in nodes}
        pending = {role: 0 for role in nodes}
        for role in (c.WORKER, c.PS):
            if finished:
                running[role] = len(nodes[role])
                for index in range(len(job.pods[role])):
                    self._delete_pod(job, role, index)  # the job is done: its operator cleans its pods up
                job.pods[role] = []
                continue
            if self.options.scheduler_name is None:  # the twin places (a scheduler's pods were made in _scheduled)
                desired = [nodes[role][i] if i < len(nodes[role]) else None for i in range(counts[role])]
                self._sync_pods(job, role, desired)
            running[role] = sum(node is not None for node in job.pods[role])
            pending[role] = len(job.pods[role]) - running[role]
        job.started = job.started or running[c.WORKER] > 0
        job.finished = finished
        progress = float(self.simulation.progress[self.simulation.index_of[job.spec.job_id]])
        if progress != job.progress:
            annotation = {"metadata": {"annotations": {c.PROGRESS_EPOCHS: repr(progress)}}}
            self.rest.merge_patch(job.resource, job.namespace, job.name, annotation)
            job.progress = progress
        kind_of = {"kind": "PyTorchJob" if job.resource is PYTORCHJOBS else "Job", "metadata": {"name": job.name}}
        status = manifests.job_status(kind_of, running, pending, finished, job.started, job.status, now)
        if status != job.status:
            self.rest.merge_patch(job.resource, job.namespace, job.name, {"status": status}, "status")
            job.status = status

    def _sync_pods(self, job: _Job, role: str, desired: list[int | None]) -> None:
        """Make the pods of one role match `desired` (pod i on node desired[i], or Pending) with the fewest writes:
        scale-down deletes the highest indices, a Pending pod that found room is bound, a moved one restarts."""
        current = job.pods[role]
        for index in range(len(current) - 1, len(desired) - 1, -1):
            self._delete_pod(job, role, index)
        for index, node in enumerate(desired):
            if index >= len(current):
                self._create_pod(job, role, index, node)
            elif current[index] != node:
                name = manifests.pod_name(job.name, role, index)
                if current[index] is None and node is not None:
                    self.rest.bind(job.namespace, name, self.node_names[node], job.pods_resource)
                else:  # moved, or lost its place: a new pod (a restart of that task)
                    self._delete_pod(job, role, index)
                    self._create_pod(job, role, index, node)
        job.pods[role] = list(desired)

    def _create_pod(self, job: _Job, role: str, index: int, node: int | None) -> None:
        node_name = self.node_names[node] if node is not None else None
        body = manifests.pod(job.spec, job.name, job.namespace, job.resource.plural, job.uid, role, index, node_name,
                             self.scheduler_name)  # fmt: skip
        self.rest.create(job.pods_resource, job.namespace, body)

    def _delete_pod(self, job: _Job, role: str, index: int) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.rest.delete_now(job.pods_resource, job.namespace, manifests.pod_name(job.name, role, index))
        except ApiException as error:
            if error.status != 404:  # already gone (the garbage collector follows a deleted job's pods)
                raise

    def _settle(self) -> dict[str, int]:
        """Wait until each pod cache reflects the twin's writes and kwok has every bound pod Running; the version
        of each cache's newest change then, by barrier key (none without settling). Not the cache's version: that
        may be a bookmark's, which the controller's informer would only reach with its own bookmark."""
        if not self._pods:
            return {}
        for resource, informer in self._pods.items():
            informer.wait_for(self.rest.written.get(resource.key, 0), self.options.settle_timeout_s)
        bound = [
            (job.pods_resource, f"{job.namespace}/{manifests.pod_name(job.name, role, index)}")
            for job in self.jobs.values()
            for role, nodes in job.pods.items()
            for index, node in enumerate(nodes)
            if node is not None
        ]
        deadline = time.monotonic() + self.options.settle_timeout_s
        while time.monotonic() < deadline:
            pending = [(resource, key) for resource, key in bound if _starting(self._pods[resource].get(key))]
            if not pending:
                break
            bound = pending
            informer = self._pods[pending[0][0]]
            informer.wait_for(informer.version + 1, 0.2)
        return {resource.key: informer.changed_version for resource, informer in self._pods.items()}

    def _publish_clock(self) -> None:
        status = self.status()
        versions = {resource.key: self.rest.written.get(resource.key, 0) for resource in BARRIER_RESOURCES}
        for key, version in self._settle().items():
            versions[key] = max(versions[key], version)
        data = slot_clock.clock_data(status["slot"], status["time_s"], status["slot_s"], versions)
        for key in ("workload", "jobs", "arrived", "active", "finished", "cancelled", "done"):
            value = status[key]
            data[key] = str(value).lower() if isinstance(value, bool) else str(value)
        body = {"metadata": {"name": self.options.clock_name}, "data": data}
        self.rest.replace(CONFIGMAPS, self.options.system_namespace, self.options.clock_name, body)

    def _parallel(self, function: Callable[[Any], Any], items: list[Any]) -> None:
        """`function` over `items` on the pool (each item's requests in order, items at once); the first error is
        raised once all are done."""
        if len(items) <= 1:
            for item in items:
                function(item)
            return
        for future in [self._pool.submit(function, item) for item in items]:
            future.result()

    # -- reports --------------------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        sim = self.simulation
        return {
            "workload": self.workload.name,
            "slot": sim.slot,
            "time_s": sim.time_s,
            "slot_s": sim.slot_s,
            "jobs": len(self.jobs),
            "arrived": sim.next_arrival,
            "active": len(sim.active),
            "finished": sim.num_finished,
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
                    "kind": "PyTorchJob" if job.resource is PYTORCHJOBS else "Job",
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


def _schedulable(node: dict[str, Any]) -> bool:
    """Ready, and without the taints a node carries while it is not (`node.kubernetes.io/not-ready`, ...)."""
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    taints = (node.get("spec") or {}).get("taints") or []
    return ready and not any(str(t.get("key", "")).startswith("node.kubernetes.io/") for t in taints)


def _starting(pod: dict[str, Any] | None) -> bool:
    """A bound pod kwok has yet to report Running. One the cache (already past the twin's writes) does not hold,
    or one being deleted, was removed by someone else (the garbage collector after its job was deleted, a user)
    and will never run: waiting for it would hold the slot until the settle timeout."""
    if pod is None or pod["metadata"].get("deletionTimestamp"):
        return False
    return bool((pod.get("status") or {}).get("phase") != "Running")


def _undecided(pod: dict[str, Any]) -> bool:
    """A pod the scheduler has neither bound nor found unschedulable yet."""
    if (pod.get("spec") or {}).get("nodeName"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return not any(cond.get("type") == "PodScheduled" and cond.get("status") == "False" for cond in conditions)
