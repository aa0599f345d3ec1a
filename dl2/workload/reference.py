"""Loader for the DL2 authors' validation workloads (`traces-default-uniform.json`, `traces-small-uniform.json`).

The file holds the cluster settings at the top and `traces`: a list of workloads, each a list of jobs with
`job_id`, `model`, `arrival_slot`, `total_epochs` (declared), `real_epochs` (true), `worker_demand`,
`ps_demand` (in CPU/GPU slots) and `samples_per_epoch_unit`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from dl2.core import ClusterSpec, InputError, Job, JobSpec, Resources, Workload
from dl2.workload.catalogue import CATALOGUE

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
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(where, "file not found") from None
    except json.JSONDecodeError as error:
        raise InputError(where, f"not valid JSON ({error.msg} at line {error.lineno})") from None
    if not isinstance(document, dict):
        raise InputError(where, "expected a JSON object with cluster settings and 'traces'")
    for setting in _SETTINGS:
        if setting not in document:
            raise InputError(where, "missing cluster setting", field=setting)
    traces = document.get("traces")
    if not isinstance(traces, list) or not traces:
        raise InputError(where, "no workloads", field="traces")
    slots = document["slots_per_node"]
    capacity = Resources(gpu=_number(slots, "gpu", where, None), cpu=_number(slots, "cpu", where, None))
    num_nodes = _positive_int(document, "num_nodes", where)
    cluster = ClusterSpec.homogeneous(num_nodes, capacity, kind="dl2-slots", name=path.stem)
    slot_s = _number(document, "slot_seconds", where, None)
    if not slot_s > 0:
        raise InputError(where, "must be positive", field="slot_seconds")
    max_workers = _positive_int(document, "max_workers_per_job", where)
    max_ps = _positive_int(document, "max_ps_per_job", where)
    base = name or path.stem
    workloads = []
    row = 0
    for index, trace in enumerate(traces):
        if not isinstance(trace, list) or not trace:
            raise InputError(where, f"workload {index} is empty", field="traces")
        jobs = []
        for record in trace:
            row += 1
            jobs.append(_job(record, row, where, slot_s, max_workers, max_ps))
        ids = [job.spec.job_id for job in jobs]
        if len(set(ids)) != len(ids):
            duplicate = next(i for i in ids if ids.count(i) > 1)
            raise InputError(where, f"duplicate job_id {duplicate} in workload {index}", field="job_id")
        workloads.append(Workload(f"{base}/{index}", cluster, tuple(jobs), slot_s, source=where))
    return tuple(workloads)


def _positive_int(record: dict[str, Any], field: str, where: str) -> int:
    value = record[field]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(where, f"expected a positive integer, got {value!r}", field=field)
    return value


def _number(record: Any, field: str, where: str, row: int | None) -> float:
    if not isinstance(record, dict) or field not in record:
        raise InputError(where, "missing", row=row, field=field)
    value = record[field]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(where, f"expected a number, got {value!r}", row=row, field=field)
    if not math.isfinite(value) or value < 0:
        raise InputError(where, f"must be a finite, non-negative number, got {value}", row=row, field=field)
    return float(value)


def _job(record: Any, row: int, where: str, slot_s: float, max_workers: int, max_ps: int) -> Job:
    if not isinstance(record, dict):
        raise InputError(where, "expected a JSON object per job", row=row)
    for field in _JOB_FIELDS:
        if field not in record:
            raise InputError(where, "missing", row=row, field=field)
    model = record["model"]
    if model not in CATALOGUE:
        raise InputError(where, f"unknown model '{model}'", row=row, field="model")
    declared = _number(record, "total_epochs", where, row)
    true = _number(record, "real_epochs", where, row)
    for field, value in (("total_epochs", declared), ("real_epochs", true)):
        if value <= 0:
            raise InputError(where, "must be positive", row=row, field=field)
    worker = record["worker_demand"]
    ps = record["ps_demand"]
    spec = JobSpec(
        job_id=str(record["job_id"]),
        model=model,
        arrival_s=_number(record, "arrival_slot", where, row) * slot_s,
        declared_epochs=declared,
        samples_per_epoch=_number(record, "samples_per_epoch_unit", where, row),
        worker_demand=Resources(gpu=_number(worker, "gpu", where, row), cpu=_number(worker, "cpu", where, row)),
        ps_demand=Resources(gpu=_number(ps, "gpu", where, row), cpu=_number(ps, "cpu", where, row)),
        max_workers=max_workers,
        max_ps=max_ps,
    )
    return Job(spec, true)
