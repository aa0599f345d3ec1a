"""Summary statistics of a workload, defined as in the traces' `stats.json` (see data/README.md).

The same numbers for a trace slice and for a synthetic workload let a test (or a user) check that a generator
reproduces the trace it imitates. Definitions, as in `stats.json`:

- hours are counted from time 0 of the workload; `span_hours` is the number of whole hours up to and including
  the hour of the last arrival, unless `span_s` says otherwise (a trace slice's span is its window);
- `arrivals_per_hour` is over every hour of the span, empty hours included;
- `interarrival_s` is over consecutive arrivals; its `cv` is the population standard deviation over the mean;
- `diurnal_mean_arrivals_by_hour[h]` is the mean count over the span's hours that are `h` mod 24 (None for an
  hour the span never reaches);
- percentiles are linearly interpolated (numpy's default);
- `num_gpus` is a job's requested workers (its traced GPUs for trace and synthetic workloads);
- `duration_s` is over `Job.trace_duration_s`; it is None when no job has one (the authors' workloads).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np

from dl2.core import Workload

HOUR_S = 3600.0


def describe(workload: Workload, span_s: float | None = None) -> dict[str, Any]:
    """The workload's name and statistics as a JSON-ready dict (keys as in `stats.json`; `num_gpus` keys are ints)."""
    if not workload.jobs:
        raise ValueError(f"workload {workload.name} has no jobs")
    arrivals = np.sort(np.array([job.spec.arrival_s for job in workload.jobs], dtype=float))
    num_hours = _num_hours(arrivals, span_s)
    counts = np.bincount((arrivals // HOUR_S).astype(int), minlength=num_hours)
    gpus = [job.spec.requested_workers for job in workload.jobs]
    return {
        "name": workload.name,
        "n_jobs": workload.num_jobs,
        "span_hours": float(num_hours),
        **_sizes(gpus),
        "duration_s": _durations(workload),
        "gpu_hours_total": _gpu_hours(workload),
        "arrivals_per_hour": _hourly(counts),
        "interarrival_s": _interarrivals(arrivals),
        "diurnal_mean_arrivals_by_hour": _diurnal(counts),
    }


def _num_hours(arrivals: np.ndarray, span_s: float | None) -> int:
    last_hour = int(arrivals[-1] // HOUR_S)
    if span_s is None:
        return last_hour + 1
    num_hours = math.ceil(span_s / HOUR_S)
    if last_hour >= num_hours:
        raise ValueError(f"an arrival at {arrivals[-1]:g} s lies beyond span_s={span_s:g}")
    return num_hours


def _sizes(gpus: list[int]) -> dict[str, Any]:
    count = dict(sorted(Counter(gpus).items()))
    return {
        "num_gpus_count": count,
        "num_gpus_frac": {size: n / len(gpus) for size, n in count.items()},
        "num_gpus_mean": float(np.mean(gpus)),
    }


def _durations(workload: Workload) -> dict[str, float] | None:
    values = np.array([job.trace_duration_s for job in workload.jobs if job.trace_duration_s is not None])
    if not values.size:
        return None
    return {
        "mean": float(values.mean()),
        "median": float(np.percentile(values, 50)),
        "p90": float(np.percentile(values, 90)),
        "p99": float(np.percentile(values, 99)),
        "min": float(values.min()),
        "max": float(values.max()),
    }


def _gpu_hours(workload: Workload) -> float | None:
    pairs = [(job.spec.requested_workers, job.trace_duration_s) for job in workload.jobs]
    if any(duration is None for _, duration in pairs):
        return None
    return sum(gpus * (duration or 0.0) for gpus, duration in pairs) / HOUR_S


def _hourly(counts: np.ndarray) -> dict[str, float]:
    return {
        "mean": float(counts.mean()),
        "median": float(np.percentile(counts, 50)),
        "p95": float(np.percentile(counts, 95)),
        "max": float(counts.max()),
        "frac_hours_zero": float(np.mean(counts == 0)),
    }


def _interarrivals(arrivals: np.ndarray) -> dict[str, float] | None:
    gaps = np.diff(arrivals)
    if not gaps.size:
        return None
    mean = float(gaps.mean())
    return {
        "mean": mean,
        "median": float(np.percentile(gaps, 50)),
        "cv": float(gaps.std() / mean) if mean > 0 else 0.0,
    }


def _diurnal(counts: np.ndarray) -> list[float | None]:
    return [float(counts[hour::24].mean()) if counts[hour::24].size else None for hour in range(24)]
