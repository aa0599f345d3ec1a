"""Isolating placement: keep a job on its own servers, and open servers that hold no other job before sharing one.

With interference (Harmony §2), what a job loses to a neighbour depends on who shares its servers, and a
synchronous job runs at the pace of its slowest task: one shared server slows the whole job. So each task goes
to a server of its own job that fits (its tasks exchange traffic over the faster intra-server link), else to the
least-loaded server that fits, which is an empty one while any is left (ties: lowest index). It never reads the
interference table: it only avoids sharing.

`isolate-strict` goes one step further where the cluster is full: a task that could only share a server with
another job is left unplaced when its job already holds a task of that role, so the job keeps running on servers
of its own, with fewer tasks than its allocation asked for, instead of running slower beside a neighbour (and
slowing it). A job's first worker and first PS are always placed, so every job the allocation admits runs.
"""

from __future__ import annotations

from collections.abc import Sequence

from dl2.schedulers.placement import Demand, NodeState


class IsolatePlacer:
    name = "isolate"

    def choose(self, state: NodeState, demand: Demand, job_nodes: Sequence[int]) -> int:
        own = state.first_fitting(job_nodes, demand)
        return own if own >= 0 else state.best("least-loaded", NodeState.utilisation, demand)


class StrictIsolatePlacer:
    name = "isolate-strict"
    needs_tenancy = True

    def choose(self, state: NodeState, demand: Demand, job_nodes: Sequence[int]) -> int:
        own = state.first_fitting(job_nodes, demand)
        if own >= 0:
            return own
        node = state.best("least-loaded", NodeState.utilisation, demand)
        if node < 0 or state.utilisation(node) <= 0.0:
            return node
        tenancy = state.tenancy
        if tenancy is None:
            raise ValueError("isolate-strict needs the tenancy that place_sticky provides")
        return -1 if tenancy.holds_role(tenancy.placing, tenancy.placing_ps) else node
