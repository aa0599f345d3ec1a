"""Bin-packing placement: keep a job together, then fill the most-loaded node that fits.

Consolidation cuts inter-server traffic (worker-PS pairs on one server use the faster intra-server link) and
leaves whole servers free for large jobs, at the price of more co-location interference.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dl2.schedulers.placement import VECTORISED_KEYS, Demand, NodeState


class BinPackPlacer:
    name = "binpack"

    def choose(self, state: NodeState, demand: Demand, job_nodes: Sequence[int]) -> int:
        own = state.first_fitting(job_nodes, demand)
        return own if own >= 0 else state.best("most-loaded", _negative_utilisation, demand)


def _negative_utilisation(state: NodeState, node: int) -> float:
    return -state.utilisation(node)


def _negative_utilisation_of_all(state: NodeState) -> np.ndarray:
    return -state.utilisation_of_all()


VECTORISED_KEYS[_negative_utilisation] = _negative_utilisation_of_all
