"""The truth's speed and interference: the catalogue's models with a truth's departures applied.

`TrueSpeedModel` and `TrueInterference` stand where the simulator and the cluster twin take the catalogue's
`ParametricSpeedModel` and `InterferenceModel`; a job of a new type, or one with a scaling knee, is known by its id
(its spec carries only the catalogue label it declares). On a cluster of several accelerator types the simulator
wraps the speed model (`dl2.workload.accelerated_speed`), which reads the truth's own per-type speedups from
`TrueSpeedModel.accelerator_speedups`. Where the truth has slow nodes it wraps it on every cluster, one of
reference accelerators too, and reads them from `TrueSpeedModel.node_compute_factors` (the model's own
`placed_throughput` knows no nodes).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from dl2.core import Architecture, JobAllocation, JobSpec
from dl2.truth.model import NewJobType, SpeedShift, Truth
from dl2.workload.catalogue import CATALOGUE, MODEL_NAMES
from dl2.workload.interference import InterferenceModel, default_matrix
from dl2.workload.speed_fit import (
    ParametricSpeedModel,
    ShiftedSpeedModel,
    TermFactors,
    allreduce_inverse_speed,
    placement_kappa,
)


def factors(shift: SpeedShift) -> TermFactors | None:
    """The shift as the fit's term factors; None for no shift, so that a type the truth leaves alone runs at
    exactly the catalogue's speed (the same floats, not merely close ones)."""
    if shift.is_identity:
        return None
    return (shift.compute, shift.communication, shift.parameter_server, shift.overhead)


class TrueSpeedModel(ShiftedSpeedModel):
    """Placement-aware speed under a truth (the `SpeedModel` protocol)."""

    def __init__(
        self,
        truth: Truth,
        new_type_of: Mapping[str, NewJobType],
        catalogue: ParametricSpeedModel,
        knee_of: Mapping[str, int] | None = None,
        slow_nodes: frozenset[int] = frozenset(),
    ) -> None:
        """`new_type_of`: job id -> its new type, for the jobs that are of one; `knee_of`: job id -> its knee
        (`dl2.truth.model.ScalingKnee`), for the jobs that have one; `slow_nodes`: the nodes the truth's
        `SlowNodes` made slow on the cluster it is played on (`dl2.truth.realise.slow_nodes`)."""
        super().__init__(catalogue)
        self.truth = truth
        self.new_type_of = dict(new_type_of)
        self.new_types = {new.name: new for new in truth.new_types}
        self.knee_of = dict(knee_of or {})
        self._speedups = {name: truth.speedups_of(name) for name in truth.accelerator_speedups}
        """Per job type the truth names: per accelerator type, its factor over the catalogue's speed there."""
        compute = truth.slow_nodes.compute if truth.slow_nodes is not None else 1.0
        self._node_factors = {node: compute for node in sorted(slow_nodes)} if compute != 1.0 else {}
        """Per slow node, the factor on a GPU worker's computation time there."""

    def type_factors(self, model: str) -> tuple[str, TermFactors | None]:
        """A catalogue type's shift, or a new type's own (by its name: only a scheduler reading the truth, which
        reads jobs by their true type, `TrueCluster.oracle_workload`, asks for one)."""
        new = self.new_types.get(model)
        if new is not None:
            return new.base, factors(new.shift)
        return model, factors(self.truth.shift_of(model))

    def job_factors(self, spec: JobSpec) -> tuple[str, TermFactors | None]:
        new = self.new_type_of.get(spec.job_id)
        if new is not None:
            return new.base, factors(new.shift)
        return self.type_factors(spec.model)

    def accelerator_speedups(self, spec: JobSpec) -> tuple[str, Mapping[str, float]]:
        """(the job's true type, the truth's factors on its speed per accelerator type over the catalogue's):
        `dl2.workload.accelerated_speed.PerAcceleratorSpeeds`. A new type takes its own entry, never its base's."""
        new = self.new_type_of.get(spec.job_id)
        name = new.name if new is not None else spec.model
        return name, self._speedups.get(name, _NONE)

    def node_compute_factors(self) -> Mapping[int, float]:
        """Per slow node, the factor on a GPU worker's computation time there (`dl2.workload.accelerated_speed.
        PerNodeSpeeds`; empty without slow nodes)."""
        return self._node_factors

    def placed_throughput(self, spec: JobSpec, allocation: JobAllocation) -> float:
        knee = self.knee_of.get(spec.job_id)
        if knee is None or len(allocation.worker_nodes) <= knee:
            return super().placed_throughput(spec, allocation)
        base, factors = self.job_factors(spec)
        profile, fit = CATALOGUE[base], self.fits[base]
        workers = allocation.worker_nodes
        if spec.architecture is Architecture.ALLREDUCE:
            inverse = allreduce_inverse_speed(fit, profile, len(workers), len(set(workers)) > 1, factors)
        else:
            ps = allocation.ps_nodes
            if not ps:
                return 0.0
            inverse = fit.inverse_speed(len(ps), len(workers), placement_kappa(profile, workers, ps), factors)
        return 1.0 / (inverse + _held_compute(fit.coefficients[0], factors, knee, len(workers)))

    def job_throughput(self, spec: JobSpec, num_ps: int, num_workers: int) -> float:
        """A job's throughput, placement ignored (`throughput` for its type, past its knee held as
        `placed_throughput` holds it): what the candidates of a lookahead reading the truth ask per job."""
        base, factors = self.job_factors(spec)
        speed = self._fit_throughput(base, factors, num_ps, num_workers)
        knee = self.knee_of.get(spec.job_id)
        if knee is None or num_workers <= knee or speed <= 0:
            return speed
        return 1.0 / (1.0 / speed + _held_compute(self.fits[base].coefficients[0], factors, knee, num_workers))

    def held_compute(self, spec: JobSpec, num_workers: int, factors: TermFactors) -> float:
        """What a job past its knee adds to its time per unit of throughput on `num_workers` with these term
        factors (its accelerator's included: `dl2.workload.accelerated_speed.HeldComputation`); 0 before it."""
        knee = self.knee_of.get(spec.job_id)
        if knee is None or num_workers <= knee:
            return 0.0
        base, _ = self.job_factors(spec)
        return _held_compute(self.fits[base].coefficients[0], factors, knee, num_workers)

    def job_key(self, spec: JobSpec) -> object | None:
        """What makes a job's speed other than its label's (None: nothing; `dl2.workload.job_fit.JobSpeedModel`)."""
        new, knee = self.new_type_of.get(spec.job_id), self.knee_of.get(spec.job_id)
        return None if new is None and knee is None else (new.name if new else None, knee)

    def _fit_throughput(self, base: str, factors: TermFactors | None, num_ps: int, num_workers: int) -> float:
        if num_workers <= 0:
            return 0.0
        fit = self.fits[base]
        if num_ps <= 0:
            return 1.0 / allreduce_inverse_speed(fit, CATALOGUE[base], num_workers, num_workers > 1, factors)
        return 1.0 / fit.inverse_speed(num_ps, num_workers, 1.0, factors)


_NONE: Mapping[str, float] = {}


def _held_compute(t0: float, factors: TermFactors | None, knee: int, num_workers: int) -> float:
    """What a job past its knee adds to its time per unit of throughput: its compute term t0/w held at t0/k."""
    compute = factors[0] if factors is not None else 1.0
    return compute * t0 * (1.0 / knee - 1.0 / num_workers)


def true_matrix(truth: Truth) -> dict[str, dict[str, float]]:
    """The truth's slowdown of every victim by every aggressor, new types included (a new type interferes as its
    `base` does), with the truth's scale and seeded spread applied to each pair's extra slowdown."""
    profiled = default_matrix()
    base_of = {name: name for name in MODEL_NAMES} | {t.name: t.base for t in truth.new_types}
    names = list(base_of)
    rng = np.random.default_rng([truth.seed, 7])  # its own stream: which jobs are new does not move the spread
    spread = rng.uniform(1.0 - truth.interference_spread, 1.0 + truth.interference_spread, (len(names), len(names)))
    if truth.interference_scale == 1.0 and truth.interference_spread == 0.0:
        return {
            victim: {aggressor: profiled[base_of[victim]][base_of[aggressor]] for aggressor in names}
            for victim in names
        }
    return {
        victim: {
            aggressor: 1.0
            + truth.interference_scale * spread[i, j] * (profiled[base_of[victim]][base_of[aggressor]] - 1)
            for j, aggressor in enumerate(names)
        }
        for i, victim in enumerate(names)
    }


class TrueInterference(InterferenceModel):
    """The truth's interference table; a job of a new type takes its type's row and column."""

    def __init__(self, truth: Truth, new_type_of: Mapping[str, NewJobType]) -> None:
        matrix = true_matrix(truth)
        self.matrix = matrix
        names = list(matrix)
        self.model_index = {name: i for i, name in enumerate(names)}
        self.table = [[matrix[victim][aggressor] for aggressor in names] for victim in names]
        self.new_type_of = {job_id: new.name for job_id, new in new_type_of.items()}

    def type_index(self, spec: JobSpec) -> int:
        """A job's true type's row: its new type's (by id, or by name in `TrueCluster.oracle_workload`) or its
        label's."""
        return self.model_index[self.new_type_of.get(spec.job_id, spec.model)]
