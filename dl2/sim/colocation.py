"""Which jobs share which servers, and the slowdown each placed job suffers from it (see
`dl2.workload.interference` for the model: a job's factor is the largest slowdown another job inflicts on it on
any of its servers).

Kept up to date as placements change: a job that moves, starts, stops or finishes changes the per-server counts
of its servers only, and only the jobs on those servers get a new factor. Recomputing every job on every server
whenever one job finished made the cost of a slot grow with the cluster, so a run's cost grew faster than its
job count.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from itertools import chain

import numpy as np

from dl2.core import JobAllocation


class CoLocation:
    """Per server, the number of distinct placed jobs of each type; per placed job, its slowdown factor."""

    def __init__(self, table: np.ndarray, num_nodes: int) -> None:
        """`table[victim type][aggressor type]`: the slowdown one job of the aggressor's type inflicts."""
        self.table = table
        num_types = table.shape[0]
        # counts as plain lists: a job's few servers are counted one at a time, which NumPy indexing makes slower
        self.counts: list[list[int]] = [[0] * num_types for _ in range(num_nodes)]
        self.worst = np.ones((num_nodes, num_types))
        """[server, victim type]: the largest slowdown a job of that type placed there suffers."""
        self._own_type = np.eye(num_types, dtype=np.int32)[None, :, :]
        self._placed: dict[int, tuple[JobAllocation, int, list[int]]] = {}
        self._jobs_on: list[set[int]] = [set() for _ in range(num_nodes)]
        self.factors: dict[int, float] = {}
        """Per placed job (by index), its slowdown factor (1 when it shares no server)."""

    def update(self, jobs: Iterable[tuple[int, JobAllocation, int]], gone: Iterable[int] = ()) -> None:
        """`jobs`: (index, allocation, type) of active jobs whose allocation may have changed (a job not listed
        keeps its placement); `gone`: jobs that left (finished)."""
        changed: set[int] = set()
        moved: set[int] = set()
        for i in gone:
            self._remove(i, changed)
        for i, allocation, kind in jobs:
            entry = self._placed.get(i)
            if entry is not None and entry[0] is allocation:
                continue
            if allocation.is_empty:
                self._remove(i, changed)
                continue
            nodes = sorted(set(allocation.worker_nodes + allocation.ps_nodes))
            if entry is not None and entry[2] == nodes:
                self._placed[i] = (allocation, kind, nodes)  # same servers: nothing to recount
                continue
            self._remove(i, changed)
            self._placed[i] = (allocation, kind, nodes)
            counts, jobs_on = self.counts, self._jobs_on
            for node in nodes:
                counts[node][kind] += 1
                jobs_on[node].add(i)
            changed.update(nodes)
            moved.add(i)
        if not changed:
            return
        rows = list(changed)
        # another job of the victim's own type counts only when two jobs of that type share the server
        others = (np.array([self.counts[node] for node in rows])[:, None, :] - self._own_type) > 0
        self.worst[rows] = np.where(others, self.table[None, :, :], 1.0).max(axis=2)
        affected = set(moved)
        for node in changed:
            affected.update(self._jobs_on[node])
        # each affected job's factor, the largest over its servers, for all of them at once
        victims = list(affected)
        if not victims:
            return
        placed = [self._placed[i] for i in victims]
        lengths = np.fromiter((len(nodes) for _, _, nodes in placed), dtype=np.int64, count=len(placed))
        kinds = np.repeat(np.fromiter((kind for _, kind, _ in placed), dtype=np.int64, count=len(placed)), lengths)
        values = self.worst[list(chain.from_iterable(nodes for _, _, nodes in placed)), kinds]
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        self.factors.update(zip(victims, np.maximum.reduceat(values, starts).tolist(), strict=True))

    def copy(self) -> CoLocation:
        """An independent copy (what `Simulation.fork` takes: a deep copy costs a hundred times as much). The
        interference table is shared, and so are the placements' allocations and server lists, which are replaced,
        never changed."""
        twin = copy.copy(self)
        twin.counts = [row.copy() for row in self.counts]
        twin.worst = self.worst.copy()
        twin._placed = self._placed.copy()
        twin._jobs_on = [jobs.copy() for jobs in self._jobs_on]
        twin.factors = self.factors.copy()
        return twin

    def sharing(self) -> set[int]:
        """The placed jobs with a server that another placed job also uses."""
        return set().union(*(jobs for jobs in self._jobs_on if len(jobs) > 1))

    def _remove(self, i: int, changed: set[int]) -> None:
        entry = self._placed.pop(i, None)
        if entry is None:
            return
        _, kind, nodes = entry
        counts, jobs_on = self.counts, self._jobs_on
        for node in nodes:
            counts[node][kind] -= 1
            jobs_on[node].discard(i)
        changed.update(nodes)
        self.factors.pop(i, None)
