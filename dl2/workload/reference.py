"""Loader for the DL2 authors' validation workloads (`traces-default-uniform.json`, `traces-small-uniform.json`).

The file holds the cluster settings at the top and `traces`: a list of workloads, each a list of jobs with
`job_id`, `model`, `arrival_slot`, `total_epochs` (declared), `real_epochs` (true), `worker_demand`,
`ps_demand` (in CPU/GPU slots) and `samples_per_epoch_unit`. Every value is checked for type and range before
anything is built (limits: `dl2.core.limits`); a problem raises `InputError` naming the file, the job (1-based,
counted across workloads) and the field.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from dl2.core import ClusterSpec, InputError, Job, JobSpec, Resources, Workload
from dl2.core.inputs import read_json
from dl2.core.limits import (
    MAX_EPOCHS,
    MAX_JOBS,
    MAX_NODE_CAPACITY,
    MAX_NODES,
    MAX_SAMPLES_PER_EPOCH,
    MAX_TASKS_PER_JOB,
    MAX_TIME_S,
)
from dl2.workload.catalogue import CATALOGUE, MODEL_NAMES

_SETTINGS = ("num_nodes", "slots_per_node", "slot_seconds", "max_workers_per_job", "max_ps_per_job")
_JOB_FIELDS = (
    "job_id",
    "model",
    "arrival_slot",
    "total_epochs",
    "real_epochs",
    "worker_demand",
    "ps_demand",
    "samples_per_epoch_unit",
)


def is_reference_file(path: Path) -> bool:
    return path.suffix.lower() == ".json"


def load_reference_workloads(path: Path, name: str | None = None) -> tuple[Workload, ...]:
    """All workloads of a reference file, named `<name>/<k>` (k = 0-based index)."""
    where = str(path)
    document = read_json(path)
    if not isinstance(document, dict):
        raise InputError(where, "expected a JSON object with cluster settings and 'traces'")
    for setting in _SETTINGS:
        if setting not in document:
            raise InputError(where, "missing cluster setting", field=setting)
    traces = document.get("traces")
    if not isinstance(traces, list) or not traces:
        raise InputError(where, "expected a non-empty list of workloads", field="traces")
    slots = document["slots_per_node"]
    if not isinstance(slots, dict):
        raise InputError(where, f"expected an object of gpu and cpu slots, got {slots!r:.80}", field="slots_per_node")
    capacity = Resources(
        gpu=_number(slots, "gpu", where, None, MAX_NODE_CAPACITY, "slots_per_node.gpu"),
        cpu=_number(slots, "cpu", where, None, MAX_NODE_CAPACITY, "slots_per_node.cpu"),
    )
    if capacity.gpu + capacity.cpu <= 0:
        raise InputError(where, "a server must offer some slots", field="slots_per_node")
    num_nodes = _positive_int(document, "num_nodes", where, MAX_NODES)
    slot_s = _number(document, "slot_seconds", where, None, MAX_TIME_S)
    if not slot_s > 0:
        raise InputError(where, "must be positive", field="slot_seconds")
    max_workers = _positive_int(document, "max_workers_per_job", where, MAX_TASKS_PER_JOB)
    max_ps = _positive_int(document, "max_ps_per_job", where, MAX_TASKS_PER_JOB)
    total_jobs = sum(len(trace) for trace in traces if isinstance(trace, list))
    if total_jobs > MAX_JOBS:
        raise InputError(where, f"{total_jobs:,} jobs, more than {MAX_JOBS:,}", field="traces")
    cluster = ClusterSpec.homogeneous(num_nodes, capacity, kind="dl2-slots", name=path.stem)
    limits = _Limits(where, slot_s, max_workers, max_ps, capacity)
    base = name or path.stem
    workloads = []
    row = 0
    for index, trace in enumerate(traces):
        if not isinstance(trace, list) or not trace:
            raise InputError(where, f"workload {index}: expected a non-empty list of jobs", field="traces")
        jobs = []
        seen: dict[str, int] = {}
        for record in trace:
            row += 1
            job = _job(record, row, limits)
            first = seen.setdefault(job.spec.job_id, row)
            if first != row:
                raise InputError(where, f"duplicate job_id {job.spec.job_id!r} in workload {index} (rows {first} "
                                 f"and {row})", row=row, field="job_id")  # fmt: skip
            jobs.append(job)
        workloads.append(Workload(f"{base}/{index}", cluster, tuple(jobs), slot_s, source=where))
    return tuple(workloads)


class _Limits:
    """The file's settings that bound each job."""

    def __init__(self, where: str, slot_s: float, max_workers: int, max_ps: int, node: Resources) -> None:
        self.where = where
        self.slot_s = slot_s
        self.max_workers = max_workers
        self.max_ps = max_ps
        self.node = node


def _positive_int(record: dict[str, Any], field: str, where: str, most: int) -> int:
    value = record[field]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise InputError(where, f"expected a whole number from 1 to {most:,}, got {value!r:.80}", field=field)
    return value


def _number(record: Any, field: str, where: str, row: int | None, most: float, name: str | None = None) -> float:
    """A number in [0, most] (`name`: how the field is spelled in messages)."""
    shown = name or field
    if not isinstance(record, dict) or field not in record:
        raise InputError(where, "missing", row=row, field=shown)
    value = record[field]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(where, f"expected a number, got {value!r:.80}", row=row, field=shown)
    if not (math.isfinite(value) and 0 <= value <= most):
        raise InputError(where, f"must be a number from 0 to {most:g}, got {value:.6g}", row=row, field=shown)
    return float(value)


def _demand(record: dict[str, Any], field: str, row: int, limits: _Limits) -> Resources:
    """A task's slots: a mapping of gpu and cpu, asking for something, that fits on one server."""
    where = limits.where
    value = record[field]
    if not isinstance(value, dict):
        raise InputError(where, f"expected an object of gpu and cpu slots, got {value!r:.80}", row=row, field=field)
    demand = Resources(
        gpu=_number(value, "gpu", where, row, MAX_NODE_CAPACITY, f"{field}.gpu"),
        cpu=_number(value, "cpu", where, row, MAX_NODE_CAPACITY, f"{field}.cpu"),
    )
    if demand.gpu + demand.cpu <= 0:
        raise InputError(where, "a task must ask for some slots (gpu or cpu above 0)", row=row, field=field)
    node = limits.node
    if not demand.fits_in(node):
        raise InputError(where, f"gpu {demand.gpu:g}, cpu {demand.cpu:g} does not fit on a server (gpu "
                         f"{node.gpu:g}, cpu {node.cpu:g})", row=row, field=field)  # fmt: skip
    return demand


def _job(record: Any, row: int, limits: _Limits) -> Job:
    where = limits.where
    if not isinstance(record, dict):
        raise InputError(where, f"expected a JSON object per job, got {record!r:.80}", row=row)
    for field in _JOB_FIELDS:
        if field not in record:
            raise InputError(where, "missing", row=row, field=field)
    job_id = record["job_id"]
    if isinstance(job_id, bool) or not isinstance(job_id, str | int) or job_id == "":
        raise InputError(where, f"expected a non-empty string or a whole number, got {job_id!r:.80}", row=row,
                         field="job_id")  # fmt: skip
    model = record["model"]
    if not isinstance(model, str) or model not in CATALOGUE:
        raise InputError(where, f"unknown model {model!r:.80}; known: {', '.join(MODEL_NAMES)}", row=row,
                         field="model")  # fmt: skip
    declared = _number(record, "total_epochs", where, row, MAX_EPOCHS)
    true = _number(record, "real_epochs", where, row, MAX_EPOCHS)
    samples = _number(record, "samples_per_epoch_unit", where, row, MAX_SAMPLES_PER_EPOCH)
    for field, value in (("total_epochs", declared), ("real_epochs", true), ("samples_per_epoch_unit", samples)):
        if value <= 0:
            raise InputError(where, "must be positive", row=row, field=field)
    arrival_slot = _number(record, "arrival_slot", where, row, MAX_TIME_S / limits.slot_s)
    spec = JobSpec(
        job_id=str(job_id),
        model=model,
        arrival_s=arrival_slot * limits.slot_s,
        declared_epochs=declared,
        samples_per_epoch=samples,
        worker_demand=_demand(record, "worker_demand", row, limits),
        ps_demand=_demand(record, "ps_demand", row, limits),
        max_workers=limits.max_workers,
        max_ps=limits.max_ps,
    )
    return Job(spec, true)
