"""Run metrics: JCT statistics, makespan, queueing, utilisation, rescales and finish-time fairness.

Finish-time fairness follows Themis (NSDI'20): rho = JCT / isolated run time, where the isolated run time is the
job alone at the workers and PS it requested, packed on one server if it fits (`JobRecord.isolated_s`);
rho <= 1 means the job did at least as well as on a private cluster.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dl2.sim.simulator import SimResult


@dataclass(frozen=True, slots=True)
class RunMetrics:
    """Summary of one run (seconds unless stated otherwise)."""

    workload: str
    scheduler: str
    mode: str
    seed: int
    num_jobs: int
    avg_jct_s: float
    median_jct_s: float
    p95_jct_s: float
    p99_jct_s: float
    makespan_s: float
    """Last finish time minus first arrival."""
    avg_queueing_s: float
    """Mean time from arrival to the start of the first slot in which the job held tasks (a restore pause in that
    slot is not counted as queueing)."""
    avg_gpu_utilisation: float
    """Mean over slots of allocated GPUs / cluster GPUs."""
    total_rescales: int
    avg_ftf_rho: float
    """Mean finish-time fairness rho = JCT / isolated run time."""
    max_ftf_rho: float
    frac_ftf_rho_above_1: float
    slot_s: float
    num_slots: int
    wall_s: float

    @property
    def avg_jct_slots(self) -> float:
        return self.avg_jct_s / self.slot_s

    @property
    def makespan_slots(self) -> float:
        return self.makespan_s / self.slot_s

    def to_json_dict(self, compat: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {name: getattr(self, name) for name in self.__dataclass_fields__}
        if compat:
            data["avg_jct_slots"] = self.avg_jct_slots
            data["makespan_slots"] = self.makespan_slots
        return data


def summarize(result: SimResult) -> RunMetrics:
    jobs = result.jobs
    jct = np.array([job.jct_s for job in jobs])
    makespan = max(job.finish_s for job in jobs) - min(job.arrival_s for job in jobs)
    rho = np.array(
        [
            job.jct_s / job.isolated_s if job.isolated_s > 0 and math.isfinite(job.isolated_s) else math.nan
            for job in jobs
        ]
    )
    rho = rho[np.isfinite(rho)]
    utilisation = float(np.mean(result.allocated_gpu_fraction)) if result.allocated_gpu_fraction else 0.0
    return RunMetrics(
        workload=result.workload,
        scheduler=result.scheduler,
        mode=result.mode,
        seed=result.seed,
        num_jobs=len(jobs),
        avg_jct_s=float(jct.mean()),
        median_jct_s=float(np.median(jct)),
        p95_jct_s=float(np.percentile(jct, 95)),
        p99_jct_s=float(np.percentile(jct, 99)),
        makespan_s=float(makespan),
        avg_queueing_s=float(np.mean([job.queueing_s for job in jobs])),
        avg_gpu_utilisation=utilisation,
        total_rescales=sum(job.num_rescales for job in jobs),
        avg_ftf_rho=float(rho.mean()) if rho.size else math.nan,
        max_ftf_rho=float(rho.max()) if rho.size else math.nan,
        frac_ftf_rho_above_1=float((rho > 1.0).mean()) if rho.size else math.nan,
        slot_s=result.slot_s,
        num_slots=result.num_slots,
        wall_s=result.wall_s,
    )


def report_unit(mode: str) -> tuple[float, str]:
    """(seconds per unit, unit) in which JCTs are reported: slots of 1200 s in compatibility mode (the authors'
    unit), hours otherwise."""
    return (1200.0, "slots") if mode == "compat" else (3600.0, "h")


def interval_text(difference: Mapping[str, float]) -> str:
    """A relative difference (`mean`, `low`, `high`: a mean and its 95% interval) as reports write it:
    '-3.2% [-8.1%, +1.7%]'."""
    return f"{difference['mean']:+.1%} [{difference['low']:+.1%}, {difference['high']:+.1%}]"


def mean_ci95(values: list[float]) -> tuple[float, float]:
    """Mean and half-width of a 95% confidence interval (Student t; 0 for a single value)."""
    array = np.asarray(values, dtype=float)
    mean = float(array.mean())
    if array.size < 2:
        return mean, 0.0
    from scipy import stats

    half = float(stats.t.ppf(0.975, array.size - 1) * array.std(ddof=1) / math.sqrt(array.size))
    return mean, half
