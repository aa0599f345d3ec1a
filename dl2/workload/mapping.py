"""Mapping a traced job (GPUs, duration) onto a job type of the catalogue (realistic mode).

Public traces carry no model names. Each traced job gets a catalogue model drawn from a seeded mix; its
requested workers are its traced GPUs, its requested PS the count that is fastest for that many workers
(users tune their jobs), and its epochs are set so that at the requested workers and PS it runs for its traced
duration: epochs = duration x throughput(ps, workers) / samples_per_epoch. Arrival times are kept.
A job may later get more or fewer workers than it asked for, up to `max(requested, elastic_cap)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from dl2.core import Architecture, Job, JobSpec
from dl2.workload.catalogue import CATALOGUE, GPU_MODEL_NAMES
from dl2.workload.speed_fit import ParametricSpeedModel


@dataclass(frozen=True, slots=True)
class TraceMapping:
    """How traced jobs become catalogue jobs."""

    models: tuple[str, ...] = GPU_MODEL_NAMES
    """Catalogue models a GPU job may become (the two CPU-only models are left out)."""
    model_weights: tuple[float, ...] | None = None
    """Relative frequency of each model; None = uniform (as the authors' generator)."""
    allreduce_fraction: float = 0.0
    """Share of jobs that are all-reduce (workers only) instead of parameter-server jobs (DL2 §7)."""
    elastic_cap: int = 16
    """A job may hold up to max(requested, elastic_cap) workers, and as many PS (DL2's 16 by default)."""
    max_requested_ps: int = 16
    """Largest PS count a user would request."""


@cache
def _speed_model() -> ParametricSpeedModel:
    return ParametricSpeedModel()


@cache
def best_ps_for(model: str, num_workers: int, max_ps: int) -> int:
    """The PS count in 1..max_ps with the highest throughput for `num_workers` workers."""
    speed = _speed_model()
    return max(range(1, max_ps + 1), key=lambda ps: (speed.throughput(model, ps, num_workers), -ps))


DEFAULT_MAPPING = TraceMapping()


@cache
def _cumulative_weights(mapping: TraceMapping) -> np.ndarray:
    weights = np.asarray(mapping.model_weights or [1.0] * len(mapping.models), dtype=float)
    return np.cumsum(weights / weights.sum())


def map_trace_job(
    job_id: str,
    arrival_s: float,
    num_gpus: int,
    duration_s: float,
    rng: np.random.Generator,
    mapping: TraceMapping,
    model: str | None = None,
) -> Job:
    """One traced job as a catalogue job.

    Exactly two uniform draws per job (model, architecture), even when `model` pins the model (a trace that
    names it), so a pinned row never shifts the draws of the rows after it.
    """
    if num_gpus < 1:
        raise ValueError(f"job {job_id}: a training job needs at least one GPU, got {num_gpus}")
    model_draw, architecture_draw = rng.random(2)
    cumulative = _cumulative_weights(mapping)
    drawn = mapping.models[min(int(np.searchsorted(cumulative, model_draw, side="right")), len(cumulative) - 1)]
    model = model or drawn
    allreduce = bool(architecture_draw < mapping.allreduce_fraction)
    profile = CATALOGUE[model]
    workers = int(num_gpus)
    cap = max(workers, mapping.elastic_cap)
    if allreduce:
        architecture, requested_ps, max_ps = Architecture.ALLREDUCE, 0, 0
    else:
        architecture = Architecture.PS
        requested_ps = best_ps_for(model, workers, min(mapping.max_requested_ps, cap))
        max_ps = cap
    throughput = _speed_model().throughput(model, requested_ps, workers)
    epochs = duration_s * throughput / profile.samples_per_epoch
    spec = JobSpec(
        job_id=job_id,
        model=model,
        arrival_s=float(arrival_s),
        declared_epochs=epochs,
        samples_per_epoch=profile.samples_per_epoch,
        worker_demand=profile.worker_demand,
        ps_demand=profile.ps_demand if not allreduce else profile.ps_demand.scaled(0.0),
        max_workers=cap,
        max_ps=max_ps,
        architecture=architecture,
        requested_workers=workers,
        requested_ps=requested_ps,
    )
    return Job(spec, epochs, trace_duration_s=float(duration_s))
