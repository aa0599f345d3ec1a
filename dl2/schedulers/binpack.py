"""Bin-packing placement: keep a job together, then fill the most-loaded node that fits.

Consolidation cuts inter-server traffic (worker-PS pairs on one server use the faster intra-server link) and
leaves whole servers free for large jobs, at the price of more co-location interference.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dl2.schedulers.placement import fitting_nodes


class BinPackPlacer:
    name = "binpack"

    def choose(self, free: np.ndarray, capacity: np.ndarray, demand: np.ndarray, job_nodes: Sequence[int]) -> int:
        fits = fitting_nodes(free, demand)
        if not fits.any():
            return -1
        for node in job_nodes:
            if fits[node]:
                return int(node)
        with np.errstate(divide="ignore", invalid="ignore"):
            used = np.where(capacity > 0, 1.0 - free / capacity, 0.0)
        load = np.where(fits, used.sum(axis=1), -np.inf)
        return int(np.argmax(load))
