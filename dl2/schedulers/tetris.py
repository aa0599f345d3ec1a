"""Tetris placement (Grandl et al., SIGCOMM'14): multi-resource packing by alignment.

Each task goes to the fitting node whose free resources best align with its demand: the score is the dot
product of the node's free vector and the task's demand, both normalised by the node's capacity, so a task
lands where what it needs is plentiful and fragmentation of the other resources stays low.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dl2.schedulers.placement import fitting_nodes


class TetrisPlacer:
    name = "tetris"

    def choose(self, free: np.ndarray, capacity: np.ndarray, demand: np.ndarray, job_nodes: Sequence[int]) -> int:
        fits = fitting_nodes(free, demand)
        if not fits.any():
            return -1
        with np.errstate(divide="ignore", invalid="ignore"):
            free_share = np.where(capacity > 0, free / capacity, 0.0)
            demand_share = np.where(capacity > 0, demand / capacity, 0.0)
        score = np.where(fits, (free_share * demand_share).sum(axis=1), -np.inf)
        return int(np.argmax(score))
