"""The decision log: append-only JSON Lines in atomic segments, and runs that write it.

A log is a folder of segments `segment-<first slot>-<n>.jsonl`, each written to a temporary name and renamed
into place, so a reader never sees half a segment and a crash loses at most the segment being written.
`log_run` plays the role of a cluster in simulation: each slot the incumbent heuristic and the proposing policy
both decide, the mode says which is applied, and the observed progress is recorded. The Kubernetes controller
writes the same records from a real cluster.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dl2.core import (
    Allocation,
    Attribution,
    ClusterView,
    DecisionRecord,
    InvalidAllocationError,
    JobAllocation,
    JobView,
    Scheduler,
    Workload,
    decision_attribution,
    drawn_propensities,
)
from dl2.core.decision import worker_accelerators
from dl2.core.inputs import decode
from dl2.core.log_format import parse_record, records_text
from dl2.sim.config import SimConfig
from dl2.sim.simulator import Simulation
from dl2.workload.interference import InterferenceModel
from dl2.workload.speed import SpeedModel

if TYPE_CHECKING:
    from dl2.sim.record_store import RecordStore


def write_segment(directory: Path, records: Sequence[DecisionRecord], first_slot: int) -> Path | None:
    """Append records as one new segment (atomically); returns its path (None for no records)."""
    if not records:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    existing = len(list(directory.glob("segment-*.jsonl")))
    path = directory / f"segment-{first_slot:09d}-{existing:06d}.jsonl"
    _write_lines(path, records, overwrite=True)
    return path


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
        # what the proposer drew counts only where its proposal was applied
        drawn = drawn_propensities(proposer) if applied is proposed or mode == "canary" else {}
        attribution = decision_attribution(proposer)
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
                    propensity=drawn.get(job_id, 1.0) if placed.same_placement(proposed.get(job_id)) else 1.0,
                    attribution=attribution,
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
    propensity: float = 1.0,
    attribution: Attribution | None = None,
) -> DecisionRecord:
    """One job's record of a slot: its state in `view`, the three decisions, the progress observed, where known
    the nodes of the applied workers and PS (`applied_worker_nodes`, `applied_ps_nodes`) and the workers' accelerator
    types on `view.cluster` (`applied_worker_accelerators`), the probability with which the applied decision was
    drawn (`drawn_propensities`), and, where the proposer is a search, which of its candidates the proposal came
    from and what it predicted for each (`decision_attribution`)."""
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
        applied_worker_accelerators=worker_accelerators(view.cluster, worker_nodes),
        applied_propensity=propensity,
        proposed_by=JOINER.join(attribution.decided_by) if attribution is not None else "",
        predicted_total_s=recorded_totals(attribution),
    )


JOINER = "+"
"""Joins the names of the candidates that proposed a slot's allocation (`DecisionRecord.proposed_by`)."""


def recorded_totals(attribution: Attribution | None) -> dict[str, float | None]:
    """A search's predicted totals as a record holds them: JSON has no infinity, so a continuation that would never
    finish is null."""
    if attribution is None:
        return {}
    totals = attribution.predicted_total_s
    return {name: (seconds if math.isfinite(seconds) else None) for name, seconds in totals.items()}


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
