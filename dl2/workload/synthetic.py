"""Seeded synthetic workloads that imitate a trace's statistics, and presets fitted to the shipped traces.

A generator draws, from one `np.random.Generator`, each job's arrival (a Poisson process, or a diurnal one:
non-homogeneous Poisson with an hourly rate profile), GPUs (a categorical size distribution) and run time (a
lognormal fitted to a median and a 90th percentile, clipped), then maps the rows onto the catalogue with
`map_trace_job` exactly as a trace is mapped. It reproduces first-order statistics (rate, diurnal shape,
sizes, duration median and p90), not the burstiness of real traces: Poisson interarrivals have CV 1, while the
Philly week's is 1.79. Check a generator against its source with `dl2.workload.describe.describe`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from types import MappingProxyType
from typing import Literal

import numpy as np

from dl2.core import ClusterSpec, Resources, Workload
from dl2.workload.mapping import DEFAULT_MAPPING, TraceMapping, map_trace_job

HOUR_S = 3600.0
FLAT_PROFILE: tuple[float, ...] = (1.0,) * 24
EIGHT_GPU_NODE = Resources(gpu=8.0, cpu=64.0, mem_gb=512.0)
"""An 8-GPU server (as `PHILLY_NODE` in `dl2.workload.traces`)."""


@dataclass(frozen=True, slots=True)
class SyntheticSpec:
    """Everything that defines a synthetic workload except the seed (see the module docstring)."""

    num_jobs: int
    """Jobs to generate (at least 1)."""
    arrivals_per_hour: float
    """Mean arrival rate over the day, jobs per hour."""
    num_gpus_probs: Mapping[int, float]
    """Job size distribution: GPUs -> probability (normalised to sum 1 when used)."""
    duration_median_s: float
    """Median run time at the requested GPUs, seconds (the lognormal's median, before clipping)."""
    duration_p90_s: float
    """90th percentile of run time, seconds (above the median: it sets the lognormal's spread)."""
    num_nodes: int
    """Servers in the cluster."""
    arrival: Literal["poisson", "diurnal"] = "poisson"
    """'poisson': constant rate; 'diurnal': the rate follows `diurnal_profile` hour by hour."""
    diurnal_profile: tuple[float, ...] = FLAT_PROFILE
    """24 relative hourly rates, hour 0 = the workload's time 0 (normalised to mean 1 when used)."""
    duration_min_s: float = 1.0
    """Shortest run time: shorter draws are raised to it."""
    duration_max_s: float = 7 * 86400.0
    """Longest run time: longer draws are cut to it."""
    mapping: TraceMapping = DEFAULT_MAPPING
    """How rows become catalogue jobs (model mix, all-reduce fraction, elasticity)."""
    node_capacity: Resources = EIGHT_GPU_NODE
    """What each server offers."""
    node_kind: str = "8gpu"
    """Hardware kind written on every node."""
    slot_s: float = 600.0
    """Scheduling interval of the workload, seconds."""
    source: str = field(default="", compare=False)
    """Where the statistics come from (for listings)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_gpus_probs", MappingProxyType(dict(sorted(self.num_gpus_probs.items()))))
        _check(self.num_jobs >= 1, f"num_jobs must be at least 1, got {self.num_jobs}")
        _check(self.num_nodes >= 1, f"num_nodes must be at least 1, got {self.num_nodes}")
        _check(self.arrival in ("poisson", "diurnal"), f"arrival must be 'poisson' or 'diurnal', got {self.arrival!r}")
        _check(_positive(self.arrivals_per_hour), f"arrivals_per_hour must be positive, got {self.arrivals_per_hour}")
        _check(_positive(self.slot_s), f"slot_s must be positive, got {self.slot_s}")
        self._check_profile()
        self._check_sizes()
        self._check_durations()

    def _check_profile(self) -> None:
        profile = self.diurnal_profile
        _check(len(profile) == 24, f"diurnal_profile needs 24 values, got {len(profile)}")
        _check(all(math.isfinite(v) and v >= 0 for v in profile), "diurnal_profile values must be finite and >= 0")
        _check(sum(profile) > 0, "diurnal_profile must have a positive rate in some hour")

    def _check_sizes(self) -> None:
        sizes = self.num_gpus_probs
        _check(bool(sizes), "num_gpus_probs is empty")
        _check(all(isinstance(g, int) and g >= 1 for g in sizes), "num_gpus_probs keys must be integers >= 1")
        _check(all(math.isfinite(p) and p >= 0 for p in sizes.values()), "num_gpus_probs must be finite and >= 0")
        _check(sum(sizes.values()) > 0, "num_gpus_probs must not all be zero")

    def _check_durations(self) -> None:
        median, p90 = self.duration_median_s, self.duration_p90_s
        _check(_positive(median) and _positive(p90) and p90 > median, "need 0 < duration_median_s < duration_p90_s")
        low, high = self.duration_min_s, self.duration_max_s
        _check(_positive(low) and _positive(high) and low <= high, "need 0 < duration_min_s <= duration_max_s")


def generate(spec: SyntheticSpec, seed: int, name: str) -> Workload:
    """A workload drawn from `spec` with `np.random.default_rng(seed)`; job `syn-<k>` is the k-th arrival."""
    rng = np.random.default_rng(seed)
    arrivals = _arrivals(spec, rng)
    sizes = list(spec.num_gpus_probs)
    weights = np.array(list(spec.num_gpus_probs.values()))
    gpus = rng.choice(sizes, size=spec.num_jobs, p=weights / weights.sum())
    durations = _durations(spec, rng)
    jobs = tuple(
        map_trace_job(f"syn-{k}", float(arrivals[k]), int(gpus[k]), float(durations[k]), rng, spec.mapping)
        for k in range(spec.num_jobs)
    )
    cluster = ClusterSpec.homogeneous(spec.num_nodes, spec.node_capacity, kind=spec.node_kind, name=name)
    source = f"synthetic (seed {seed}): {spec.num_jobs} jobs, {spec.arrival} {spec.arrivals_per_hour:g}/h"
    return Workload(name, cluster, jobs, spec.slot_s, source=source)


def scaled(spec: SyntheticSpec, num_jobs: int) -> SyntheticSpec:
    """`spec` with `num_jobs` jobs over the same time span, on proportionally more (or fewer) nodes.

    The arrival rate scales with the job count so that the span, and the load per node, stay the same: a
    10x workload is ten clusters' worth of the same traffic, which is what a scaling benchmark should measure.
    """
    if num_jobs < 1:
        raise ValueError(f"num_jobs must be at least 1, got {num_jobs}")
    factor = num_jobs / spec.num_jobs
    return replace(
        spec,
        num_jobs=num_jobs,
        arrivals_per_hour=spec.arrivals_per_hour * factor,
        num_nodes=max(1, round(spec.num_nodes * factor)),
    )


def lognormal_parameters(median_s: float, p90_s: float) -> tuple[float, float]:
    """(mu, sigma) of the lognormal with this median and 90th percentile: median = e^mu, p90 = e^(mu + z90 sigma)."""
    return math.log(median_s), math.log(p90_s / median_s) / NormalDist().inv_cdf(0.9)


def _arrivals(spec: SyntheticSpec, rng: np.random.Generator) -> np.ndarray:
    rate_per_s = spec.arrivals_per_hour / HOUR_S
    if spec.arrival == "poisson":
        return np.cumsum(rng.exponential(1.0 / rate_per_s, spec.num_jobs))
    profile = np.array(spec.diurnal_profile) / np.mean(spec.diurnal_profile)
    return _thinned_arrivals(rng, spec.num_jobs, rate_per_s, profile)


def _thinned_arrivals(rng: np.random.Generator, num_jobs: int, rate_per_s: float, profile: np.ndarray) -> np.ndarray:
    """Lewis-Shedler thinning: candidates at the peak rate, each kept with probability rate(t) / peak rate."""
    peak = float(profile.max())
    chunks: list[np.ndarray] = []
    accepted = 0
    start_s = 0.0
    while accepted < num_jobs:
        # A candidate is kept with probability 1/peak on average (the profile has mean 1): draw ~10% extra.
        batch = int((num_jobs - accepted) * peak * 1.1) + 16
        candidates = start_s + np.cumsum(rng.exponential(1.0 / (rate_per_s * peak), batch))
        hour = (candidates // HOUR_S).astype(np.int64) % 24
        kept = candidates[rng.random(batch) * peak < profile[hour]]
        chunks.append(kept)
        accepted += kept.size
        start_s = float(candidates[-1])
    return np.concatenate(chunks)[:num_jobs]


def _durations(spec: SyntheticSpec, rng: np.random.Generator) -> np.ndarray:
    mu, sigma = lognormal_parameters(spec.duration_median_s, spec.duration_p90_s)
    return np.clip(rng.lognormal(mu, sigma, spec.num_jobs), spec.duration_min_s, spec.duration_max_s)


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(f"SyntheticSpec: {message}")


# Presets. The numbers are copied from data/traces/*/stats.json (no file is read at import);
# tests/unit/workload/test_synthetic.py checks that they still match those files.
PHILLY_DIURNAL = (
    74.29, 20.71, 23.86, 27.57, 16.57, 54.29, 61.86, 36.71, 22.14, 35.57, 57.29, 97.29,
    24.14, 71.86, 22.57, 29.86, 36.86, 17.43, 51.57, 44.57, 14.57, 27.14, 19.71, 24.57,
)  # fmt: skip
ALIBABA_DIURNAL = (
    9.65, 8.65, 6.94, 8.35, 9.53, 7.35, 6.47, 6.82, 4.41, 3.12, 4.65, 5.06,
    3.53, 3.47, 3.41, 4.29, 5.0, 8.29, 13.35, 9.53, 7.76, 8.76, 9.12, 10.24,
)  # fmt: skip
ALIBABA_MEAN_NODE = Resources(gpu=5.0, cpu=88.0, mem_gb=406.0)
"""The mean node of alibaba_gpu2023/nodes_gpu.csv, rounded: 5.12 GPUs, 88.2 cores, 405.6 GB. 1,213 such nodes
hold 6,065 GPUs, 2.4% fewer than the real 6,212 (checked against the file in tests)."""

PRESETS: dict[str, SyntheticSpec] = {
    "synthetic-philly": SyntheticSpec(
        num_jobs=6391,
        arrival="diurnal",
        arrivals_per_hour=38.04,
        diurnal_profile=PHILLY_DIURNAL,
        num_gpus_probs={1: 0.8797, 2: 0.0266, 4: 0.0435, 8: 0.0454, 16: 0.0044, 32: 0.0005},
        duration_median_s=513.0,
        duration_p90_s=13360.0,
        duration_min_s=1.0,
        duration_max_s=872847.0,
        num_nodes=352,
        node_capacity=EIGHT_GPU_NODE,
        node_kind="philly-8gpu",
        source="data/traces/philly/stats.json",
    ),
    "synthetic-alibaba": SyntheticSpec(
        num_jobs=2852,
        arrival="diurnal",
        arrivals_per_hour=2852 / 408.0,  # n_jobs / span_hours (stats.json rounds it to 6.99)
        diurnal_profile=ALIBABA_DIURNAL,
        num_gpus_probs={1: 0.987, 2: 0.0021, 4: 0.0014, 8: 0.0095},
        duration_median_s=605.0,
        duration_p90_s=7147.8,
        duration_min_s=5.0,
        duration_max_s=2612709.0,
        num_nodes=1213,
        node_capacity=ALIBABA_MEAN_NODE,
        node_kind="alibaba-mean",
        source="data/traces/alibaba_gpu2023/stats.json",
    ),
    # A contended toy for tests and demos: ~10 hours of arrivals; the offered load at requested sizes is about
    # 20/h x 2 GPUs x 1.9 h mean run time = 74 of 128 GPUs, and elastic jobs want more than they request.
    "synthetic-small": SyntheticSpec(
        num_jobs=200,
        arrival="poisson",
        arrivals_per_hour=20.0,
        num_gpus_probs={1: 0.6, 2: 0.2, 4: 0.15, 8: 0.05},
        duration_median_s=1800.0,
        duration_p90_s=14400.0,
        duration_min_s=60.0,
        duration_max_s=2 * 86400.0,
        num_nodes=16,
        node_capacity=EIGHT_GPU_NODE,
        node_kind="small-8gpu",
        source="hand-made toy",
    ),
}
