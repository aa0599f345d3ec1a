"""Speed models: how fast a job trains with a given number of workers and parameter servers.

Throughput is in the units of the authors' measured table (sum of per-worker speeds); a job advances
`throughput / samples_per_epoch` epochs per second.

- `RbfSpeedModel` (compatibility mode) reproduces the authors' simulator exactly: SciPy's legacy linear `Rbf`
  through every measured row of the model, failed zero-speed rows included, extrapolating past the grid.
  Placement does not matter.
- `ParametricSpeedModel` (realistic mode, `dl2.workload.speed_fit`) is fitted to the table and depends on
  placement.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
from scipy.interpolate import Rbf

from dl2.core import Architecture, JobAllocation, JobSpec
from dl2.workload.catalogue import MODEL_NAMES
from dl2.workload.measurements import measurements_of


class SpeedModel(Protocol):
    """What the simulator and oracle schedulers ask of a speed model."""

    def throughput(self, model: str, num_ps: int, num_workers: int) -> float:
        """Throughput with this many PS and workers, placement ignored (zero without workers)."""
        ...

    def placed_throughput(self, spec: JobSpec, allocation: JobAllocation) -> float:
        """Throughput of this job with exactly this placement (before interference and noise)."""
        ...


class RbfSpeedModel:
    """The authors' speed function: `Rbf(num_ps, num_workers, speed, function='linear')` per model.

    Values are tabulated once for every (ps, workers) up to `max_tasks`, so a lookup is O(1).
    """

    def __init__(self, max_tasks: int = 64) -> None:
        self.max_tasks = max_tasks
        self._tables: dict[str, list[list[float]]] = {}
        for model in MODEL_NAMES:
            rows = measurements_of(model, include_failed=True)  # their fit keeps failed runs as zeros
            rbf = Rbf(
                [r.num_ps for r in rows], [r.num_workers for r in rows], [r.speed for r in rows], function="linear"
            )
            grid_ps, grid_workers = np.meshgrid(np.arange(max_tasks + 1), np.arange(max_tasks + 1), indexing="ij")
            values = np.asarray(rbf(grid_ps.ravel().astype(float), grid_workers.ravel().astype(float)))
            table = values.reshape(max_tasks + 1, max_tasks + 1)
            table[0, :] = 0.0  # a PS job with no PS or no worker makes no progress
            table[:, 0] = 0.0
            self._tables[model] = table.tolist()

    def table(self, model: str) -> list[list[float]]:
        """throughput[num_ps][num_workers] (row and column 0 are zero)."""
        return self._tables[model]

    def throughput(self, model: str, num_ps: int, num_workers: int) -> float:
        if num_ps > self.max_tasks or num_workers > self.max_tasks:
            raise ValueError(f"RbfSpeedModel tabulated up to {self.max_tasks} tasks; got ps={num_ps} w={num_workers}")
        return self._tables[model][num_ps][num_workers]

    def placed_throughput(self, spec: JobSpec, allocation: JobAllocation) -> float:
        if spec.architecture is Architecture.ALLREDUCE:
            raise ValueError("the authors' measured table has parameter-server jobs only; use realistic mode")
        return self._tables[spec.model][allocation.num_ps][allocation.num_workers]
