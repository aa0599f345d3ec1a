"""Interference between co-located tasks of different jobs.

Harmony (INFOCOM'19 §2) measured up to about 2x slowdown when jobs share servers, worst between
communication-heavy models that contend for the NIC and PCIe; DL2 §2 reports 27.3% average JCT variation.
The default matrix derives each pair's slowdown from the authors' per-model constants: a model's
communication intensity is the time to move its parameters over the inter-server link relative to its compute
time, 2 * size / inter_bw / compute_time; normalised on a log scale to [0, 1] it gives the victim's
sensitivity and the aggressor's pressure:

    slowdown[victim][aggressor] = 1 + 0.05 + 0.95 * sensitivity[victim] * pressure[aggressor]

so any co-location costs at least 5% and the worst pair (two communication-bound models) costs 2x.
A job's factor is the largest slowdown any other job inflicts on it on any of its servers: a synchronous job
runs at the pace of its slowest task.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

from dl2.core import InputError, JobSpec
from dl2.core.inputs import read_json
from dl2.workload.catalogue import CATALOGUE, MODEL_NAMES

BASE_SLOWDOWN = 0.05
MAX_SLOWDOWN = 2.0


def communication_intensity(model: str) -> float:
    profile = CATALOGUE[model]
    return 2.0 * profile.model_size_mb / profile.inter_bw_mb_s / profile.compute_time_s


def default_matrix() -> dict[str, dict[str, float]]:
    logs = {model: math.log(communication_intensity(model)) for model in MODEL_NAMES}
    low, high = min(logs.values()), max(logs.values())
    level = {model: (value - low) / (high - low) for model, value in logs.items()}
    span = MAX_SLOWDOWN - 1.0 - BASE_SLOWDOWN
    return {
        victim: {
            aggressor: round(1.0 + BASE_SLOWDOWN + span * level[victim] * level[aggressor], 4)
            for aggressor in MODEL_NAMES
        }
        for victim in MODEL_NAMES
    }


class InterferenceModel:
    """slowdown(victim, aggressor) >= 1 for every pair of catalogue models."""

    def __init__(self, matrix: Mapping[str, Mapping[str, float]] | None = None) -> None:
        self.matrix = {v: dict(row) for v, row in (matrix or default_matrix()).items()}
        index = {model: i for i, model in enumerate(MODEL_NAMES)}
        self.model_index = index
        self.table = [[self.matrix[v][a] for a in MODEL_NAMES] for v in MODEL_NAMES]

    @classmethod
    def from_json(cls, path: Path) -> InterferenceModel:
        """A JSON object {victim: {aggressor: slowdown}} covering every catalogue model pair."""
        matrix = read_json(path)
        for victim in MODEL_NAMES:
            row = matrix.get(victim) if isinstance(matrix, dict) else None
            if not isinstance(row, dict):
                raise InputError(str(path), "missing row", field=victim)
            for aggressor in MODEL_NAMES:
                value = row.get(aggressor)
                if isinstance(value, bool) or not isinstance(value, int | float) or not 1.0 <= value <= 1_000.0:
                    raise InputError(
                        str(path),
                        f"slowdown must be a number from 1 to 1000, got {value!r:.80}",
                        field=f"{victim}.{aggressor}",
                    )
        return cls(matrix)

    def slowdown(self, victim: str, aggressor: str) -> float:
        return self.matrix[victim][aggressor]

    def type_index(self, spec: JobSpec) -> int:
        """The row and column of `table` that a job's tasks take (its catalogue type)."""
        return self.model_index[spec.model]
