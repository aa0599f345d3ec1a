"""Workloads by name (what `dl2 simulate --workload NAME` accepts) or by file path.

Names: the DL2 authors' two sets of 10 validation workloads, the two shipped trace slices and every synthetic
preset. Any other argument is a file: `.json` is read as an authors'-format workload file, `.csv` as a job
trace in the common schema, on the Alibaba-style cluster of a `nodes_gpu.csv` next to it if there is one, else
on the Philly cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from dl2.core import InputError, Workload
from dl2.paths import REPO_ROOT, reference_dir
from dl2.workload.reference import load_reference_workloads
from dl2.workload.synthetic import PRESETS, generate
from dl2.workload.traces import alibaba_cluster, load_alibaba, load_philly, load_trace_csv, philly_cluster

_REFERENCE_FILES = {
    "dl2-official-default": "traces-default-uniform.json",
    "dl2-official-small": "traces-small-uniform.json",
}
_TRACES: dict[str, Callable[[int], Workload]] = {
    "philly": lambda seed: load_philly(seed),
    "alibaba-gpu2023": lambda seed: load_alibaba(seed),
}
GPU_SLOTS_PER_GPU = 4.0
"""The authors' workloads count GPUs in slots: one GPU worker takes 4 of a server's 8 GPU slots."""
WORKLOAD_NAMES: tuple[str, ...] = (*_REFERENCE_FILES, *_TRACES, *PRESETS)
"""Every name `load_workloads` knows."""


def load_workloads(name_or_path: str, seed: int = 0) -> tuple[Workload, ...]:
    """The workloads behind a name or a file; `seed` draws the models of trace jobs and synthetic jobs.

    The authors' files hold 10 workloads each, fixed (the seed is ignored); every other source gives one.
    """
    if name_or_path in _REFERENCE_FILES:
        return load_reference_workloads(reference_dir() / _REFERENCE_FILES[name_or_path], name=name_or_path)
    if name_or_path in _TRACES:
        return (_TRACES[name_or_path](seed),)
    if name_or_path in PRESETS:
        return (generate(PRESETS[name_or_path], seed, name_or_path),)
    return _load_file(Path(name_or_path), seed)


def looks_like_path(text: str) -> bool:
    """Whether a name that is no known name was meant as a file (it has a folder or a file suffix): a missing
    file is then reported as such, not as an unknown name."""
    return "/" in text or "\\" in text or Path(text).suffix != ""


def describe_available() -> list[dict[str, Any]]:
    """One row per known name: name, kind, workloads, jobs (all workloads together), nodes, gpus, source.

    Trace and reference files are loaded (so a listing also validates them); presets are described from their
    spec without generating them. `gpus` counts whole GPUs, also for the authors' workloads (whose cluster is
    in GPU slots).
    """
    rows = [_describe_loaded(name, "reference") for name in _REFERENCE_FILES]
    rows += [_describe_loaded(name, "trace") for name in _TRACES]
    for name, spec in PRESETS.items():
        rows.append(
            {
                "name": name,
                "kind": "synthetic",
                "workloads": 1,
                "jobs": spec.num_jobs,
                "nodes": spec.num_nodes,
                "gpus": round(spec.num_nodes * spec.node_capacity.gpu),
                "source": spec.source,
            }
        )
    return rows


def _load_file(path: Path, seed: int) -> tuple[Workload, ...]:
    if path.is_dir():
        raise InputError(str(path), "is a folder; expected a workload name, a .csv job trace or a .json workload file")
    if not path.is_file():
        if looks_like_path(str(path)):
            raise InputError(str(path), "file not found")
        raise InputError(str(path), f"unknown workload; known names: {', '.join(WORKLOAD_NAMES)}, or a file")
    suffix = path.suffix.lower()
    if suffix == ".json":
        return load_reference_workloads(path)
    if suffix == ".csv":
        nodes = path.parent / "nodes_gpu.csv"
        cluster = alibaba_cluster(nodes) if nodes.is_file() else philly_cluster()
        return (load_trace_csv(path, cluster, seed=seed),)
    raise InputError(str(path), "unsupported file type: expected .json (authors' format) or .csv (job trace)")


def _describe_loaded(name: str, kind: str) -> dict[str, Any]:
    workloads = load_workloads(name)
    cluster = workloads[0].cluster
    gpus = cluster.total_capacity.gpu
    return {
        "name": name,
        "kind": kind,
        "workloads": len(workloads),
        "jobs": sum(workload.num_jobs for workload in workloads),
        "nodes": cluster.num_nodes,
        "gpus": round(gpus / GPU_SLOTS_PER_GPU if kind == "reference" else gpus),
        "source": _relative(workloads[0].source),
    }


def _relative(source: str) -> str:
    """A source path relative to the repository when it lies inside it (shorter in tables)."""
    try:
        return str(Path(source).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return source
