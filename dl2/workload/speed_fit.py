"""The realistic speed model: a parametric, placement-aware model per job type fitted to the measured table.

Form (Optimus family, EuroSys'18 §4.2, extended with placement): the time per unit of throughput is

    1 / S(p, w) = t0 / w + t1 + kappa * (t2 / p + t3 * w / p) + t4 * w + t5 * p

t0/w: computation split across workers; t1: fixed synchronisation overhead; t2/p: parameters exchanged with p
parameter servers; t3 w/p: each PS serving w workers (the PS network bottleneck that makes the measured optimum
"many PS, few workers"); t4 w, t5 p: per-task overheads. Coefficients are non-negative and fitted by weighted
NNLS (relative error) to the measured rows, the nine failed zero-speed runs treated as missing.

Placement enters through kappa: the measurements crossed servers, so kappa = 1 when every worker-PS pair is on
different servers and kappa = inter_bw / intra_bw (at most 1) when all pairs share a server; in between it is the
pair-weighted mix. All-reduce jobs (DL2 §7) have no PS: a ring all-reduce moves 2 (w-1)/w model sizes per step
at the slowest link's bandwidth (intra-server if the ring stays on one server), converted to the same units
with the model's measured compute time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from dl2.core import Architecture, JobAllocation, JobSpec
from dl2.workload.catalogue import CATALOGUE, MODEL_NAMES, ModelProfile
from dl2.workload.measurements import measurements_of

FEATURE_NAMES = ("t0/w", "t1", "t2/p", "t3*w/p", "t4*w", "t5*p")

TermFactors = tuple[float, float, float, float]
"""Factors on groups of the form's terms: (compute t0, communication t2 and t3, parameter server t3 alone,
overhead t1, t4 and t5)."""


def _features(num_ps: np.ndarray, num_workers: np.ndarray) -> np.ndarray:
    ones = np.ones_like(num_ps)
    return np.column_stack([1 / num_workers, ones, 1 / num_ps, num_workers / num_ps, num_workers, num_ps])


@dataclass(frozen=True, slots=True)
class FittedModel:
    """One job type's fitted coefficients and its fit error on the measured rows."""

    model: str
    coefficients: tuple[float, ...]
    """t0..t5 of the module docstring."""
    mape: float
    """Mean absolute percentage error of the fitted speed on the measured (non-failed) rows."""
    p90_ape: float
    """90th percentile of the absolute percentage error."""
    num_rows: int

    def inverse_speed(
        self, num_ps: float, num_workers: float, kappa: float = 1.0, factors: TermFactors | None = None
    ) -> float:
        """Seconds per unit of throughput; `factors` scale groups of terms (a cluster whose truth departs from
        the fit: `dl2.truth`)."""
        t0, t1, t2, t3, t4, t5 = self.coefficients
        if factors is None:
            return (
                t0 / num_workers
                + t1
                + kappa * (t2 / num_ps + t3 * num_workers / num_ps)
                + t4 * num_workers
                + t5 * num_ps
            )
        compute, communication, parameter_server, overhead = factors
        return (
            compute * t0 / num_workers
            + overhead * (t1 + t4 * num_workers + t5 * num_ps)
            + kappa * communication * (t2 / num_ps + parameter_server * t3 * num_workers / num_ps)
        )


def fit_model(model: str) -> FittedModel:
    rows = measurements_of(model, include_failed=False)
    num_ps = np.array([r.num_ps for r in rows], dtype=float)
    num_workers = np.array([r.num_workers for r in rows], dtype=float)
    speed = np.array([r.speed for r in rows])
    target = 1.0 / speed
    weights = 1.0 / target  # relative error: every row counts the same whatever its speed
    features = _features(num_ps, num_workers)
    coefficients, _ = nnls(features * weights[:, None], target * weights)
    predicted = 1.0 / (features @ coefficients)
    errors = np.abs(predicted - speed) / speed
    return FittedModel(
        model, tuple(float(c) for c in coefficients), float(errors.mean()), float(np.quantile(errors, 0.9)), len(rows)
    )


class ParametricSpeedModel:
    """Placement-aware speed for every catalogue model (see the module docstring)."""

    def __init__(self) -> None:
        self.fits: dict[str, FittedModel] = {model: fit_model(model) for model in MODEL_NAMES}

    def throughput(self, model: str, num_ps: int, num_workers: int) -> float:
        """Placement ignored: every worker-PS pair crosses servers, as in the measurements."""
        if num_workers <= 0:
            return 0.0
        if num_ps <= 0:
            return self._allreduce(CATALOGUE[model], num_workers, spans_servers=num_workers > 1)
        return 1.0 / self.fits[model].inverse_speed(num_ps, num_workers)

    def placed_throughput(self, spec: JobSpec, allocation: JobAllocation) -> float:
        workers = allocation.worker_nodes
        if not workers:
            return 0.0
        profile = CATALOGUE[spec.model]
        if spec.architecture is Architecture.ALLREDUCE:
            return self._allreduce(profile, len(workers), spans_servers=len(set(workers)) > 1)
        ps = allocation.ps_nodes
        if not ps:
            return 0.0
        return 1.0 / self.fits[spec.model].inverse_speed(len(ps), len(workers), placement_kappa(profile, workers, ps))

    def _allreduce(self, profile: ModelProfile, num_workers: int, spans_servers: bool) -> float:
        return 1.0 / allreduce_inverse_speed(self.fits[profile.name], profile, num_workers, spans_servers)


class ShiftedSpeedModel(ParametricSpeedModel):
    """The catalogue's fits with factors on their terms, per type or per job: a cluster's truth (`dl2.truth`), or
    what its records calibrate (`dl2.workload.calibration`). Subclasses say which fit and factors apply."""

    def __init__(self, catalogue: ParametricSpeedModel) -> None:
        self.fits = catalogue.fits  # the same fits: only the factors differ

    def type_factors(self, model: str) -> tuple[str, TermFactors | None]:
        """(the catalogue type whose fit a type's speed starts from, the factors on it; None: the fit itself)."""
        return model, None

    def job_factors(self, spec: JobSpec) -> tuple[str, TermFactors | None]:
        """The same for one job (a job may be other than its label says)."""
        return self.type_factors(spec.model)

    def throughput(self, model: str, num_ps: int, num_workers: int) -> float:
        if num_workers <= 0:
            return 0.0
        base, factors = self.type_factors(model)
        fit = self.fits[base]
        if num_ps <= 0:
            return 1.0 / allreduce_inverse_speed(fit, CATALOGUE[base], num_workers, num_workers > 1, factors)
        return 1.0 / fit.inverse_speed(num_ps, num_workers, 1.0, factors)

    def placed_throughput(self, spec: JobSpec, allocation: JobAllocation) -> float:
        workers = allocation.worker_nodes
        if not workers:
            return 0.0
        base, factors = self.job_factors(spec)
        return factored_placed_throughput(self.fits[base], CATALOGUE[base], spec.architecture, allocation, factors)


def factored_placed_throughput(
    fit: FittedModel,
    profile: ModelProfile,
    architecture: Architecture,
    allocation: JobAllocation,
    factors: TermFactors | None,
) -> float:
    """Throughput of a job of this fit with exactly this placement, `factors` on its terms (None: the fit itself)."""
    workers = allocation.worker_nodes
    if not workers:
        return 0.0
    if architecture is Architecture.ALLREDUCE:
        return 1.0 / allreduce_inverse_speed(fit, profile, len(workers), len(set(workers)) > 1, factors)
    ps = allocation.ps_nodes
    if not ps:
        return 0.0
    kappa = placement_kappa(profile, workers, ps)
    return 1.0 / fit.inverse_speed(len(ps), len(workers), kappa, factors)


def allreduce_inverse_speed(
    fit: FittedModel, profile: ModelProfile, num_workers: int, spans_servers: bool, factors: TermFactors | None = None
) -> float:
    """Seconds per unit of throughput of a ring all-reduce job (the module docstring); `factors` as in
    `FittedModel.inverse_speed` (the ring's transfer is communication; a parameter server has no part)."""
    t0, t1, _t2, _t3, t4, _t5 = fit.coefficients
    compute, communication, _parameter_server, overhead = factors or (1.0, 1.0, 1.0, 1.0)
    return (
        compute * t0 / num_workers
        + overhead * (t1 + t4 * num_workers)
        + communication * ring_term(fit, profile, num_workers, spans_servers)
    )


def ring_term(fit: FittedModel, profile: ModelProfile, num_workers: int, spans_servers: bool) -> float:
    """The ring all-reduce's transfer in seconds per unit of throughput: 2 (w-1)/w model sizes at the slowest
    link's bandwidth, in the fit's units (its compute term is the measured compute time)."""
    units_per_second = fit.coefficients[0] / profile.compute_time_s
    bandwidth = profile.inter_bw_mb_s if spans_servers else max(profile.intra_bw_mb_s, profile.inter_bw_mb_s)
    ring_s = 2.0 * (num_workers - 1) / num_workers * profile.model_size_mb / bandwidth
    return units_per_second * ring_s / num_workers


def placement_kappa(profile: ModelProfile, worker_nodes: tuple[int, ...], ps_nodes: tuple[int, ...]) -> float:
    """Communication-time factor of this placement relative to the all-crossing measurements."""
    # (worker, PS) pairs on one server, counted in C (a `Counter` per call cost more than the count: a job has a
    # few tasks, and a what-if run asks this for every job it starts or moves)
    co_located_pairs = sum(worker_nodes.count(node) for node in ps_nodes)
    same_fraction = co_located_pairs / (len(worker_nodes) * len(ps_nodes))
    intra_factor = min(1.0, profile.inter_bw_mb_s / profile.intra_bw_mb_s)
    return (1.0 - same_fraction) + same_fraction * intra_factor
