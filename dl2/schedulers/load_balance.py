"""Load-balancing placement: each task goes to the least-loaded node that fits (the Kubernetes default spread).

Load is a node's dominant utilisation, max over resource types of used / capacity; ties go to the lowest index.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dl2.schedulers.placement import fitting_nodes


class LoadBalancePlacer:
    name = "load-balance"

    def choose(self, free: np.ndarray, capacity: np.ndarray, demand: np.ndarray, job_nodes: Sequence[int]) -> int:
        fits = fitting_nodes(free, demand)
        if not fits.any():
            return -1
        with np.errstate(divide="ignore", invalid="ignore"):
            used = np.where(capacity > 0, 1.0 - free / capacity, 0.0)
        load = np.where(fits, used.max(axis=1), np.inf)
        return int(np.argmin(load))
