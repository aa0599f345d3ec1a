"""The decision log: append-only JSON Lines in atomic segments, and runs that write it.

A log is a folder of segments `segment-<first slot>-<n>.jsonl`, each written to a temporary name and renamed
into place, so a reader never sees half a segment and a crash loses at most the segment being written.
`log_run` plays the role of a cluster in simulation: each slot the incumbent heuristic and the proposing policy
both decide, the mode says which is applied, and the observed progress is recorded. The Kubernetes controller
writes the same records from a real cluster.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dl2.core import (
    Allocation,
    ClusterSpec,
    ClusterView,
    DecisionRecord,
    InputError,
    InvalidAllocationError,
    JobAllocation,
    JobView,
    NodeSpec,
    Resources,
    Scheduler,
    Workload,
)
from dl2.core.inputs import decode, parse_json, read_json, read_lines
from dl2.core.limits import MAX_NODE_CAPACITY, MAX_NODES, MAX_TASKS_PER_JOB
from dl2.sim.config import SimConfig
from dl2.sim.simulator import Simulation
from dl2.workload.interference import InterferenceModel
from dl2.workload.speed import SpeedModel

if TYPE_CHECKING:
    from dl2.sim.record_store import RecordStore

MODES = ("shadow", "canary", "active", "simulated")
MAX_TEXT = 256
"""Longest text field of a record (ids, names, versions)."""
MAX_COUNT = MAX_TASKS_PER_JOB
"""Largest task count of a record (held, proposed, applied, limits)."""


NODE_FIELDS = tuple(name for name, kind in DecisionRecord.field_kinds().items() if kind == "nodes")
"""Lists of node indices; optional (a log written without placement leaves them out)."""
CLUSTER_FILE = "cluster.json"
"""Next to a log's segments: the cluster its records come from (records name it, but fine-tuning needs its
nodes)."""


def write_segment(directory: Path, records: Sequence[DecisionRecord], first_slot: int) -> Path | None:
    """Append records as one new segment (atomically); returns its path (None for no records)."""
    if not records:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    existing = len(list(directory.glob("segment-*.jsonl")))
    path = directory / f"segment-{first_slot:09d}-{existing:06d}.jsonl"
    _write_lines(path, records, overwrite=True)
    return path


def segment_name(slot: int) -> str:
    """The segment of one slot's records, written once (the controller's log, in any store): a writer that
    restarts and writes the same slot again adds nothing."""
    return f"segment-{slot:09d}-000000.jsonl"


def records_text(records: Sequence[DecisionRecord]) -> str:
    """Records as JSON Lines, the text of a segment."""
    return "".join(json.dumps(record.to_json_dict(), sort_keys=True) + "\n" for record in records)


def _write_lines(path: Path, records: Sequence[DecisionRecord], overwrite: bool) -> bool:
    return write_file(path, records_text(records), overwrite)


def write_file(path: Path, text: str, overwrite: bool = True) -> bool:
    """Write to a temporary file, fsync, then rename into place (or link, which refuses to replace): a reader
    sees the whole file or none of it. False if `path` was already there and `overwrite` is off."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, 0o644)
        if overwrite:
            os.replace(temporary, path)
            return True
        try:
            os.link(temporary, path)
        except FileExistsError:
            return False
        return True
    finally:
        Path(temporary).unlink(missing_ok=True)


def cluster_to_json(cluster: ClusterSpec) -> dict[str, Any]:
    """The cluster description written as `cluster.json` next to a log."""
    nodes = [
        {"gpu": n.capacity.gpu, "cpu": n.capacity.cpu, "mem_gb": n.capacity.mem_gb, "kind": n.kind}
        for n in cluster.nodes
    ]
    return {"name": cluster.name, "nodes": nodes}


def cluster_from_json(data: Any, where: str) -> ClusterSpec:
    """A `cluster.json` document as a cluster: a name and 1 to `MAX_NODES` nodes of bounded capacities."""
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"]:
        raise InputError(where, "expected an object with a name and nodes", field="name")
    nodes = data.get("nodes")
    if not isinstance(nodes, list) or not 1 <= len(nodes) <= MAX_NODES:
        raise InputError(where, f"expected a list of 1 to {MAX_NODES:,} nodes", field="nodes")
    specs = []
    for index, node in enumerate(nodes):
        if not isinstance(node, dict) or not isinstance(node.get("kind"), str):
            raise InputError(where, "expected an object with gpu, cpu, mem_gb and kind", row=index + 1, field="nodes")
        amounts = []
        for name in ("gpu", "cpu", "mem_gb"):
            value = node.get(name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InputError(where, f"expected a number, got {value!r:.80}", row=index + 1, field=name)
            if not (math.isfinite(value) and 0 <= value <= MAX_NODE_CAPACITY):
                raise InputError(where, f"must be from 0 to {MAX_NODE_CAPACITY:g}, got {value:.6g}", row=index + 1,
                                 field=name)  # fmt: skip
            amounts.append(float(value))
        specs.append(NodeSpec(index, Resources(*amounts), node["kind"]))
    return ClusterSpec(tuple(specs), data["name"])


def read_cluster(path: Path) -> ClusterSpec:
    """A log's `cluster.json`."""
    return cluster_from_json(read_json(path), str(path))


def segments(location: Path) -> list[Path]:
    """The log's files in order: a folder of segments, or a single .jsonl file."""
    if location.is_dir():
        return sorted(location.glob("segment-*.jsonl"))
    if location.is_file():
        return [location]
    raise InputError(str(location), "no decision log here")


def read_log(location: Path) -> list[DecisionRecord]:
    """All records, validated: a bad line names the file, line and field."""
    records = []
    for path in segments(location):
        for number, line in enumerate(read_lines(path), start=1):
            if line.strip():
                records.append(parse_record(line, str(path), number))
    return records


def read_store_log(store: RecordStore) -> list[DecisionRecord]:
    """All records of a log in a `RecordStore` (a folder or an object-storage URL), segment by segment."""
    records = []
    for name in store.names(prefix="segment-", suffix=".jsonl"):
        where = f"{store}/{name}"
        data = store.read_bytes(name) or b""
        for number, line in enumerate(data.splitlines(), start=1):
            if line.strip():
                records.append(parse_record(decode(line, where, row=number), where, number))
    return records


def record_problem(value: Any, kind: str) -> str | None:
    """Why `value` cannot be a record field of `kind` (None if it can): the one type and range check that the
    controller, the fine-tune reader and the decision-log suite's typed frame share."""
    if kind == "text":
        if not isinstance(value, str) or not value:
            return f"expected a non-empty string, got {value!r:.80}"
        if len(value) > MAX_TEXT:
            return f"expected at most {MAX_TEXT} characters, got {len(value):,}"
        return None
    if kind == "nodes":
        if not isinstance(value, list | tuple) or not all(
            isinstance(node, int) and not isinstance(node, bool) and 0 <= node <= MAX_COUNT for node in value
        ):
            return f"expected a list of node indices, got {value!r:.80}"
        return None
    if kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
            return f"expected a whole number from 0 to {MAX_COUNT:,}, got {value!r:.80}"
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return f"expected a finite non-negative number, got {value!r:.80}"
    return None


def parse_record(line: str, where: str, number: int) -> DecisionRecord:
    data = parse_json(line, where, number)
    if not isinstance(data, dict):
        raise InputError(where, "expected a JSON object", row=number)
    unknown = sorted(set(data) - set(DecisionRecord.field_names()))
    if unknown:
        raise InputError(where, "unknown field", row=number, field=str(unknown[0])[:80])
    values: dict[str, Any] = {}
    for name, kind in DecisionRecord.field_kinds().items():
        if kind == "nodes":  # optional: a log written without placement has none
            value = data.get(name, [])
            problem = record_problem(value, kind)
            if problem is not None:
                raise InputError(where, problem, row=number, field=name)
            values[name] = tuple(value)
            continue
        if name not in data:
            raise InputError(where, "missing", row=number, field=name)
        problem = record_problem(data[name], kind)
        if problem is not None:
            raise InputError(where, problem, row=number, field=name)
        values[name] = data[name]
    if values["mode"] not in MODES:
        raise InputError(where, f"unknown mode {values['mode']!r}", row=number, field="mode")
    if values["architecture"] not in ("ps", "allreduce"):
        raise InputError(where, f"unknown architecture {values['architecture']!r}", row=number, field="architecture")
    return DecisionRecord(**values)


def log_run(
    workload: Workload,
    incumbent: Scheduler,
    proposer: Scheduler,
    mode: str,
    config: SimConfig,
    speed: SpeedModel,
    interference: InterferenceModel | None,
    directory: Path,
    model_version: str,
    slots_per_segment: int = 50,
) -> tuple[int, float]:
    """Simulate `workload` with decision logging; returns (records written, average JCT in seconds).

    shadow: the incumbent's allocation is applied and the proposal only recorded; active: the proposal is
    applied; canary: the proposal is applied to every other job (by arrival order), the incumbent's to the rest.
    """
    if mode not in ("shadow", "canary", "active"):
        raise ValueError(f"mode must be shadow, canary or active, got {mode!r}")
    simulation = Simulation(workload, config, speed, interference)
    incumbent.reset()
    proposer.reset()
    pending: list[DecisionRecord] = []
    written = 0
    first_slot = 0
    while not simulation.done:
        view = simulation.begin_slot()
        usual, proposed = incumbent.schedule(view), proposer.schedule(view)
        applied = _applied(view.jobs, usual, proposed, mode)
        if applied is not usual and applied is not proposed:
            try:
                simulation.check(applied)
            except InvalidAllocationError:  # the two halves collide on some node: this slot stays with the incumbent
                applied = usual
        outcome = simulation.apply(applied)
        for job in view.jobs:
            job_id = job.spec.job_id
            placed = applied.get(job_id)
            pending.append(
                decision_record(
                    view,
                    job,
                    usual.get(job_id),
                    proposed.get(job_id),
                    (placed.num_workers, placed.num_ps),
                    model_version,
                    incumbent.name,
                    mode,
                    outcome.progress_epochs.get(job_id, 0.0),
                    worker_nodes=placed.worker_nodes,
                    ps_nodes=placed.ps_nodes,
                )
            )
        if simulation.slot - first_slot >= slots_per_segment or simulation.done:
            write_segment(directory, pending, first_slot)
            written += len(pending)
            pending, first_slot = [], simulation.slot
    result = simulation.result(proposer.name)
    return written, sum(job.jct_s for job in result.jobs) / len(result.jobs)


def decision_record(
    view: ClusterView,
    job: JobView,
    incumbent: JobAllocation,
    proposed: JobAllocation,
    applied: tuple[int, int],
    model_version: str,
    incumbent_name: str,
    mode: str,
    observed_epochs: float,
    cluster: str | None = None,
    worker_nodes: tuple[int, ...] = (),
    ps_nodes: tuple[int, ...] = (),
) -> DecisionRecord:
    """One job's record of a slot: its state in `view`, the three decisions, the progress observed and, where
    known, the nodes of the applied workers and PS (`applied_worker_nodes`, `applied_ps_nodes`)."""
    spec = job.spec
    return DecisionRecord(
        time_s=view.time_s,
        slot_s=view.slot_s,
        cluster=view.cluster.name if cluster is None else cluster,
        job_id=spec.job_id,
        model=spec.model,
        architecture=spec.architecture.value,
        arrival_s=spec.arrival_s,
        declared_epochs=spec.declared_epochs,
        samples_per_epoch=spec.samples_per_epoch,
        worker_gpu=spec.worker_demand.gpu,
        worker_cpu=spec.worker_demand.cpu,
        worker_mem_gb=spec.worker_demand.mem_gb,
        ps_cpu=spec.ps_demand.cpu,
        ps_mem_gb=spec.ps_demand.mem_gb,
        max_workers=spec.max_workers,
        max_ps=spec.max_ps,
        progress_epochs=job.progress_epochs,
        held_workers=job.allocation.num_workers,
        held_ps=job.allocation.num_ps,
        model_version=model_version,
        incumbent=incumbent_name,
        incumbent_workers=incumbent.num_workers,
        incumbent_ps=incumbent.num_ps,
        proposed_workers=proposed.num_workers,
        proposed_ps=proposed.num_ps,
        applied_workers=applied[0],
        applied_ps=applied[1],
        mode=mode,
        observed_epochs=observed_epochs,
        applied_worker_nodes=worker_nodes,
        applied_ps_nodes=ps_nodes,
    )


def _applied(jobs: Iterable[Any], usual: Allocation, proposed: Allocation, mode: str) -> Allocation:
    if mode == "shadow":
        return usual
    if mode == "active":
        return proposed
    # canary: alternate jobs take the proposal; a job's tasks come whole from one side (the caller falls back
    # to the incumbent when the mixture does not fit)
    chosen = {}
    for rank, job in enumerate(jobs):
        source = proposed if rank % 2 == 0 else usual
        if job.spec.job_id in source.jobs:
            chosen[job.spec.job_id] = source.get(job.spec.job_id)
    return Allocation(chosen)
