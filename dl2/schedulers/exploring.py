"""Exploration kept to a canary scope, with the propensity of every decision logged.

A challenger can be evaluated off-policy from a cluster's records (`dl2.rl.off_policy`) only where the records
say how likely each applied decision was: a deterministic scheduler gives each job one allocation with
probability 1, and an estimator can correct its reward model only on the challenger's actions that were taken.
`ExploringScheduler` wraps the scheduler in charge: each job in the scope (a stable fraction of the jobs, by a
hash of its id, so that a job stays in or out for its whole life) has its worker count moved one down with
probability epsilon / 2 and one up with probability epsilon / 2, where that is possible (at least one worker
kept, at most its limit, a node with room for the new one); a move that is not possible leaves the count as
it is, and the propensity of the applied count adds up the probabilities of the draws that lead to it. Jobs out
of the scope, and jobs the scheduler gives no worker, get exactly what the scheduler decided.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from dl2.core import Allocation, ClusterView, JobAllocation, Scheduler
from dl2.schedulers.placement import Demand, NodeState


@dataclass(frozen=True, slots=True)
class ExplorationScope:
    epsilon: float = 0.2
    """Probability that a job in the scope has its worker count moved (half down, half up)."""
    fraction: float = 0.5
    """Share of the jobs in the scope (the canary's jobs), chosen by a hash of the job id."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.epsilon <= 1.0:
            raise ValueError(f"epsilon must be within [0, 1], got {self.epsilon}")
        if not 0.0 <= self.fraction <= 1.0:
            raise ValueError(f"fraction must be within [0, 1], got {self.fraction}")

    def covers(self, job_id: str) -> bool:
        return zlib.crc32(job_id.encode()) / 2**32 < self.fraction


class ExploringScheduler:
    """`base`'s decisions, explored around within `scope`; `propensities` holds, after each `schedule`, the
    probability of each explored job's applied allocation given `base`'s (jobs not listed: 1)."""

    def __init__(self, base: Scheduler, scope: ExplorationScope, seed: int = 0) -> None:
        self.base = base
        self.scope = scope
        self.seed = seed
        self.name = base.name
        self.propensities: dict[str, float] = {}
        self.reset()

    def reset(self) -> None:
        self.base.reset()
        self.rng = np.random.default_rng(self.seed)
        self.propensities = {}

    def schedule(self, view: ClusterView) -> Allocation:
        decided = self.base.schedule(view)
        self.propensities = {}
        if self.scope.epsilon == 0.0:
            return decided
        state = _state_after(view, decided)
        jobs = dict(decided.jobs)
        for job in view.jobs:
            spec = job.spec
            placed = jobs.get(spec.job_id)
            if placed is None or not placed.worker_nodes or not self.scope.covers(spec.job_id):
                continue
            demand = spec.worker_demand.as_tuple()
            workers = placed.worker_nodes
            can_shrink = len(workers) > 1
            room = len(workers) < spec.max_workers
            grow_node = state.first_fitting(list(workers) + list(placed.ps_nodes), demand) if room else -1
            if room and grow_node < 0:
                fitting = state.fitting_nodes(demand)
                grow_node = int(fitting[0]) if len(fitting) else -1
            move, self.propensities[spec.job_id] = drawn_move(
                self.rng.random(), self.scope.epsilon, can_shrink, grow_node >= 0
            )
            if move == -1:
                state.give(workers[-1], demand)
                jobs[spec.job_id] = JobAllocation(workers[:-1], placed.ps_nodes)
            elif move == 1:
                state.take(grow_node, demand)
                jobs[spec.job_id] = JobAllocation((*workers, grow_node), placed.ps_nodes)
        return Allocation(jobs)


def drawn_move(draw: float, epsilon: float, can_shrink: bool, can_grow: bool) -> tuple[int, float]:
    """A job's worker move for a uniform `draw` in [0, 1): -1 with probability epsilon / 2, +1 with epsilon / 2,
    where possible, else 0; and the probability of the move made (a move that is not possible leaves the count
    as it is, so its probability adds to staying)."""
    half = epsilon / 2
    if draw < half and can_shrink:
        return -1, half
    if half <= draw < epsilon and can_grow:
        return 1, half
    return 0, 1.0 - epsilon + half * (not can_shrink) + half * (not can_grow)


def _state_after(view: ClusterView, allocation: Allocation) -> NodeState:
    """The nodes' free resources once `allocation` is placed."""
    used: dict[Demand, list[int]] = {}
    for job in view.jobs:
        placed = allocation.get(job.spec.job_id)
        used.setdefault(job.spec.worker_demand.as_tuple(), []).extend(placed.worker_nodes)
        used.setdefault(job.spec.ps_demand.as_tuple(), []).extend(placed.ps_nodes)
    return NodeState(view.cluster, used)
