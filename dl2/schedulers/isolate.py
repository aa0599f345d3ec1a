"""Isolating placement: keep a job on its own servers, and open servers that hold no other job before sharing one.

With interference (Harmony §2), what a job loses to a neighbour depends on who shares its servers, and a
synchronous job runs at the pace of its slowest task: one shared server slows the whole job. So each task goes
to a server of its own job that fits (its tasks exchange traffic over the faster intra-server link), else to the
least-loaded server that fits, which is an empty one while any is left (ties: lowest index). It never reads the
interference table: it only avoids sharing.
"""

from __future__ import annotations

from collections.abc import Sequence

from dl2.schedulers.placement import Demand, NodeState


class IsolatePlacer:
    name = "isolate"

    def choose(self, state: NodeState, demand: Demand, job_nodes: Sequence[int]) -> int:
        own = state.first_fitting(job_nodes, demand)
        return own if own >= 0 else state.best("least-loaded", NodeState.utilisation, demand)
