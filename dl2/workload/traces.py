"""Loaders for CSV job traces in the common schema (Philly, Alibaba GPU 2023, or your own; see data/README.md).

A job file starts with the six common columns `job_id, submit_time, num_gpus, duration, status, job_type` (in
any order); trace-specific columns may follow and are ignored, except an optional `model`. Every row is
validated, and each problem raises `InputError` naming the file, the 1-based data row (header excluded) and the
column. Decisions worth knowing:

- Rows need not be sorted by `submit_time`: jobs are sorted stably, so jobs submitted at the same second keep
  their file order (the tie-break every scheduler uses, see `Workload`).
- Cells are stripped of surrounding spaces. `num_gpus` may be written `8` or `8.0` (some tools write integral
  floats) but not `1.5`. An empty line is skipped, but it still counts when rows are numbered.
- Public traces carry no model names, so `map_trace_job` draws each job's model from ONE seeded generator in
  file order. A `job_type` that is a catalogue model name pins that model. `unknown` or a trace class (Alibaba's
  QoS classes LS/BE/Burstable/Guaranteed) draws as usual. If the file has a `model` column, every row must
  name a catalogue model there. A pinned job consumes the same draws, so pinning one job changes no other
  job's model or architecture.
- A time window keeps the jobs submitted in [start, end) and shifts them so the window starts at 0. All rows are
  still validated and mapped, so a job gets the same model whatever window it is loaded in.
- Limits (`dl2.core.limits`): submit times and durations within a year, at most `MAX_JOBS` rows, and a job's GPUs
  at most its cluster's (and `MAX_TASKS_PER_JOB`); a cluster file describes at most `MAX_NODES` servers. A value
  past them is refused before any job or node is built.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from dl2.core import ClusterSpec, InputError, Job, NodeSpec, Resources, Workload
from dl2.core.inputs import read_text
from dl2.core.limits import MAX_JOBS, MAX_NODE_CAPACITY, MAX_NODES, MAX_TASKS_PER_JOB, MAX_TIME_S
from dl2.paths import traces_dir
from dl2.workload.accelerators import ACCELERATOR_TYPES
from dl2.workload.catalogue import CATALOGUE, MODEL_NAMES
from dl2.workload.mapping import DEFAULT_MAPPING, TraceMapping, map_trace_job

COMMON_COLUMNS: tuple[str, ...] = ("job_id", "submit_time", "num_gpus", "duration", "status", "job_type")
"""The columns every job file must have (the common schema)."""
MODEL_COLUMN = "model"
"""Optional column that names each job's catalogue model explicitly."""
"""The mapping used when none is given: uniform over the GPU models, parameter-server jobs only."""
PHILLY_NODE = Resources(gpu=8.0, cpu=64.0, mem_gb=512.0)
"""A Philly server: 8 GPUs as in the Helios QSSF simulator that ships vc_nodes.csv; CPU and memory are our guess
(the trace does not say), chosen so that CPU and memory do not bind before GPUs for catalogue jobs."""


@dataclass(frozen=True, slots=True)
class _Table:
    """A validated CSV file: its path (for errors), column positions and non-empty data rows."""

    where: str
    columns: dict[str, int]
    records: tuple[tuple[int, tuple[str, ...]], ...]
    """(1-based data row number, stripped cells) per non-empty row."""

    def cell(self, cells: tuple[str, ...], column: str) -> str:
        return cells[self.columns[column]]


@dataclass(frozen=True, slots=True)
class _TraceRow:
    """One validated job row, before it is mapped onto the catalogue."""

    job_id: str
    submit_s: float
    num_gpus: int
    duration_s: float
    model: str | None
    """Pinned catalogue model, or None to draw one."""


def load_trace_csv(
    path: Path,
    cluster: ClusterSpec,
    mapping: TraceMapping = DEFAULT_MAPPING,
    seed: int = 0,
    name: str | None = None,
    slot_s: float = 600.0,
    time_window_s: tuple[float, float] | None = None,
) -> Workload:
    """A job file as a workload on `cluster` (see the module docstring for the rules).

    `name` defaults to the file's stem, or to its folder's name for the common layout `<trace>/jobs.csv`.
    """
    if not (math.isfinite(slot_s) and slot_s > 0):
        raise ValueError(f"slot_s must be a positive number, got {slot_s}")
    if time_window_s is not None and not (math.isfinite(time_window_s[0]) and time_window_s[0] < time_window_s[1]):
        raise ValueError(f"time_window_s must be (start, end) with a finite start < end, got {time_window_s}")
    table = _read_table(path, COMMON_COLUMNS)
    if len(table.records) > MAX_JOBS:
        raise InputError(table.where, f"{len(table.records):,} jobs, more than {MAX_JOBS:,}")
    rows = _trace_rows(table, cluster)
    rng = np.random.default_rng(seed)
    jobs = [_map_row(row, rng, mapping) for row in rows]  # every row, in file order: models ignore the window
    if time_window_s is not None:
        jobs = _in_window(jobs, time_window_s, table.where)
    jobs.sort(key=lambda job: job.spec.arrival_s)  # stable: equal submit times keep file order
    default_name = path.parent.name if path.stem == "jobs" else path.stem
    return Workload(name or default_name, cluster, tuple(jobs), slot_s, source=table.where)


def load_philly(
    seed: int = 0, mapping: TraceMapping = DEFAULT_MAPPING, time_window_s: tuple[float, float] | None = None
) -> Workload:
    """The shipped week of Philly jobs (6,391) on the 352-node Philly cluster."""
    path = traces_dir() / "philly" / "jobs.csv"
    return load_trace_csv(path, philly_cluster(), mapping, seed, name="philly", time_window_s=time_window_s)


def load_alibaba(
    seed: int = 0, mapping: TraceMapping = DEFAULT_MAPPING, time_window_s: tuple[float, float] | None = None
) -> Workload:
    """The shipped 17 days of Alibaba GPU 2023 pods (2,852) on its 1,213 GPU nodes."""
    path = traces_dir() / "alibaba_gpu2023" / "jobs.csv"
    return load_trace_csv(path, alibaba_cluster(), mapping, seed, name="alibaba-gpu2023", time_window_s=time_window_s)


def philly_cluster(path: Path | None = None) -> ClusterSpec:
    """Philly: one `PHILLY_NODE` per server counted in `vc_nodes.csv` (`vc,node num`; 352 in the shipped file)."""
    table = _read_table(path or traces_dir() / "philly" / "vc_nodes.csv", ("vc", "node num"))
    seen: dict[str, int] = {}
    total = 0
    for row, cells in table.records:
        _unique(table.where, seen, _text(table.where, table.cell(cells, "vc"), row, "vc"), row, "vc")
        total += _positive_int(table.where, table.cell(cells, "node num"), row, "node num", MAX_NODES)
        if total > MAX_NODES:
            raise InputError(table.where, f"{total:,} nodes so far, more than {MAX_NODES:,}", row=row, field="node num")
    return ClusterSpec.homogeneous(total, PHILLY_NODE, kind="philly-8gpu", name="philly")


def alibaba_cluster(path: Path | None = None) -> ClusterSpec:
    """Alibaba GPU 2023: one node per row of `nodes_gpu.csv` (`sn,cpu_milli,memory_mib,gpu,model`), kind = model,
    accelerator = the model's type in `dl2.workload.accelerators.ACCELERATOR_TYPES` (an unknown model is an error)."""
    columns = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
    table = _read_table(path or traces_dir() / "alibaba_gpu2023" / "nodes_gpu.csv", columns)
    if len(table.records) > MAX_NODES:
        raise InputError(table.where, f"{len(table.records):,} nodes, more than {MAX_NODES:,}")
    seen: dict[str, int] = {}
    nodes = []
    for index, (row, cells) in enumerate(table.records):
        _unique(table.where, seen, _text(table.where, table.cell(cells, "sn"), row, "sn"), row, "sn")
        capacity = Resources(
            gpu=float(_positive_int(table.where, table.cell(cells, "gpu"), row, "gpu", int(MAX_NODE_CAPACITY))),
            cpu=_positive_number(
                table.where, table.cell(cells, "cpu_milli"), row, "cpu_milli", MAX_NODE_CAPACITY * 1000
            )
            / 1000,
            mem_gb=_positive_number(
                table.where, table.cell(cells, "memory_mib"), row, "memory_mib", MAX_NODE_CAPACITY * 1024
            )
            / 1024,
        )
        model = _text(table.where, table.cell(cells, "model"), row, "model")
        known = ACCELERATOR_TYPES.get(model)
        if known is None:
            known_names = ", ".join(ACCELERATOR_TYPES)
            raise InputError(table.where, f"unknown GPU model {model!r}; known: {known_names}", row=row, field="model")
        nodes.append(NodeSpec(index, capacity, kind=model, accelerator=known.accelerator))
    return ClusterSpec(tuple(nodes), name="alibaba-gpu2023")


def _read_table(path: Path, required: Sequence[str]) -> _Table:
    """Read a CSV file whole (the shipped traces are under 1 MB) and check its header and row lengths."""
    where = str(path)
    text = read_text(path)  # a spreadsheet's byte-order mark is dropped; binary bytes are refused
    try:
        lines = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as error:
        raise InputError(where, f"cannot read as CSV ({error})") from None
    if not lines or not any(cell.strip() for cell in lines[0]):
        raise InputError(where, "empty file: no header")
    header = [name.strip() for name in lines[0]]
    columns = _columns(where, header, required)
    records = tuple(
        (row, tuple(cell.strip() for cell in cells)) for row, cells in enumerate(lines[1:], start=1) if cells
    )
    if not records:
        raise InputError(where, "no data rows after the header")
    for row, cells in records:
        if len(cells) != len(header):
            missing = header[len(cells)] if len(cells) < len(header) else None
            raise InputError(where, f"expected {len(header)} fields, got {len(cells)}", row=row, field=missing)
    return _Table(where, columns, records)


def _columns(where: str, header: list[str], required: Sequence[str]) -> dict[str, int]:
    columns: dict[str, int] = {}
    for index, name in enumerate(header):
        if name in columns:
            raise InputError(where, "duplicate column in the header", field=name)
        columns[name] = index
    for name in required:
        if name not in columns:
            raise InputError(where, "missing required column", field=name)
    return columns


def _trace_rows(table: _Table, cluster: ClusterSpec) -> list[_TraceRow]:
    """The rows, validated; a job asks for at most its cluster's GPUs (and `MAX_TASKS_PER_JOB`)."""
    most_gpus = min(MAX_TASKS_PER_JOB, int(cluster.total_capacity.gpu))
    seen: dict[str, int] = {}
    rows = []
    for row, cells in table.records:
        job_id = _text(table.where, table.cell(cells, "job_id"), row, "job_id")
        submit_s = _number(table.where, table.cell(cells, "submit_time"), row, "submit_time")
        if submit_s < 0:
            raise InputError(table.where, f"must not be negative, got {submit_s:g}", row=row, field="submit_time")
        if submit_s > MAX_TIME_S:
            raise InputError(table.where, f"must be at most {MAX_TIME_S:g} s (a year), got {submit_s:g}", row=row,
                             field="submit_time")  # fmt: skip
        rows.append(
            _TraceRow(
                job_id=job_id,
                submit_s=submit_s,
                num_gpus=_gpus(table.where, table.cell(cells, "num_gpus"), row, most_gpus, cluster.name),
                duration_s=_positive_number(table.where, table.cell(cells, "duration"), row, "duration", MAX_TIME_S),
                model=_pinned_model(table, cells, row),
            )
        )
        _unique(table.where, seen, job_id, row, "job_id")  # after the cells: a bad row is named for its bad cell
    return rows


def _pinned_model(table: _Table, cells: tuple[str, ...], row: int) -> str | None:
    if MODEL_COLUMN in table.columns:
        model = table.cell(cells, MODEL_COLUMN)
        if model not in CATALOGUE:
            known = ", ".join(MODEL_NAMES)
            raise InputError(table.where, f"unknown model {model!r}; known: {known}", row=row, field=MODEL_COLUMN)
        return model
    job_type = table.cell(cells, "job_type")
    return job_type if job_type in CATALOGUE else None


def _map_row(row: _TraceRow, rng: np.random.Generator, mapping: TraceMapping) -> Job:
    # a row that names its model pins it; map_trace_job still makes its two draws, so later rows are unchanged
    return map_trace_job(row.job_id, row.submit_s, row.num_gpus, row.duration_s, rng, mapping, model=row.model)


def _in_window(jobs: list[Job], window: tuple[float, float], where: str) -> list[Job]:
    start, end = window
    kept = [
        replace(job, spec=replace(job.spec, arrival_s=job.spec.arrival_s - start))
        for job in jobs
        if start <= job.spec.arrival_s < end
    ]
    if not kept:
        raise InputError(where, f"no job submitted in the time window [{start:g}, {end:g}) s", field="submit_time")
    return kept


def _text(where: str, text: str, row: int, field: str) -> str:
    if not text:
        raise InputError(where, "must not be empty", row=row, field=field)
    return text


def _unique(where: str, seen: dict[str, int], key: str, row: int, field: str) -> None:
    first = seen.setdefault(key, row)
    if first != row:
        raise InputError(where, f"duplicate {field} {key!r} (rows {first} and {row})", row=row, field=field)


def _number(where: str, text: str, row: int, field: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(where, f"expected a number, got {text!r}", row=row, field=field) from None
    if not math.isfinite(value):
        raise InputError(where, f"must be a finite number, got {text!r}", row=row, field=field)
    return value


def _positive_number(where: str, text: str, row: int, field: str, most: float) -> float:
    value = _number(where, text, row, field)
    if value <= 0:
        raise InputError(where, f"must be positive, got {text!r}", row=row, field=field)
    if value > most:
        raise InputError(where, f"must be at most {most:g}, got {text!r}", row=row, field=field)
    return value


def _gpus(where: str, text: str, row: int, most: int, cluster: str) -> int:
    value = _positive_int(where, text, row, "num_gpus", 2**63)
    if value > most:
        raise InputError(where, f"{text} GPUs, more than one job may have on cluster {cluster!r} (at most {most:,})",
                         row=row, field="num_gpus")  # fmt: skip
    return value


def _positive_int(where: str, text: str, row: int, field: str, most: int) -> int:
    value = _number(where, text, row, field)
    if value < 1 or not value.is_integer():
        raise InputError(where, f"must be a positive integer, got {text!r}", row=row, field=field)
    if value > most:
        raise InputError(where, f"must be at most {most:,}, got {text!r}", row=row, field=field)
    return int(value)
