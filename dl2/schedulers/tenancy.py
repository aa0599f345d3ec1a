"""Who holds which tasks on each node during one placement round, for placers that look at neighbours.

Interference depends on which jobs share a server (Harmony §2), which free resources alone do not show. A
placer with `needs_tenancy = True` finds a `Tenancy` on the `NodeState` it is asked about: `place_sticky`
registers every task it keeps or places, and names the job and role being placed before each `choose`. Other
placers pay nothing for it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from dl2.core import JobView
from dl2.workload.catalogue import CATALOGUE, MODEL_NAMES

NUM_TYPES = len(MODEL_NAMES)


class Tenancy:
    """Per node, the tasks of each job on it; per node and job type, how many distinct jobs of that type."""

    def __init__(self, jobs: Sequence[JobView], targets: Sequence[tuple[int, int]], num_nodes: int) -> None:
        self.jobs = jobs
        """The round's jobs, by rank (the view's order)."""
        self.targets = targets
        """Per rank, the (workers, PS) the allocation policy asked for."""
        self.type_of = [CATALOGUE[job.spec.model].type_index for job in jobs]
        self.on_node: list[dict[int, list[int]]] = [{} for _ in range(num_nodes)]
        """node -> rank -> [workers, PS] of that job there."""
        self.held_by: list[dict[int, list[int]]] = [{} for _ in jobs]
        """rank -> node -> the same [workers, PS] lists: each job's servers."""
        self._jobs_of_type = np.zeros((num_nodes, NUM_TYPES), dtype=np.float64)
        self._tasks = np.zeros((num_nodes, 2), dtype=np.float64)
        # what `add_all` registered since the arrays were last brought up to date: the nodes each job joined (with
        # its type) and the nodes of its workers and PS (one entry per task)
        self._joined: list[int] = []
        self._joined_types: list[int] = []
        self._pending_tasks: tuple[list[int], list[int]] = ([], [])
        self.placing = -1
        """Rank of the job whose task is being placed (set by `place_sticky` before each `choose`)."""
        self.placing_ps = False
        """Whether that task is a parameter server."""
        self.version = 0
        """Counts changes, so that a placer can cache what it derives from the tenancy."""

    @property
    def jobs_of_type(self) -> np.ndarray:
        """[node, type]: distinct jobs of the type with a task on the node."""
        self._flush()
        return self._jobs_of_type

    @property
    def tasks(self) -> np.ndarray:
        """[node, 0 or 1]: workers and PS on the node, all jobs together."""
        self._flush()
        return self._tasks

    def add(self, rank: int, node: int, is_ps: bool, count: int = 1) -> None:
        self._flush()
        held = self.on_node[node].get(rank)
        if held is None:
            held = self.on_node[node][rank] = self.held_by[rank][node] = [0, 0]
            self._jobs_of_type[node, self.type_of[rank]] += 1
        held[is_ps] += count
        self._tasks[node, int(is_ps)] += count
        self.version += 1

    def remove(self, rank: int, node: int, is_ps: bool) -> None:
        self._flush()
        held = self.on_node[node][rank]
        held[is_ps] -= 1
        self._tasks[node, int(is_ps)] -= 1
        if held == [0, 0]:
            del self.on_node[node][rank]
            del self.held_by[rank][node]
            self._jobs_of_type[node, self.type_of[rank]] -= 1
        self.version += 1

    def add_all(self, rank: int, worker_nodes: Sequence[int], ps_nodes: Sequence[int]) -> None:
        """Register every task a job holds (a round starts with all jobs' tasks: the arrays are brought up to date
        once, when next read, instead of element by element)."""
        held, on_node = self.held_by[rank], self.on_node
        joined = self._joined
        # counted per server in C (a packed job has many tasks on few servers), workers' servers first
        for role, nodes in ((0, worker_nodes), (1, ps_nodes)):
            self._pending_tasks[role].extend(nodes)
            counted = Counter(nodes)
            for node, count in counted.items():
                counts = held.get(node)
                if counts is None:
                    counts = held[node] = on_node[node][rank] = [0, 0]
                    joined.append(node)
                counts[role] += count
        self._joined_types.extend([self.type_of[rank]] * (len(joined) - len(self._joined_types)))
        self.version += 1

    def _flush(self) -> None:
        if self._joined:
            np.add.at(self._jobs_of_type, (self._joined, self._joined_types), 1.0)
            self._joined, self._joined_types = [], []
        for role, nodes in enumerate(self._pending_tasks):
            if nodes:
                self._tasks[:, role] += np.bincount(nodes, minlength=len(self._tasks))
                nodes.clear()

    def held(self, rank: int, node: int) -> tuple[int, int]:
        """(workers, PS) of job `rank` on `node`."""
        held = self.on_node[node].get(rank)
        return (held[0], held[1]) if held is not None else (0, 0)
