"""Who holds which tasks on each node during one placement round, for placers that look at neighbours.

Interference depends on which jobs share a server (Harmony §2), which free resources alone do not show. A
placer with `needs_tenancy = True` finds a `Tenancy` on the `NodeState` it is asked about: `place_sticky`
registers every task it keeps or places, and names the job and role being placed before each `choose`. Other
placers pay nothing for it.

A round registers every job's tasks but its decisions read the holdings of a few jobs and servers only (the job
being placed, its servers, their neighbours). So registration just keeps each job's task lists; the counts of
distinct jobs per server and type are computed from all of them at once, in NumPy, when first read, and a job's
or a server's dictionaries are built when first asked for; a task added or removed before a server's are built is
noted and replayed when they are (a placer that asks for none, `isolate-strict`, never builds them). On a full
352-server cluster this is what keeps a round within a couple of milliseconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import numpy as np

from dl2.core import JobView
from dl2.workload.catalogue import CATALOGUE, MODEL_NAMES

NUM_TYPES = len(MODEL_NAMES)

Holdings = dict[int, list[int]]
"""node -> [workers, PS] of one job (from `Tenancy.holdings`), or rank -> [workers, PS] on one node (from
`Tenancy.jobs_on`); both views share the same two-element lists."""


class Tenancy:
    """Per node, the tasks of each job on it; per node and job type, how many distinct jobs of that type.

    Contract: `register` every job that holds tasks before the first read or change (`place_sticky` and the
    extender do); `add` and `remove` then keep every view up to date."""

    def __init__(self, jobs: Sequence[JobView], targets: Sequence[tuple[int, int]], num_nodes: int) -> None:
        self.jobs = jobs
        """The round's jobs, by rank (the view's order)."""
        self.targets = targets
        """Per rank, the (workers, PS) the allocation policy asked for."""
        # a model the catalogue lacks (only an oracle handed the truth's labels sees one) counts in no type column
        self.type_of = [CATALOGUE[job.spec.model].type_index if job.spec.model in CATALOGUE else -1 for job in jobs]
        self.num_nodes = num_nodes
        self.placing = -1
        """Rank of the job whose task is being placed (set by `place_sticky` before each `choose`)."""
        self.placing_ps = False
        """Whether that task is a parameter server."""
        self._registered: list[tuple[tuple[int, ...], tuple[int, ...]]] = [((), ())] * len(jobs)
        self._holdings: list[Holdings | None] = [None] * len(jobs)
        self._on_node: dict[int, Holdings] = {}
        self._jobs_of_type: np.ndarray | None = None
        self._changed = False
        """Whether a task was added or removed (registration is over)."""
        self._moves: dict[int, list[tuple[int, bool]]] = {}
        """Per node whose `jobs_on` is not built yet: (rank, arrived) each time a job arrived on it or left it,
        replayed in order when it is built (a placer that never asks, `isolate-strict`, never pays for it)."""
        self._type_moves: list[tuple[int, int, int]] = []
        """(node, type, +1 or -1) of those arrivals and departures while `jobs_of_type` is not counted yet."""
        # the distinct (node, rank) pairs of the registered tasks, sorted by node: which jobs a node holds
        self._pair_nodes = np.zeros(0, np.int64)
        self._pair_ranks = np.zeros(0, np.int64)

    def register(self, rank: int, worker_nodes: Sequence[int], ps_nodes: Sequence[int]) -> None:
        """The tasks job `rank` holds as the round starts (one entry per task)."""
        if self._changed or self._jobs_of_type is not None or self._holdings[rank] is not None:
            raise RuntimeError("Tenancy.register after the tenancy was read or changed")
        # as tuples: a caller may go on appending to its lists (tuple() of a tuple is the same object, no copy)
        self._registered[rank] = (tuple(worker_nodes), tuple(ps_nodes))

    @property
    def jobs_of_type(self) -> np.ndarray:
        """[node, type]: distinct jobs of the type with a task on the node."""
        return self._counted()

    def _counted(self) -> np.ndarray:
        """`jobs_of_type`, counted on first use from the registered tasks and the arrivals and departures since."""
        if self._jobs_of_type is None:
            counts = self._count()
            for node, kind, step in self._type_moves:
                counts[node, kind] += step
            self._type_moves = []
            self._jobs_of_type = counts
        return self._jobs_of_type

    def holdings(self, rank: int) -> Holdings:
        """node -> [workers, PS] of job `rank`: its servers."""
        held = self._holdings[rank]
        if held is None:
            workers, ps = self._registered[rank]
            held = self._holdings[rank] = {}
            for role, nodes in ((0, workers), (1, ps)):
                for node in nodes:  # a plain loop: Counter's construction costs more than the counting here
                    held.setdefault(node, [0, 0])[role] += 1
        return held

    def holds_role(self, rank: int, is_ps: bool) -> bool:
        """Whether job `rank` holds a task of the role (a PS if `is_ps`, else a worker) on some server."""
        return any(counts[is_ps] for counts in self.holdings(rank).values())

    def jobs_on(self, node: int) -> Holdings:
        """rank -> [workers, PS] of each job with a task on `node`."""
        on = self._on_node.get(node)
        if on is None:
            self._counted()  # counting finds the registered (node, rank) pairs
            start, end = np.searchsorted(self._pair_nodes, (node, node + 1))
            # the registered jobs in rank order, then those that arrived or left since, as adding them one by one
            # would have ordered them
            ranks: dict[int, None] = dict.fromkeys(self._pair_ranks[start:end].tolist())
            for rank, arrived in self._moves.pop(node, ()):
                if arrived:
                    ranks[rank] = None
                else:
                    del ranks[rank]
            on = self._on_node[node] = {rank: self.holdings(rank)[node] for rank in ranks}
        return on

    def add(self, rank: int, node: int, is_ps: bool) -> None:
        self._changed = True
        holdings = self.holdings(rank)
        held = holdings.get(node)
        if held is None:  # the job arrives on the node
            held = holdings[node] = [0, 0]
            self._moved(rank, node, True, held)
        held[is_ps] += 1

    def remove(self, rank: int, node: int, is_ps: bool) -> None:
        self._changed = True
        holdings = self.holdings(rank)
        held = holdings[node]
        held[is_ps] -= 1
        if held == [0, 0]:  # the job leaves the node
            del holdings[node]
            self._moved(rank, node, False, held)

    def _moved(self, rank: int, node: int, arrived: bool, held: list[int]) -> None:
        """Job `rank` arrived on `node` (holding `held`) or left it: the node's jobs and type counts follow, or
        they are noted for when they are first read."""
        on = self._on_node.get(node)
        if on is None:
            self._moves.setdefault(node, []).append((rank, arrived))
        elif arrived:
            on[rank] = held
        else:
            del on[rank]
        kind = self.type_of[rank]
        if kind >= 0:
            step = 1 if arrived else -1
            if self._jobs_of_type is None:
                self._type_moves.append((node, kind, step))
            else:
                self._jobs_of_type[node, kind] += step

    def _count(self) -> np.ndarray:
        """The distinct (node, rank) pairs of all registered tasks, kept, and from them the jobs per node and type."""
        lengths = [len(workers) + len(ps) for workers, ps in self._registered]
        nodes = np.fromiter(chain.from_iterable(chain.from_iterable(self._registered)), np.int64, sum(lengths))
        ranks = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
        # distinct pairs, sorted by node then rank: a mark per (node, rank) cell, then the marked cells in order
        # (cheaper than sorting one key per task)
        marked = np.zeros(self.num_nodes * len(lengths), dtype=bool)
        marked[nodes * len(lengths) + ranks] = True
        self._pair_nodes, self._pair_ranks = np.divmod(np.flatnonzero(marked), max(len(lengths), 1))
        types = np.array(self.type_of, dtype=np.int64)[self._pair_ranks]
        cells = (self._pair_nodes * NUM_TYPES + types)[types >= 0]
        counts = np.bincount(cells, minlength=self.num_nodes * NUM_TYPES).astype(np.float64)
        return counts.reshape(self.num_nodes, NUM_TYPES)
