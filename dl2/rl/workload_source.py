"""Named sources of training, validation and test workloads, picklable for rollout workers.

A source is a string: `authors-small` / `authors-default` (the authors' generator, `dl2.workload.authors`;
`authors-small:poisson` for Poisson arrivals, `authors-small:without=seq2seq+dssm` to leave job types out),
`synthetic-<preset>` optionally with `@<jobs>` to scale the preset (`synthetic-philly@900`), or any name or file
that `dl2.workload.registry.load_workloads` accepts (fixed workloads; the seed is ignored). Seeds select
workloads: training, validation and test seeds must not overlap (the authors' reference workloads are test
data only).
"""

from __future__ import annotations

from functools import cache

from dl2.core import InputError, Workload
from dl2.workload.authors import SETTINGS, generate_authors_workload
from dl2.workload.registry import load_workloads
from dl2.workload.synthetic import PRESETS, generate, scaled


def workload(source: str, seed: int) -> Workload:
    """The workload of `source` for `seed` (fixed sources cycle through their workloads)."""
    if source.startswith("authors-"):
        setting, *options = source.removeprefix("authors-").split(":")
        if setting not in SETTINGS:
            raise InputError(source, f"unknown authors' setting; known: {', '.join(SETTINGS)}")
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
    name, _, size = source.partition("@")
    if name in PRESETS:
        spec = scaled(PRESETS[name], int(size)) if size else PRESETS[name]
        return generate(spec, seed, f"{source}/{seed}")
    fixed = _fixed(source)
    return fixed[seed % len(fixed)]


@cache
def _fixed(source: str) -> tuple[Workload, ...]:
    return load_workloads(source)


def workloads(source: str, seeds: range | list[int]) -> list[Workload]:
    return [workload(source, seed) for seed in seeds]
