"""Tetris placement (Grandl et al., SIGCOMM'14): multi-resource packing by alignment.

Each task goes to the fitting node whose free resources best align with its demand: the score is the dot
product of the node's free vector and the task's demand, both normalised by the node's capacity, so a task
lands where what it needs is plentiful and fragmentation of the other resources stays low.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from dl2.schedulers.placement import Demand, NodeState


class TetrisPlacer:
    name = "tetris"

    def choose(self, state: NodeState, demand: Demand, job_nodes: Sequence[int]) -> int:
        # one ranking per distinct demand vector (a handful: one per job type and role)
        return state.best(("tetris", demand), partial(_negative_alignment, demand), demand)


def _negative_alignment(demand: Demand, state: NodeState, node: int) -> float:
    free, capacity = state.free[node], state.capacity[node]
    return -sum(f / c * d / c for f, c, d in zip(free, capacity, demand, strict=True) if c > 0)
