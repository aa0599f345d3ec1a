"""Load-balancing placement: each task goes to the least-loaded node that fits (the Kubernetes default spread).

Load is a node's dominant utilisation, max over resource types of used / capacity; ties go to the lowest index.
"""

from __future__ import annotations

from collections.abc import Sequence

from dl2.schedulers.placement import Demand, NodeState


class LoadBalancePlacer:
    name = "load-balance"

    def choose(self, state: NodeState, demand: Demand, job_nodes: Sequence[int]) -> int:
        return state.best("least-loaded", NodeState.utilisation, demand)
