"""Named sources of training, validation and test workloads, picklable for rollout workers.

A source is a string: `authors-small` / `authors-default` (the authors' generator, `dl2.workload.authors`;
`authors-small:poisson` for Poisson arrivals, `authors-small:without=seq2seq+dssm` to leave job types out),
`synthetic-<preset>` optionally with `@<jobs>` to scale the preset (`synthetic-philly@900`), `records:<folder>`
(a cluster's own jobs from the decision log in the folder, bootstrapped per seed: `dl2.workload.observed`), or any
name or file that `dl2.workload.registry.load_workloads` accepts (fixed workloads; the seed is ignored). Seeds select
workloads: training, validation and test seeds must not overlap (the authors' reference workloads are test
data only).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from dl2.core import InputError, Workload
from dl2.core.limits import MAX_JOBS, MAX_NODES
from dl2.core.log_format import CLUSTER_FILE, read_cluster_log
from dl2.workload.authors import SETTINGS, generate_authors_workload
from dl2.workload.catalogue import MODEL_NAMES
from dl2.workload.observed import observed_workload, resampled_workload
from dl2.workload.registry import WORKLOAD_NAMES, load_workloads, looks_like_path
from dl2.workload.synthetic import PRESETS, generate, scaled

RECORDS = "records:"
"""Prefix of a source of a cluster's own jobs (its decision log's folder follows)."""
ARRIVALS = ("uniform", "poisson")
"""Arrival options of the authors' generator."""


def source_problem(source: str) -> str | None:
    """Why `source` names nothing (None if it names something), found before any workload is drawn or loaded:
    an unknown setting, option, preset or name, a size that is not a whole number of jobs within the limits, a
    missing file. A file's contents are checked when it is loaded."""
    if source.startswith("authors-"):
        setting, *options = source.removeprefix("authors-").split(":")
        if setting not in SETTINGS:
            return f"unknown authors' setting {setting!r}; known: {', '.join(SETTINGS)}"
        for option in options:
            if option.startswith("without="):
                unknown = sorted(set(option.removeprefix("without=").split("+")) - set(MODEL_NAMES))
                if unknown:
                    return f"unknown job type {unknown[0]!r}; known: {', '.join(MODEL_NAMES)}"
            elif option not in ARRIVALS:
                return f"unknown option {option!r}; known: {', '.join(ARRIVALS)}, without=<type>+<type>"
        return None
    if source.startswith(RECORDS):
        folder = Path(source.removeprefix(RECORDS))
        if not folder.is_dir():
            return "expected records:<the folder of a decision log>"
        return None if (folder / CLUSTER_FILE).is_file() else f"no {CLUSTER_FILE} beside the decision log"
    name, at, size = source.partition("@")
    if name in PRESETS:
        if not at:
            return None
        if not (size.isdigit() and 1 <= int(size) <= MAX_JOBS):
            return f"the size after @ must be a whole number of jobs from 1 to {MAX_JOBS:,}"
        nodes = scaled(PRESETS[name], int(size)).num_nodes
        return f"{size} jobs need {nodes:,} nodes, more than {MAX_NODES:,}" if nodes > MAX_NODES else None
    path = Path(source)
    if source in WORKLOAD_NAMES or path.is_file():
        return None
    if path.is_dir():
        return "is a folder; expected a workload source, name or file"
    if looks_like_path(source):
        return "file not found"
    presets = ", ".join(f"{preset}[@jobs]" for preset in PRESETS)
    settings = "|".join(SETTINGS)
    return f"unknown workload source; known: authors-<{settings}>[:poisson][:without=<types>], {presets}, " + (
        f"records:<folder>, {', '.join(WORKLOAD_NAMES)}, or a file"
    )


def check_source(source: str) -> None:
    """InputError (naming the source) if `source_problem` finds one."""
    problem = source_problem(source)
    if problem is not None:
        raise InputError(source, problem)


def workload(source: str, seed: int) -> Workload:
    """The workload of `source` for `seed` (fixed sources cycle through their workloads)."""
    check_source(source)
    if source.startswith("authors-"):
        setting, *options = source.removeprefix("authors-").split(":")
        arrivals, without = "uniform", tuple[str, ...]()
        for option in options:
            if option.startswith("without="):
                without = tuple(option.removeprefix("without=").split("+"))
            else:
                arrivals = option
        try:
            return generate_authors_workload(SETTINGS[setting], seed, arrivals, without)
        except ValueError as error:
            raise InputError(source, str(error)) from None
    if source.startswith(RECORDS):
        return resampled_workload(_observed(source.removeprefix(RECORDS)), seed)
    name, _, size = source.partition("@")
    if name in PRESETS:
        spec = scaled(PRESETS[name], int(size)) if size else PRESETS[name]
        return generate(spec, seed, f"{source}/{seed}")
    fixed = _fixed(source)
    return fixed[seed % len(fixed)]


@cache
def _fixed(source: str) -> tuple[Workload, ...]:
    return load_workloads(source)


@cache
def _observed(folder: str) -> Workload:
    location = Path(folder)
    records, cluster = read_cluster_log(location)  # every record checked against the log's own cluster
    if not records:
        raise InputError(folder, "the decision log has no records")
    return observed_workload(records, cluster, location.name)


def is_generated(source: str) -> bool:
    """A source whose seed draws a new workload (else a fixed set the seed only cycles through)."""
    return source.startswith(("authors-", RECORDS)) or source.partition("@")[0] in PRESETS


def workloads_of(source: str, seed: int) -> tuple[Workload, ...]:
    """The workloads of a source for a seed: the one drawn for a generated source, all of a fixed name or file."""
    return (workload(source, seed),) if is_generated(source) else load_workloads(source, seed)


def workloads(source: str, seeds: range | list[int]) -> list[Workload]:
    return [workload(source, seed) for seed in seeds]
