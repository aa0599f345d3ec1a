"""Decision records: one per job per slot, as the Kubernetes controller and the simulator log them.

A record is self-contained: with the cluster it came from, the records of one slot rebuild the scheduler's
view of that slot (the job's demands and limits are in the record), so the log can drive supervised warm-up
(the applied decisions are a teacher) and online fine-tuning (the observed progress is the reward). Where the
applied placement is recorded, the records of a slot also say which jobs shared which servers, and with the
observed progress they are samples of a speed-prediction model (`dl2.placement.samples`).
The log itself (append-only, atomic segments) is `dl2.sim.decision_log`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cache
from typing import Any, Literal

from dl2.core.cluster import ClusterSpec
from dl2.core.job import Architecture, JobSpec
from dl2.core.resources import Resources

FieldKind = Literal["text", "integer", "real", "nodes", "probability", "label", "totals", "types"]
"""'nodes': a list of node indices, optional (a log written without placement leaves it out); 'probability': a
number in (0, 1], optional (a log written without it was deterministic: 1); 'label': text that may be empty,
optional (empty); 'totals': an object of names to non-negative seconds or null (never), optional (empty); 'types':
a list of accelerator type names, '' for the reference accelerator, optional (empty)."""
Probability = float
"""A field's annotation for a probability (its kind is 'probability', not 'real')."""
Label = str
"""A field's annotation for optional text that may be empty (its kind is 'label', not 'text')."""
Totals = Mapping[str, float | None]
"""A field's annotation for seconds by name (its kind is 'totals'): None where the time is infinite."""
TypeNames = tuple[str, ...]
"""A field's annotation for accelerator type names, one per task (its kind is 'types')."""
JOB_STATE_FIELDS = (
    "job_id",
    "model",
    "architecture",
    "arrival_s",
    "declared_epochs",
    "samples_per_epoch",
    "worker_gpu",
    "worker_cpu",
    "worker_mem_gb",
    "ps_cpu",
    "ps_mem_gb",
    "max_workers",
    "max_ps",
    "progress_epochs",
    "held_workers",
    "held_ps",
)
"""The fields of a record that describe one job's state at the slot: what a policy is asked about (the columns of
`dl2-policy`'s MLflow input, one row per job)."""


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """One job's decision in one slot and what was observed afterwards."""

    time_s: float
    """Slot start, seconds since the log's origin."""
    slot_s: float
    """Slot length."""
    cluster: str
    """Which cluster the record comes from."""
    job_id: str
    model: str
    """Job type (catalogue model name)."""
    architecture: str
    """'ps' or 'allreduce'."""
    arrival_s: float
    declared_epochs: float
    samples_per_epoch: float
    worker_gpu: float
    worker_cpu: float
    worker_mem_gb: float
    ps_cpu: float
    ps_mem_gb: float
    max_workers: int
    max_ps: int
    progress_epochs: float
    """Epochs done at the start of the slot."""
    held_workers: int
    """Workers the job held in the previous slot."""
    held_ps: int
    model_version: str
    """Policy that proposed the decision (e.g. 'dl2-policy/3')."""
    incumbent: str
    """The scheduler the cluster would otherwise follow (e.g. 'drf')."""
    incumbent_workers: int
    incumbent_ps: int
    proposed_workers: int
    """What the policy proposed."""
    proposed_ps: int
    applied_workers: int
    """What was applied (after the mode and the guardrails)."""
    applied_ps: int
    mode: str
    """'shadow' (incumbent applied), 'canary' or 'active' (proposal applied where allowed), 'simulated'."""
    observed_epochs: float
    """Epoch progress observed during the slot."""
    applied_worker_nodes: tuple[int, ...] = ()
    """Nodes of the workers that ran through the slot, one entry per worker (a simulator's: the applied placement;
    a controller's: where the job's pods were bound, seen at the next slot, so fewer than applied while some were
    Pending). Empty where the log does not say: placement is then unknown (a job that finished within the slot)."""
    applied_ps_nodes: tuple[int, ...] = ()
    """Nodes of the applied parameter servers, one entry per PS."""
    applied_propensity: Probability = 1.0
    """Probability with which the applied (workers, PS) was drawn, given what was decided: below 1 where canary
    exploration moved or could have moved it (`dl2.schedulers.exploring`), what off-policy evaluation weighs by."""
    proposed_by: Label = ""
    """Where the proposing policy is a search over candidates (`dl2.rl.lookahead`): the candidates whose allocation
    the slot's proposal is, joined by '+' (all of them where they agreed); empty for a policy that decides alone."""
    predicted_total_s: Totals = field(default_factory=dict)
    """Where the search's candidates disagreed: per candidate, the total completion time (s) of the slot's active
    jobs that the continuation of its proposal predicted (null: it would never finish); the same in every record
    of the slot. Empty where they agreed or the policy decides alone."""
    applied_worker_accelerators: TypeNames = ()
    """Accelerator type of the node of each of `applied_worker_nodes`, aligned with it (`Accelerator.name`; '' for
    the reference accelerator). Empty where every one is the reference accelerator (so a homogeneous cluster's
    records read as they did before types were recorded) or the placement is unknown. Workers' only: parameter
    servers run on CPUs, so no accelerator changes their speed."""

    def to_json_dict(self) -> dict[str, Any]:
        # the fields as they are (JSON writes the node tuples as lists): `asdict`'s recursive copy costs ten times
        # more, which a controller writing thousands of records a slot feels
        return {name: getattr(self, name) for name in self.field_names()}

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return _names()

    @classmethod
    def field_kinds(cls) -> dict[str, FieldKind]:
        """Each field's kind, from its annotation: what every reader and writer of records checks."""
        return _kinds()

    def job_spec(self) -> JobSpec:
        """The job as the scheduler saw it (an all-reduce job requests no parameter servers)."""
        architecture = Architecture(self.architecture)
        return JobSpec(
            job_id=self.job_id,
            model=self.model,
            arrival_s=self.arrival_s,
            declared_epochs=self.declared_epochs,
            samples_per_epoch=self.samples_per_epoch,
            worker_demand=Resources(self.worker_gpu, self.worker_cpu, self.worker_mem_gb),
            ps_demand=Resources(0.0, self.ps_cpu, self.ps_mem_gb),
            max_workers=self.max_workers,
            max_ps=self.max_ps,
            architecture=architecture,
            requested_ps=0 if architecture is Architecture.ALLREDUCE else 1,
        )


@cache
def _names() -> tuple[str, ...]:
    return tuple(f.name for f in fields(DecisionRecord))


@cache
def _kinds() -> dict[str, FieldKind]:
    by_annotation: dict[str, FieldKind] = {
        "str": "text",
        "int": "integer",
        "float": "real",
        "tuple[int, ...]": "nodes",
        "Probability": "probability",
        "Label": "label",
        "Totals": "totals",
        "TypeNames": "types",
    }
    return {f.name: by_annotation[str(f.type)] for f in fields(DecisionRecord)}


def worker_accelerators(cluster: ClusterSpec, worker_nodes: tuple[int, ...]) -> tuple[str, ...]:
    """`DecisionRecord.applied_worker_accelerators` of workers on these nodes of `cluster`: each node's type name
    ('' for the reference accelerator), or empty where all are the reference accelerator."""
    names = tuple("" if (a := cluster.nodes[node].accelerator) is None else a.name for node in worker_nodes)
    return names if any(names) else ()
