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
from typing import Any

from dl2.core import (
    Allocation,
    ClusterView,
    DecisionRecord,
    InputError,
    InvalidAllocationError,
    JobView,
    Scheduler,
    Workload,
)
from dl2.sim.config import SimConfig
from dl2.sim.simulator import Simulation, SlotOutcome
from dl2.workload.interference import InterferenceModel
from dl2.workload.speed import SpeedModel

MODES = ("shadow", "canary", "active", "simulated")
_INTEGER_FIELDS = {"max_workers", "max_ps", "held_workers", "held_ps"} | {
    f"{who}_{role}" for who in ("incumbent", "proposed", "applied") for role in ("workers", "ps")
}
_TEXT_FIELDS = {"cluster", "job_id", "model", "architecture", "model_version", "incumbent", "mode"}
NODE_FIELDS = ("applied_worker_nodes", "applied_ps_nodes")
"""Lists of node indices; optional (a log written without placement leaves them out)."""


def write_segment(directory: Path, records: Sequence[DecisionRecord], first_slot: int) -> Path | None:
    """Append records as one new segment (atomically); returns its path (None for no records)."""
    if not records:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    existing = len(list(directory.glob("segment-*.jsonl")))
    path = directory / f"segment-{first_slot:09d}-{existing:06d}.jsonl"
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".segment-", suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as stream:
            for record in records:
                stream.write(json.dumps(record.to_json_dict(), sort_keys=True) + "\n")
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


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
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if line.strip():
                records.append(parse_record(line, str(path), number))
    return records


def parse_record(line: str, where: str, number: int) -> DecisionRecord:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as error:
        raise InputError(where, f"not valid JSON ({error.msg})", row=number) from None
    if not isinstance(data, dict):
        raise InputError(where, "expected a JSON object", row=number)
    values: dict[str, Any] = {}
    for name in DecisionRecord.field_names():
        if name in NODE_FIELDS:
            value = data.get(name, [])
            if not isinstance(value, list) or not all(
                isinstance(node, int) and not isinstance(node, bool) and node >= 0 for node in value
            ):
                raise InputError(where, f"expected a list of node indices, got {value!r}", row=number, field=name)
            values[name] = tuple(value)
            continue
        if name not in data:
            raise InputError(where, "missing", row=number, field=name)
        value = data[name]
        if name in _TEXT_FIELDS:
            if not isinstance(value, str) or not value:
                raise InputError(where, f"expected a non-empty string, got {value!r}", row=number, field=name)
        elif name in _INTEGER_FIELDS:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InputError(where, f"expected a non-negative integer, got {value!r}", row=number, field=name)
        elif isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise InputError(where, f"expected a finite non-negative number, got {value!r}", row=number, field=name)
        values[name] = value
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
            pending.append(
                slot_record(view, job, model_version, incumbent.name, usual, proposed, applied, mode, outcome)
            )
        if simulation.slot - first_slot >= slots_per_segment or simulation.done:
            write_segment(directory, pending, first_slot)
            written += len(pending)
            pending, first_slot = [], simulation.slot
    result = simulation.result(proposer.name)
    return written, sum(job.jct_s for job in result.jobs) / len(result.jobs)


def slot_record(
    view: ClusterView,
    job: JobView,
    model_version: str,
    incumbent: str,
    usual: Allocation,
    proposed: Allocation,
    applied: Allocation,
    mode: str,
    outcome: SlotOutcome,
) -> DecisionRecord:
    """One job's record of a slot: its view, the three decisions (applied placement included) and its progress."""
    spec = job.spec
    placed = applied.get(spec.job_id)
    return DecisionRecord(
        time_s=view.time_s,
        slot_s=view.slot_s,
        cluster=view.cluster.name,
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
        incumbent=incumbent,
        incumbent_workers=usual.get(spec.job_id).num_workers,
        incumbent_ps=usual.get(spec.job_id).num_ps,
        proposed_workers=proposed.get(spec.job_id).num_workers,
        proposed_ps=proposed.get(spec.job_id).num_ps,
        applied_workers=placed.num_workers,
        applied_ps=placed.num_ps,
        mode=mode,
        observed_epochs=outcome.progress_epochs.get(spec.job_id, 0.0),
        applied_worker_nodes=placed.worker_nodes,
        applied_ps_nodes=placed.ps_nodes,
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
