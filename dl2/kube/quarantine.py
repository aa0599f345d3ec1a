"""Per-job quarantine: a job whose inputs cannot be true is left as it is, reported, and kept out of the policy.

Tenants write the annotations a job is decided on (and its training pods may patch their own progress), so one
job's inputs can be anything. A job that breaks the contract or whose values are out of range is quarantined:
it keeps its current size (dl2 never resizes it), what its pods hold is taken off the nodes the policy may give
to others, it gets no decision record (nothing unreal is written as if it were real), and it is reported (an
Event on the job, the SchedulerPolicy's status, the gauge `dl2_quarantined_jobs`). Every other job is decided as
usual; only what concerns the whole cluster (the model, the clock, the API, the record store) makes the
incumbent stand in for everyone (`dl2.kube.models`).

`job_problem` is pure: a parsed job and the cluster in, the cause and a message out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from dl2.core import ClusterSpec, JobSpec, Resources
from dl2.core.limits import MAX_EPOCHS, MAX_SAMPLES_PER_EPOCH, MAX_TASKS_PER_JOB

MAX_PROGRESS_RATIO = 2.0
"""A job this far past its declared epochs is outside what a policy was trained on (the decision-log suite's
bound, `validate.max_progress_ratio`)."""


class Cause(StrEnum):
    """Why a job is quarantined (the metric's `reason` label: few values, each a kind of problem)."""

    CONTRACT = "contract"
    """An annotation or field is missing, not a number, negative, infinite or not whole (`contract.ContractError`)."""
    DUPLICATE_ID = "duplicate-id"
    """Another job has the same job id (`dl2.io/job-id`, or the name)."""
    DECLARED_EPOCHS = "declared-epochs"
    """Declared epochs 0, or beyond `MAX_EPOCHS`."""
    SAMPLES = "samples-per-epoch"
    """Samples per epoch 0, or beyond `MAX_SAMPLES_PER_EPOCH`."""
    PROGRESS = "progress"
    """Progress past `MAX_PROGRESS_RATIO` times the declared epochs."""
    PROGRESS_BACKWARDS = "progress-backwards"
    """Progress below what the job's last decision record says (it went back, or a job was re-created under the
    same id): records must never go back (the decision-log suite refuses a log where they do)."""
    DEMAND = "demand"
    """A worker or parameter server that fits on no node."""
    SIZE = "size"
    """Task counts that contradict each other (asked or running above the maximum), beyond `MAX_TASKS_PER_JOB`,
    or asking for more than the whole cluster has."""


@dataclass(frozen=True, slots=True)
class Quarantined:
    """A job the controller leaves alone this slot, and why."""

    namespace: str
    name: str
    cause: Cause
    message: str
    obj: dict[str, Any]
    """The object as read (the Event's subject; never mutated)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def describe(self) -> str:
        """`namespace/name: cause: message`, as the SchedulerPolicy's status lists it."""
        return f"{self.key}: {self.cause.value}: {self.message}"


@dataclass(frozen=True, slots=True)
class Room:
    """What a cluster could give one job: the node capacities that no other node's exceeds (a task fits on some
    node iff it fits on one of these: few, however many nodes there are), and the cluster's total."""

    largest: tuple[Resources, ...]
    total: Resources

    @classmethod
    def of(cls, cluster: ClusterSpec) -> Room:
        distinct = {node.capacity.as_tuple() for node in cluster.nodes}
        largest = [
            capacity
            for capacity in distinct
            if not any(
                other != capacity and all(a <= b for a, b in zip(capacity, other, strict=True)) for other in distinct
            )
        ]
        return cls(tuple(Resources(*capacity) for capacity in sorted(largest)), cluster.total_capacity)

    def fits_a_node(self, demand: Resources) -> bool:
        return any(demand.fits_in(capacity) for capacity in self.largest)


def job_problem(
    spec: JobSpec,
    progress_epochs: float,
    replicas: tuple[int, int],
    room: Room,
    recorded_epochs: float | None = None,
) -> tuple[Cause, str] | None:
    """Why a job's inputs are out of range (cause, message), or None. `replicas`: (workers, PS) its spec asks for
    now; `room`: the cluster's (`Room.of`); `recorded_epochs`: its progress in its last decision record, if any."""
    declared = spec.declared_epochs
    if not 0 < declared <= MAX_EPOCHS:
        return Cause.DECLARED_EPOCHS, f"{declared:g} declared epochs, outside (0, {MAX_EPOCHS:g}]"
    if not 0 < spec.samples_per_epoch <= MAX_SAMPLES_PER_EPOCH:
        return Cause.SAMPLES, f"{spec.samples_per_epoch:g} samples per epoch, outside (0, {MAX_SAMPLES_PER_EPOCH:g}]"
    if not (math.isfinite(progress_epochs) and progress_epochs >= 0):
        return Cause.PROGRESS, f"progress {progress_epochs} epochs"
    if progress_epochs > MAX_PROGRESS_RATIO * declared:
        over = f"over {MAX_PROGRESS_RATIO:g}x the {declared:g} declared"
        return Cause.PROGRESS, f"{progress_epochs:g} epochs done, {over}"
    if recorded_epochs is not None and progress_epochs < recorded_epochs:
        return (
            Cause.PROGRESS_BACKWARDS,
            f"{progress_epochs:g} epochs done, below the {recorded_epochs:g} its last decision record has (progress "
            f"went back, or the job was re-created under the same id); decided again once it passes them",
        )
    return _size_problem(spec, replicas, room)


def _size_problem(spec: JobSpec, replicas: tuple[int, int], room: Room) -> tuple[Cause, str] | None:
    """Task counts and demands: what no cluster of this shape could give, or counts that contradict each other. A
    cluster without nodes (yet) says nothing about one job."""
    if room.largest and not room.fits_a_node(spec.worker_demand):
        return Cause.DEMAND, f"a worker needs {_amounts(spec.worker_demand)}, more than any node has"
    if room.largest and spec.max_ps > 0 and not room.fits_a_node(spec.ps_demand):
        return Cause.DEMAND, f"a parameter server needs {_amounts(spec.ps_demand)}, more than any node has"
    for role, limit in (("workers", spec.max_workers), ("parameter servers", spec.max_ps)):
        if limit > MAX_TASKS_PER_JOB:
            return Cause.SIZE, f"at most {limit} {role}, beyond the {MAX_TASKS_PER_JOB} a job may have"
    asked = (("requested", spec.requested_workers, spec.requested_ps), ("running", *replicas))
    for what, workers, ps in asked:
        if workers > spec.max_workers or ps > spec.max_ps:
            return (
                Cause.SIZE,
                f"{what} {workers} workers / {ps} PS, above its maximum of {spec.max_workers} / {spec.max_ps}",
            )
    for role, count, demand in (("workers", spec.requested_workers, spec.worker_demand),
                                ("parameter servers", spec.requested_ps, spec.ps_demand)):  # fmt: skip
        whole = demand.scaled(count)
        if room.largest and not whole.fits_in(room.total):
            return (
                Cause.SIZE,
                f"asks for {count} {role}: {_amounts(whole)}, more than the cluster has ({_amounts(room.total)})",
            )
    return None


def _amounts(resources: Resources) -> str:
    return f"{resources.gpu:g} GPU, {resources.cpu:g} CPU, {resources.mem_gb:g} GiB"


def reserved(cluster: ClusterSpec, held: Mapping[int, Resources]) -> ClusterSpec:
    """The cluster with what quarantined jobs hold (`held`: node index -> their pods' requests) taken off each node:
    the policy may not give it to other jobs."""
    if not held:
        return cluster
    nodes = []
    for node in cluster.nodes:
        taken = held.get(node.node_id)
        if taken is not None:
            left = node.capacity - taken
            node = replace(node, capacity=Resources(*(max(v, 0.0) for v in left.as_tuple())))  # its type kept
        nodes.append(node)
    return ClusterSpec(tuple(nodes), cluster.name)


class RecordedProgress:
    """Job id -> its progress in its decision records, for the `PROGRESS_BACKWARDS` check: what a job's progress is
    compared with at slot t is its record of the last slot *before* t in which it was decided, never t's own.

    Slot t's own record (its journal, written before anything is resized) may come back at t: a controller that
    restarts within the slot, or the replica that takes over, finds the journal and replays it; a slot retried
    after a failure does too. Its progress was read from the job's metrics (Prometheus) where they were ahead of
    the annotation; on the replay during an outage of that source, the progress read is the annotation's, lower,
    and comparing it with t's record would quarantine a job whose progress never went back. So the last two slots
    of each job are kept, and `before(t)` answers from the latest that is older than t."""

    def __init__(self) -> None:
        self._slots: dict[str, tuple[tuple[float, int], tuple[float, int] | None]] = {}
        """Job id -> ((epochs, slot) of its latest record, (epochs, slot) of the one of the slot before, if any)."""

    def note(self, job_id: str, epochs: float, slot: int) -> None:
        """A record of `job_id` at `slot` (a later note of the same slot replaces the earlier: one record a slot)."""
        kept = self._slots.get(job_id)
        if kept is None:
            self._slots[job_id] = ((epochs, slot), None)
        elif kept[0][1] == slot:
            self._slots[job_id] = ((epochs, slot), kept[1])
        elif kept[0][1] < slot:
            self._slots[job_id] = ((epochs, slot), kept[0])
        elif kept[1] is None or kept[1][1] <= slot:  # an older slot noted late (journals read in any order)
            self._slots[job_id] = (kept[0], (epochs, slot))

    def before(self, slot: int) -> dict[str, float]:
        """Job id -> its progress in its latest record of a slot before `slot`."""
        recorded = {}
        for job_id, (latest, earlier) in self._slots.items():
            if latest[1] < slot:
                recorded[job_id] = latest[0]
            elif earlier is not None and earlier[1] < slot:
                recorded[job_id] = earlier[0]
        return recorded

    def at(self, slot: int) -> dict[str, float]:
        """Job id -> its progress in its record of `slot` itself (jobs not decided then are left out): at slot t,
        what each job did over slot t - 1 is its progress now less `at(t - 1)`."""
        recorded = {}
        for job_id, (latest, earlier) in self._slots.items():
            if latest[1] == slot:
                recorded[job_id] = latest[0]
            elif earlier is not None and earlier[1] == slot:
                recorded[job_id] = earlier[0]
        return recorded

    def forget_before(self, slot: int) -> None:
        """Forget the jobs whose latest record is older than `slot`."""
        for job_id in [job_id for job_id, ((_, at), _) in self._slots.items() if at < slot]:
            del self._slots[job_id]
