"""What Harmony's placer sees at a decision: one row per server that could host the job's next task, and the
job's own row.

A server's row holds the job's own tasks there (shares of its targets), the other jobs there by type, their
count, whether there are none, and the free GPU, CPU and memory fractions; one more row, flagged in the last
column, means "leave this role's remaining tasks unplaced". `candidates` builds the rows from scratch.
`RoundCandidates` gives the same rows, to the bit, at a fraction of the cost: a server's row is the same for
every job that holds nothing on it, so the rows of all servers are built once per placement round and a row is
rebuilt only when a task lands on or leaves its server; only the few servers of the job being placed are then
adjusted at a decision.
"""

from __future__ import annotations

import numpy as np

from dl2.core import Architecture
from dl2.placement.config import JOB_INPUTS, SERVER_INPUTS
from dl2.placement.features import NUM_TYPES, SCALE_TASKS
from dl2.schedulers.placement import Demand, NodeState
from dl2.schedulers.tenancy import Tenancy

SKIP_COLUMN = SERVER_INPUTS - 1
"""The column that flags the 'leave unplaced' row."""
_OTHERS = slice(2, 2 + NUM_TYPES)
_TOTAL, _NONE = 2 + NUM_TYPES, 3 + NUM_TYPES
_FREE = slice(4 + NUM_TYPES, 7 + NUM_TYPES)


def candidates(
    state: NodeState, tenancy: Tenancy, rank: int, demand: Demand, may_skip: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(fitting nodes, one input row per fitting node plus the 'leave unplaced' row when `may_skip`)."""
    nodes = state.fitting_nodes(demand)
    count = len(nodes)
    rows = np.zeros((count + int(may_skip), SERVER_INPUTS), np.float32)
    others = rows[:count, _OTHERS]
    others[:] = tenancy.jobs_of_type[nodes]
    workers, ps = tenancy.targets[rank]
    own_type = tenancy.type_of[rank]
    for node, (held_workers, held_ps) in tenancy.holdings(rank).items():
        position = int(np.searchsorted(nodes, node))
        if position < count and nodes[position] == node:
            rows[position, 0] = held_workers / max(workers, 1)
            rows[position, 1] = held_ps / max(ps, 1)
            others[position, own_type] -= 1.0
    total = others.sum(axis=1)
    rows[:count, _TOTAL] = total
    rows[:count, _NONE] = total == 0
    rows[:count, _FREE] = state.free_fractions()[nodes]
    if may_skip:
        rows[count, SKIP_COLUMN] = 1.0
    return nodes, rows


class RoundCandidates:
    """`candidates` for the decisions of one placement round, kept up to date server by server.

    Contract: the tenancy of a server changes only together with its resources (`place_sticky` takes or gives
    a task's resources whenever it adds or removes the task), so the state's change log says which rows to
    rebuild."""

    def __init__(self, state: NodeState) -> None:
        tenancy = state.tenancy
        if tenancy is None:
            raise ValueError("candidate rows need the tenancy that place_sticky provides")
        self.state = state
        self.tenancy = tenancy
        self._rows = np.zeros((state.num_nodes, SERVER_INPUTS), np.float32)
        """Per server, its row as a job holding nothing there sees it."""
        self._mark = state.changes()
        self._rebuild(slice(None))

    def rows(self, rank: int, demand: Demand, may_skip: bool) -> tuple[np.ndarray, np.ndarray]:
        """What `candidates(state, tenancy, rank, demand, may_skip)` returns now."""
        state, tenancy = self.state, self.tenancy
        if state.changes() > self._mark:
            changed = state.changed_since(self._mark)
            self._mark = state.changes()
            self._rebuild(np.array(changed, dtype=np.int64))
        nodes = state.fitting_nodes(demand)
        count = len(nodes)
        rows = np.empty((count + int(may_skip), SERVER_INPUTS), np.float32)
        np.take(self._rows, nodes, axis=0, out=rows[:count])
        if may_skip:
            rows[count] = 0.0
            rows[count, SKIP_COLUMN] = 1.0
        workers, ps = tenancy.targets[rank]
        own_type = 2 + tenancy.type_of[rank]
        for node, (held_workers, held_ps) in tenancy.holdings(rank).items():
            position = int(np.searchsorted(nodes, node))
            if position < count and nodes[position] == node:
                row = rows[position]
                row[0] = held_workers / max(workers, 1)
                row[1] = held_ps / max(ps, 1)
                row[own_type] -= 1.0
                total = row[_OTHERS].sum()
                row[_TOTAL] = total
                row[_NONE] = total == 0
        return nodes, rows

    def _rebuild(self, nodes: np.ndarray | slice) -> None:
        """Rebuild the rows of `nodes` (indices, or a slice: every server, without gathering)."""
        block = np.zeros((len(self._rows[nodes]), SERVER_INPUTS), np.float32)
        block[:, _OTHERS] = self.tenancy.jobs_of_type[nodes]
        total = block[:, _OTHERS].sum(axis=1)
        block[:, _TOTAL] = total
        block[:, _NONE] = total == 0
        block[:, _FREE] = self.state.free_fractions()[nodes]
        self._rows[nodes] = block


def job_inputs(tenancy: Tenancy, rank: int, is_ps: bool) -> np.ndarray:
    """The job's row: type, architecture, role, targets, the shares of its targets it holds, its servers and the
    other jobs on them."""
    spec = tenancy.jobs[rank].spec
    workers, ps = tenancy.targets[rank]
    held = tenancy.holdings(rank)
    neighbours = {other for node in held for other in tenancy.jobs_on(node) if other != rank}
    job = np.zeros(JOB_INPUTS, np.float32)
    job[tenancy.type_of[rank]] = 1.0
    job[NUM_TYPES:] = (
        float(spec.architecture is Architecture.ALLREDUCE),
        float(is_ps),
        workers / SCALE_TASKS,
        ps / SCALE_TASKS,
        sum(counts[0] for counts in held.values()) / max(workers, 1),
        sum(counts[1] for counts in held.values()) / max(ps, 1),
        len(held) / 4.0,
        len(neighbours) / 4.0,
    )
    return job
