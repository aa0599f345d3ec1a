"""Optimus as it really works (EuroSys'18 §4.2): the speed function is fitted online from observed progress.

The scheduler keeps, per job type, the throughput it observed at each (PS, workers) count it has run, and fits
Optimus's model 1/S = t0/w + t1 + t2/p + t3 w/p + t4 w + t5 p by non-negative least squares once it has seen
enough distinct configurations. Until then it uses a prior: the catalogue's typical speed curve (fitted on the
measured table of all models, normalised to S(1, 1) = 1), scaled to the throughput it has observed for that
type. Observations include placement, interference and noise, so the fit is only as good as a real cluster
would let it be. Allocation then follows the marginal-gain rule of `dl2.schedulers.optimus`.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from scipy.optimize import nnls

from dl2.core import Architecture, ClusterView, JobSpec
from dl2.schedulers.base import HeuristicScheduler
from dl2.schedulers.optimus import marginal_gain_requests
from dl2.schedulers.placement import Placer
from dl2.schedulers.requests import Counts, RequestStream
from dl2.workload.catalogue import MODEL_NAMES
from dl2.workload.speed_fit import ParametricSpeedModel

MIN_DISTINCT_CONFIGS = 6
"""Distinct (PS, workers) observations needed before a type's own fit replaces the prior."""


def _features(num_ps: float, num_workers: float) -> list[float]:
    return [1 / num_workers, 1.0, 1 / num_ps, num_workers / num_ps, num_workers, num_ps]


def typical_curve() -> np.ndarray:
    """Coefficients of the prior: the mean of the catalogue models' fits, each normalised to S(1, 1) = 1."""
    model = ParametricSpeedModel()
    normalised = []
    for name in MODEL_NAMES:
        fit = model.fits[name]
        normalised.append(np.array(fit.coefficients) / fit.inverse_speed(1, 1))
    prior: np.ndarray = np.mean(normalised, axis=0)
    return prior


class OptimusFitted(HeuristicScheduler):
    name = "optimus-fitted"

    def __init__(self, compat: bool = False, placer: Placer | None = None) -> None:
        super().__init__(compat, placer)
        self.prior = typical_curve()

    def reset(self) -> None:
        super().reset()
        self.observed: dict[str, dict[tuple[int, int], tuple[float, int]]] = defaultdict(dict)
        self.coefficients: dict[str, np.ndarray] = {}
        self._estimates: dict[str, dict[tuple[int, int], float]] = {}
        """Per model, estimated throughput per (PS, workers), dropped whenever that model is refitted."""

    def _observe(self, view: ClusterView) -> None:
        changed: set[str] = set()
        for job in view.jobs:
            allocation = job.allocation
            if job.last_throughput <= 0 or not allocation.worker_nodes:
                continue
            key = (allocation.num_ps, allocation.num_workers)
            samples = self.observed[job.spec.model]
            total, count = samples.get(key, (0.0, 0))
            samples[key] = (total + job.last_throughput, count + 1)
            changed.add(job.spec.model)
        for model in changed:
            self._refit(model)

    def _refit(self, model: str) -> None:
        self._estimates.pop(model, None)
        samples = {key: total / count for key, (total, count) in self.observed[model].items() if key[0] > 0}
        if len(samples) >= MIN_DISTINCT_CONFIGS:
            features = np.array([_features(p, w) for p, w in samples])
            target = np.array([1.0 / s for s in samples.values()])
            weights = 1.0 / target
            coefficients, _ = nnls(features * weights[:, None], target * weights)
            if np.any(coefficients > 0):
                self.coefficients[model] = coefficients
                return
        # scale the prior so that it matches the mean observed throughput of this type
        ratios = [s * float(np.dot(self.prior, _features(p, w))) for (p, w), s in samples.items()]
        scale = float(np.mean(ratios)) if ratios else 1.0
        self.coefficients[model] = self.prior / scale

    def _estimate(self, spec: JobSpec, num_ps: int, num_workers: int) -> float:
        if num_workers <= 0:
            return 0.0
        # all-reduce jobs have no PS term: evaluate the curve as if communication went through one ideal PS
        ps = num_ps if spec.architecture is Architecture.PS else max(num_workers, 1)
        if ps <= 0:
            return 0.0
        estimates = self._estimates.setdefault(spec.model, {})
        value = estimates.get((ps, num_workers))
        if value is None:
            t0, t1, t2, t3, t4, t5 = self.coefficients.get(spec.model, self.prior)
            inverse = t0 / num_workers + t1 + t2 / ps + t3 * num_workers / ps + t4 * num_workers + t5 * ps
            value = estimates[(ps, num_workers)] = 1.0 / inverse
        return value

    def requests(self, view: ClusterView, counts: Counts) -> RequestStream:
        self._observe(view)
        return marginal_gain_requests(view, counts, self._estimate, bundle_first=not self.compat)
