"""A placer that spares the servers believed slow: any placer, wrapped.

A synchronous job runs at its slowest worker's pace, so a GPU worker on a degraded server slows its whole job.
`SparingSlowNodes` asks the placer it wraps as if the slow servers were full; only where no other server fits a
GPU worker may it go on a slow one, and then only for a job none of whose tasks sit on another server (a job's
first worker: a lone slow worker beats a queued job; a second one on a slow server would pull the others down to
its pace). Parameter servers and CPU-only tasks run on CPUs: the wrapped placer places them as it always does.

Which servers are slow is asked each time (`slow`): what `dl2.workload.node_fit.NodeSpeedFit` has learned so far,
or, for a row that reads the truth, the truth's own. With none named it is the wrapped placer, call for call.
Hiding a server costs a take and a give on the round's `NodeState` per slow server and GPU task placed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dl2.schedulers.placement import Demand, NodeState, Placer


class SparingSlowNodes:
    """`placer`, with the servers `slow()` names used for GPU workers only as a last resort (module docstring)."""

    def __init__(self, placer: Placer, slow: Callable[[], frozenset[int]]) -> None:
        self.placer = placer
        self.slow = slow
        self.name = f"{placer.name}+sparing-slow-nodes"

    @property
    def needs_tenancy(self) -> bool:
        return bool(getattr(self.placer, "needs_tenancy", False))

    @property
    def reads_accelerators(self) -> bool:
        return bool(getattr(self.placer, "reads_accelerators", True))

    def choose(self, state: NodeState, demand: Demand, job_nodes: Sequence[int]) -> int:
        slow = self.slow()
        if not slow or demand[0] <= 0:
            return self.placer.choose(state, demand, job_nodes)
        hidden: list[tuple[int, Demand]] = []
        for node in slow:
            free = state.free[node]
            if free[0] > 0:
                hidden.append((node, (free[0], free[1], free[2])))
        for node, left in hidden:
            state.take(node, left)
        try:
            node = self.placer.choose(state, demand, job_nodes)
        finally:
            for hidden_node, left in hidden:
                state.give(hidden_node, left)
        if node >= 0 or not hidden or any(other not in slow for other in job_nodes):
            return node
        return self.placer.choose(state, demand, job_nodes)
