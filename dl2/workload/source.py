"""Named sources of training, validation and test workloads, picklable for rollout workers.

A source is a string: `authors-small` / `authors-default` (the authors' generator, `dl2.workload.authors`;
`authors-small:poisson` for Poisson arrivals, `authors-small:without=seq2seq+dssm` to leave job types out),
`synthetic-<preset>` optionally with `@<jobs>` to scale the preset (`synthetic-philly@900`) or with
`:first=<jobs>[:servers=<n>][:density=<d>]` for the first jobs the full-size preset draws, at its own arrival rate, on
its first n servers, arrivals d times as dense (`synthetic-philly:first=150:servers=12`: a contended slice of the
cluster, the regime the ablation benchmarks play), `records:<folder>`
(a cluster's own jobs from the decision log in the folder, bootstrapped per seed: `dl2.workload.observed`), or any
name or file that `dl2.workload.registry.load_workloads` accepts (fixed workloads; the seed is ignored). Seeds select
workloads: training, validation and test seeds must not overlap (the authors' reference workloads are test
data only).
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path

from dl2.core import ClusterSpec, InputError, Workload
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
    if ":" in source and source.partition(":")[0] in PRESETS:
        return _slice_problem(source)
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
    presets = ", ".join(f"{preset}[@jobs|{SLICE_OPTIONS}]" for preset in PRESETS)
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
    if ":" in source and source.partition(":")[0] in PRESETS:
        return _slice(source, seed)
    name, _, size = source.partition("@")
    if name in PRESETS:
        spec = scaled(PRESETS[name], int(size)) if size else PRESETS[name]
        return generate(spec, seed, f"{source}/{seed}")
    fixed = _fixed(source)
    return fixed[seed % len(fixed)]


SLICE_OPTIONS = ":first=<jobs>[:servers=<n>][:density=<d>]"
"""The options of a slice of a preset (`_slice`)."""


def _slice_options(source: str) -> tuple[str, dict[str, str]]:
    name, *options = source.split(":")
    return name, dict(option.partition("=")[::2] for option in options)


def _slice_problem(source: str) -> str | None:
    """Why `synthetic-<preset>:first=...` names nothing (None if it names a slice)."""
    _, options = _slice_options(source)
    unknown = sorted(set(options) - {"first", "servers", "density"})
    if unknown:
        return f"unknown option {unknown[0]!r} of a preset's slice; expected {SLICE_OPTIONS}"
    if "first" not in options:
        return f"a preset's slice names its jobs: {SLICE_OPTIONS}"
    for key, limit in (("first", MAX_JOBS), ("servers", MAX_NODES)):
        value = options.get(key, "1")
        if not (value.isdigit() and 1 <= int(value) <= limit):
            return f"{key}= must be a whole number from 1 to {limit:,}, got {value!r}"
    try:
        density = float(options.get("density", "1"))
    except ValueError:
        density = 0.0
    if not 0.1 <= density <= 10:
        return f"density= must be a number from 0.1 to 10, got {options['density']!r}"
    return None


def _slice(source: str, seed: int) -> Workload:
    """The first jobs the full-size preset draws for `seed` (its arrival rate kept: a contended slice), on its
    first servers, their arrivals `density` times as dense."""
    name, options = _slice_options(source)
    drawn = generate(replace(PRESETS[name], num_jobs=int(options["first"])), seed, f"{source}/{seed}")
    servers = int(options.get("servers", drawn.cluster.num_nodes))
    if servers < drawn.cluster.num_nodes:
        cluster = ClusterSpec(drawn.cluster.nodes[:servers], f"{drawn.cluster.name}-{servers}")
        drawn = replace(drawn, cluster=cluster)
    return drawn.denser(float(options.get("density", "1")))


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
    return source.startswith(("authors-", RECORDS)) or source.partition("@")[0].partition(":")[0] in PRESETS


def workloads_of(source: str, seed: int) -> tuple[Workload, ...]:
    """The workloads of a source for a seed: the one drawn for a generated source, all of a fixed name or file."""
    return (workload(source, seed),) if is_generated(source) else load_workloads(source, seed)


def workloads(source: str, seeds: range | list[int]) -> list[Workload]:
    return [workload(source, seed) for seed in seeds]
