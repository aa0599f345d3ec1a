"""The truth's speed and interference: the catalogue's models with a truth's departures applied.

`TrueSpeedModel` and `TrueInterference` stand where the simulator and the cluster twin take the catalogue's
`ParametricSpeedModel` and `InterferenceModel`; a job of a new type is known by its id (its spec carries only the
catalogue label it declares).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from dl2.core import JobSpec
from dl2.truth.model import NewJobType, SpeedShift, Truth
from dl2.workload.catalogue import MODEL_NAMES
from dl2.workload.interference import InterferenceModel, default_matrix
from dl2.workload.speed_fit import ParametricSpeedModel, ShiftedSpeedModel, TermFactors


def factors(shift: SpeedShift) -> TermFactors | None:
    """The shift as the fit's term factors; None for no shift, so that a type the truth leaves alone runs at
    exactly the catalogue's speed (the same floats, not merely close ones)."""
    if shift.is_identity:
        return None
    return (shift.compute, shift.communication, shift.parameter_server, shift.overhead)


class TrueSpeedModel(ShiftedSpeedModel):
    """Placement-aware speed under a truth (the `SpeedModel` protocol)."""

    def __init__(self, truth: Truth, new_type_of: Mapping[str, NewJobType], catalogue: ParametricSpeedModel) -> None:
        """`new_type_of`: job id -> its new type, for the jobs that are of one."""
        super().__init__(catalogue)
        self.truth = truth
        self.new_type_of = dict(new_type_of)
        self.new_types = {new.name: new for new in truth.new_types}

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
