"""Placement in realistic mode: placers choose a node per task; placement is sticky across slots.

A `Placer` picks the node for one task from a `NodeState` (free resources per node during one placement
round). `place_sticky` turns per-job targets (workers, PS) into an allocation: each job keeps the tasks it
already has, up to its new target (moving a running task costs a restart, DL2 §5), and new tasks go where the
placer says. A task that fits nowhere is dropped, and a PS job left without a worker or without a PS gets
nothing this slot.

Placers rank nodes through lazily updated heaps (`NodeState.best`), so choosing a node costs O(log n) instead
of a scan of the cluster: a week of Philly places hundreds of thousands of tasks.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from dl2.core import Allocation, Architecture, ClusterSpec, ClusterView, JobAllocation, JobSpec
from dl2.schedulers.accelerator_types import NO_TYPE, AcceleratorTypes, LastCluster
from dl2.schedulers.tenancy import Tenancy
from dl2.workload.accelerated_speed import PerAcceleratorSpeeds

Demand = tuple[float, float, float]
NodeKey = Callable[["NodeState", int], float]
"""Ranks a node of a state: the lowest key is the best node. It takes the state as an argument rather than
closing over it, so a state does not hold a cycle through its own heaps (it is freed as soon as a placement
round ends, not at the next full garbage collection)."""

_EPS = 1e-9

VECTORISED_KEYS: dict[NodeKey, Callable[[NodeState], np.ndarray]] = {}
"""Node keys with a form that ranks every node of a state at once (the same float operations)."""


class NodeState:
    """Free resources of every node during one placement round, with heaps of nodes ranked by placer keys.

    Each ranking is kept per demand vector and holds only nodes that could host that demand when they were
    last pushed: a node found too full is dropped from that heap and comes back only when its resources change.
    So a nearly full cluster does not make every placement scan every node.
    """

    vectorise_from_nodes = 32
    """A ranking's first use is computed with NumPy from this many nodes on (below it, a scalar ranking costs less
    than NumPy's per-call overhead); the same order either way."""

    def __init__(
        self, cluster: ClusterSpec, used: dict[Demand, list[int]] | None = None, tenancy: Tenancy | None = None
    ) -> None:
        """`used`: nodes of the tasks already placed, grouped by their demand (one entry per task); `tenancy`:
        which jobs those tasks belong to, for placers that ask for it (`Placer`)."""
        self.tenancy = tenancy
        shape = _ClusterArrays.of(cluster)
        free = shape.capacity.copy()
        for demand, nodes in (used or {}).items():
            if nodes:
                free -= np.outer(np.bincount(np.asarray(nodes, dtype=np.int64), minlength=len(free)), demand)
        self.capacity: list[Demand] = shape.capacity_rows
        self.free: list[list[float]] = free.tolist()
        self._free_array = free
        """`free` as an array for vectorised rankings, brought up to date (from `_changed`) when one is built."""
        self._synced = 0
        """How much of `_changed` `_free_array` has taken in."""
        self._inverse: list[list[float]] = shape.inverse_rows
        self._inverse_array = shape.inverse
        self.version = [0] * len(self.capacity)
        self.type_of_node: list[int] = shape.type_of_node
        """Per node, its accelerator type's index (`dl2.schedulers.accelerator_types`; -1 for a node without GPUs)."""
        self.only_type = NO_TYPE
        """While not `NO_TYPE`: the only accelerator type whose nodes `best` and `first_fitting` return (set by
        `place_sticky` while it places a worker on a mixed cluster, so that every placer keeps its own rule
        within the type chosen)."""
        # per ranking: its key, its heap and how much of `_changed` it has taken in
        self._heaps: dict[tuple[object, ...], tuple[NodeKey, list[tuple[float, int, int]], list[int]]] = {}
        self._changed: list[int] = []
        """Every node whose resources changed, in order: a ranking re-ranks them when it is next asked, so a
        task placed costs one append, not a push into every ranking of the round."""

    @property
    def num_nodes(self) -> int:
        return len(self.capacity)

    def fits(self, node: int, demand: Demand) -> bool:
        free = self.free[node]
        return demand[0] <= free[0] + _EPS and demand[1] <= free[1] + _EPS and demand[2] <= free[2] + _EPS

    def first_fitting(self, nodes: Sequence[int], demand: Demand) -> int:
        """The first of `nodes` that fits `demand`, or -1 (a job's own servers, for placers that keep it together)."""
        only = self.only_type
        for node in dict.fromkeys(nodes):
            if self.fits(node, demand) and (only == NO_TYPE or self.type_of_node[node] == only):
                return node
        return -1

    def take(self, node: int, demand: Demand, count: int = 1) -> None:
        free = self.free[node]
        free[0] -= demand[0] * count
        free[1] -= demand[1] * count
        free[2] -= demand[2] * count
        self.version[node] += 1
        self._changed.append(node)

    def give(self, node: int, demand: Demand, count: int = 1) -> None:
        self.take(node, demand, -count)

    def utilisation(self, node: int) -> float:
        """Dominant utilisation: max over resource types of used / capacity."""
        free, inverse = self.free[node], self._inverse[node]
        # used / capacity = 1 - free / capacity; a resource the node lacks counts as unused
        return max(
            1.0 - free[0] * inverse[0] if inverse[0] else 0.0,
            1.0 - free[1] * inverse[1] if inverse[1] else 0.0,
            1.0 - free[2] * inverse[2] if inverse[2] else 0.0,
        )

    def fitting_nodes(self, demand: Demand) -> np.ndarray:
        """Indices of the nodes that fit `demand` (the test of `fits`, for every node at once)."""
        free = self._synced_free()
        result: np.ndarray = np.flatnonzero(
            (demand[0] <= free[:, 0] + _EPS) & (demand[1] <= free[:, 1] + _EPS) & (demand[2] <= free[:, 2] + _EPS)
        )
        return result

    def changes(self) -> int:
        """How many resource changes the round has seen: a mark for `changed_since`."""
        return len(self._changed)

    def changed_since(self, mark: int) -> list[int]:
        """The nodes whose resources changed after `mark` (a value of `changes`), each once, in order."""
        return list(dict.fromkeys(self._changed[mark:]))

    def free_fractions(self) -> np.ndarray:
        """Free / capacity per node and resource type, shape (nodes, 3) (0 for a resource the node lacks)."""
        result: np.ndarray = self._synced_free() * self._inverse_array
        return result

    def utilisation_of_all(self) -> np.ndarray:
        """`utilisation` of every node (the same float operations, so the same values)."""
        used = 1.0 - self._synced_free() * self._inverse_array
        used[self._inverse_array == 0] = 0.0  # a resource the node lacks counts as unused
        result: np.ndarray = used.max(axis=1)
        return result

    def _synced_free(self) -> np.ndarray:
        """`free` as an array: the rows of the nodes changed since the last call are copied over."""
        changed = self._changed
        if self._synced < len(changed):
            nodes = list(dict.fromkeys(changed[self._synced :]))
            self._free_array[nodes] = [self.free[node] for node in nodes]
            self._synced = len(changed)
        return self._free_array

    def best(self, name: object, key: NodeKey, demand: Demand) -> int:
        """The node with the lowest `key` that fits `demand` (ties: lowest index), or -1.

        `name` identifies the ranking; its heap for this demand is built on first use and kept up to date lazily:
        nodes changed since it was last asked are pushed again with their new key, and an entry is stale once
        its node's version moves on.
        """
        only = self.only_type
        if only != NO_TYPE:
            return self._best_of_type(name, key, demand, only)
        entry = self._heaps.get((name, demand))
        version = self.version
        if entry is None:
            vectorised = VECTORISED_KEYS.get(key)
            if vectorised is not None and self.num_nodes >= self.vectorise_from_nodes:
                # a ranking's first use on a big cluster: keys and fits for every node at once (the same float
                # operations as the scalar key and `fits`, so the same order)
                fitting = self.fitting_nodes(demand)
                keys = vectorised(self)[fitting]
                nodes: list[int] = fitting.tolist()
                heap = list(zip(keys.tolist(), nodes, [version[node] for node in nodes], strict=True))
            else:
                heap = [
                    (key(self, node), node, version[node]) for node in range(self.num_nodes) if self.fits(node, demand)
                ]
            heapq.heapify(heap)
            self._heaps[(name, demand)] = (key, heap, [len(self._changed)])
        else:
            heap, seen = entry[1], entry[2]
            changed = self._changed
            if seen[0] < len(changed):
                for node in dict.fromkeys(changed[seen[0] :]):
                    if self.fits(node, demand):
                        heapq.heappush(heap, (key(self, node), node, version[node]))
                seen[0] = len(changed)
        return self._top(heap, demand)

    def _best_of_type(self, name: object, key: NodeKey, demand: Demand, only: int) -> int:
        """`best` among the nodes of accelerator type `only`: a ranking of its own, kept as `best` keeps its."""
        entry = self._heaps.get((name, demand, only))
        version, type_of = self.version, self.type_of_node
        if entry is None:
            heap = [
                (key(self, node), node, version[node])
                for node in range(self.num_nodes)
                if type_of[node] == only and self.fits(node, demand)
            ]
            heapq.heapify(heap)
            self._heaps[(name, demand, only)] = (key, heap, [len(self._changed)])
        else:
            heap, seen = entry[1], entry[2]
            changed = self._changed
            if seen[0] < len(changed):
                for node in dict.fromkeys(changed[seen[0] :]):
                    if type_of[node] == only and self.fits(node, demand):
                        heapq.heappush(heap, (key(self, node), node, version[node]))
                seen[0] = len(changed)
        return self._top(heap, demand)

    def _top(self, heap: list[tuple[float, int, int]], demand: Demand) -> int:
        """The heap's best current entry that fits `demand`, or -1; stale and too-full entries are dropped."""
        version = self.version
        while heap:
            _, node, pushed = heap[0]
            if pushed == version[node] and self.fits(node, demand):
                return node
            heapq.heappop(heap)  # stale, or too full for this demand until its resources change
        return -1


class _ClusterArrays:
    """Per-cluster constants of `NodeState` (a cluster spec is immutable), built once per run, not per slot."""

    def __init__(self, cluster: ClusterSpec) -> None:
        self.capacity = np.array([node.capacity.as_tuple() for node in cluster.nodes], dtype=float).reshape(-1, 3)
        self.capacity_rows: list[Demand] = [(row[0], row[1], row[2]) for row in self.capacity.tolist()]
        # 1 / capacity per resource (0 where the node has none of it) for the utilisation key
        self.inverse = np.divide(1.0, self.capacity, out=np.zeros_like(self.capacity), where=self.capacity > 0)
        self.inverse_rows: list[list[float]] = self.inverse.tolist()
        self.type_of_node = AcceleratorTypes.of(cluster).type_of_node

    @staticmethod
    def of(cluster: ClusterSpec) -> _ClusterArrays:
        """The cluster's arrays, built once per run (`LastCluster`)."""
        return _arrays_of(cluster)


_arrays_of = LastCluster(_ClusterArrays)


class Placer(Protocol):
    """Chooses a node for one task.

    A placer whose class sets `needs_tenancy = True` finds `state.tenancy` set while it places: who holds what on
    each node and which job and role the task is for (`dl2.schedulers.tenancy`).

    On a cluster of several accelerator types, `place_sticky` chooses the type of each new worker and sets
    `state.only_type` while the placer chooses: `NodeState.best` and `first_fitting` then return nodes of that type
    only, so a placer that ranks nodes through them keeps its rule within the type. A placer that sets
    `reads_accelerators = False` is left blind to types (for comparison).
    """

    name: str

    def choose(self, state: NodeState, demand: Demand, job_nodes: Sequence[int]) -> int:
        """Index of the node for a task of `demand`, or -1 if none fits.

        `job_nodes` are the nodes that already host this job's tasks (for placers that keep a job together).
        """
        ...


_Growth = tuple[int, int, list[int], list[int]]
"""A job's targets (workers, PS) and the worker and PS nodes it keeps, to which new tasks are added."""


def place_sticky(
    view: ClusterView,
    targets: Sequence[tuple[int, int]],
    placer: Placer,
    worker_types: Sequence[int] | None = None,
    speed: object | None = None,
) -> Allocation:
    """Allocation giving job `view.jobs[r]` up to `targets[r]` = (workers, PS), keeping existing tasks in place.

    On a cluster of several accelerator types, new workers go where `_Typed.place_workers` says, and the jobs
    that gain most from a fast type place theirs first. `worker_types[r]`, where given and not `NO_TYPE`, is the
    only type on which job r's new workers may go, all of them or none (a policy that chose the type: `gavel`;
    it must not keep workers of that job on another type). `speed`: the deciding scheduler's speed model; where it
    knows a job's speeds per accelerator type otherwise than the profile (`PerAcceleratorSpeeds`: a calibration
    from the cluster's records, or a truth), the job's type order and gain are its (else the profile's).
    """
    # per job that holds tasks or will (a long queue of waiting jobs costs nothing here): its allocation as it
    # stands when its target is what it holds (most jobs in most slots), else what it keeps and its targets
    entries: list[tuple[int, JobSpec, JobAllocation, _Growth | None]] = []
    used: dict[Demand, list[int]] = {}
    grows = False
    for rank, (job, (workers, ps)) in enumerate(zip(view.jobs, targets, strict=True)):
        old = job.allocation
        held_workers, held_ps = old.worker_nodes, old.ps_nodes
        if not (workers or ps or held_workers or held_ps):
            continue
        spec = job.spec
        worker_used = used.setdefault(spec.worker_demand.as_tuple(), [])
        ps_used = used.setdefault(spec.ps_demand.as_tuple(), [])
        if len(held_workers) == workers and len(held_ps) == ps and _runnable(spec, held_workers, held_ps):
            worker_used.extend(held_workers)
            ps_used.extend(held_ps)
            entries.append((rank, spec, old, None))  # runnable as it stands: nothing to place or give back
            continue
        keep_workers = list(held_workers[:workers])
        keep_ps = list(held_ps[:ps])
        worker_used.extend(keep_workers)
        ps_used.extend(keep_ps)
        entries.append((rank, spec, old, (workers, ps, keep_workers, keep_ps)))
        grows = grows or len(keep_workers) < workers or len(keep_ps) < ps
    # with no task to place, the free resources per node are never needed (on a big cluster, building them is
    # most of the cost of a slot in which a job finished and the others keep what they hold)
    tenancy = None
    if grows and getattr(placer, "needs_tenancy", False):
        tenancy = Tenancy(view.jobs, targets, view.cluster.num_nodes)
        for rank, _, old, growth in entries:
            held = (old.worker_nodes, old.ps_nodes) if growth is None else (growth[2], growth[3])
            tenancy.register(rank, *held)
    state = NodeState(view.cluster, used, tenancy) if grows else None
    types = AcceleratorTypes.of(view.cluster) if grows else None
    # a placer reads the nodes' types unless it says it does not (`reads_accelerators = False`: the type-blind
    # placement, for comparison)
    typed = types is not None and (
        worker_types is not None or (types.is_mixed and getattr(placer, "reads_accelerators", True))
    )
    own = speed if typed and isinstance(speed, PerAcceleratorSpeeds) else None
    job_speeds: dict[int, list[float]] = {}
    if own is not None and types is not None:
        for rank, spec, _, growth in entries:
            if growth is not None and spec.worker_demand.gpu > 0:
                _, speedups = own.accelerator_speedups(spec)
                if speedups:
                    job_speeds[rank] = types.speeds_with(spec.model, speedups)
    order = entries
    if typed and types is not None and types.is_mixed and worker_types is None:
        # the jobs that gain most from their fastest type place first, so that the fast servers go to them (a
        # policy that chose the types orders its jobs itself)
        def gain(entry: tuple[int, JobSpec, JobAllocation, _Growth | None]) -> float:
            speeds = job_speeds.get(entry[0])
            return types.gain(entry[1].model) if speeds is None else max(speeds) / min(speeds)

        order = sorted(entries, key=lambda entry: (-gain(entry), entry[0]))
    placed: dict[int, JobAllocation] = {}
    for rank, spec, old, growth in order:
        if growth is None:
            placed[rank] = old
            continue
        workers, ps, worker_nodes, ps_nodes = growth
        worker_demand, ps_demand = spec.worker_demand.as_tuple(), spec.ps_demand.as_tuple()
        for is_ps, count, nodes, demand in (
            (False, workers, worker_nodes, worker_demand),
            (True, ps, ps_nodes, ps_demand),
        ):
            if typed and not is_ps and demand[0] > 0 and len(nodes) < count:
                assert state is not None and types is not None
                forced = worker_types[rank] if worker_types is not None else NO_TYPE
                _Typed(state, placer, tenancy, rank, types, ps_nodes).place_workers(
                    spec.model, demand, count, nodes, forced, job_speeds.get(rank)
                )
                continue
            while len(nodes) < count:
                assert state is not None  # a job that grows means the state was built
                if tenancy is not None:
                    tenancy.placing, tenancy.placing_ps = rank, is_ps
                node = placer.choose(state, demand, worker_nodes + ps_nodes)
                if node < 0:
                    break
                state.take(node, demand)
                nodes.append(node)
                if tenancy is not None:
                    tenancy.add(rank, node, is_ps)
        if not _runnable(spec, worker_nodes, ps_nodes):
            if state is not None:
                for node in worker_nodes:
                    state.give(node, worker_demand)
                for node in ps_nodes:
                    state.give(node, ps_demand)
            if tenancy is not None:
                for is_ps, nodes in ((False, worker_nodes), (True, ps_nodes)):
                    for node in nodes:
                        tenancy.remove(rank, node, is_ps)
            continue
        if tuple(worker_nodes) == old.worker_nodes and tuple(ps_nodes) == old.ps_nodes:
            placed[rank] = old
        else:
            placed[rank] = JobAllocation(tuple(worker_nodes), tuple(ps_nodes))
    return Allocation({spec.job_id: placed[rank] for rank, spec, _, _ in entries if rank in placed})


class _Typed:
    """Places one job's new workers on a cluster of several accelerator types, as a deployment that
    reads each node's GPU model and the catalogue's profile of each model would (`AcceleratorTypes.order`).

    A synchronous job runs at its slowest worker's pace, so its workers go on one type when one has room for all:
    the type its workers already run on, if any; else the fastest for it with room. The placer keeps its own rule
    within that type (`NodeState.only_type`). Where no single type holds them, they spread over the types in that
    order, a worker on a slower type only where it adds more than it slows: (n + 1) x r_new > n x r_slowest, r the
    profile's relative speeds, a compute-bound estimate. A placer that ignores `only_type` places as it always did.
    """

    def __init__(
        self,
        state: NodeState,
        placer: Placer,
        tenancy: Tenancy | None,
        rank: int,
        types: AcceleratorTypes,
        ps_nodes: list[int],
    ) -> None:
        self.state, self.placer, self.tenancy, self.rank, self.types = state, placer, tenancy, rank, types
        self.ps_nodes = ps_nodes
        """The PS the job keeps: with its workers, its servers for placers that keep a job together."""
        self.blind = False
        """Whether the placer chose a node of another type than `only_type` asked for (it reads no types)."""

    def place_workers(
        self, model: str, demand: Demand, count: int, nodes: list[int], forced: int, speeds: list[float] | None = None
    ) -> None:
        """Appends to `nodes` (the job's workers) up to `count`; `forced`: the only type allowed, or `NO_TYPE`;
        `speeds`: the job's own speed per type where the deciding scheduler knows it (None: `model`'s profile)."""
        type_of = self.state.type_of_node
        held = list(dict.fromkeys(type_of[node] for node in nodes))
        order = self.types.order(model) if speeds is None else self.types.order_of(speeds)
        if forced != NO_TYPE:
            self._all_on(forced, demand, count, nodes)
            return
        # all on one type: the one its workers run on; or, for a job with none yet, the best type with room
        trials = order if not held else held if len(held) == 1 else []
        for kind in trials:
            if self._all_on(kind, demand, count, nodes):
                return
        speeds = self.types.speeds(model) if speeds is None else speeds
        for kind in (*held, *(kind for kind in order if kind not in held)):
            if nodes and kind not in held:
                slowest = min(speeds[type_of[node]] for node in nodes)
                if (len(nodes) + 1) * min(speeds[kind], slowest) <= len(nodes) * slowest:
                    continue
            self._place(kind, demand, count - len(nodes), nodes)
            if len(nodes) >= count:
                return
        if self.blind:  # a placer that ignores `only_type`: what is left goes where it says, as it always did
            self._place(NO_TYPE, demand, count - len(nodes), nodes)

    def _all_on(self, kind: int, demand: Demand, count: int, nodes: list[int]) -> bool:
        """Places all `count - len(nodes)` on type `kind`, or none (what it placed is given back)."""
        need = count - len(nodes)
        done = self._place(kind, demand, need, nodes)
        if done == need:
            return True
        for node in nodes[len(nodes) - done :]:
            self.state.give(node, demand)
            if self.tenancy is not None:
                self.tenancy.remove(self.rank, node, False)
        del nodes[len(nodes) - done :]
        return False

    def _place(self, kind: int, demand: Demand, need: int, nodes: list[int]) -> int:
        """Places up to `need` workers on type `kind` (`NO_TYPE`: any) with the placer; how many it placed."""
        state, tenancy = self.state, self.tenancy
        state.only_type = kind
        done = 0
        try:
            while done < need:
                if tenancy is not None:
                    tenancy.placing, tenancy.placing_ps = self.rank, False
                node = self.placer.choose(state, demand, nodes + self.ps_nodes)
                if node < 0:
                    break
                if kind != NO_TYPE and state.type_of_node[node] != kind:
                    self.blind = True
                    break
                state.take(node, demand)
                nodes.append(node)
                if tenancy is not None:
                    tenancy.add(self.rank, node, False)
                done += 1
        finally:
            state.only_type = NO_TYPE
        return done


def _runnable(spec: JobSpec, worker_nodes: Sequence[int], ps_nodes: Sequence[int]) -> bool:
    """A job makes progress with workers, and with a PS too unless it is all-reduce."""
    return bool(worker_nodes) and (spec.architecture is Architecture.ALLREDUCE or bool(ps_nodes))


def _utilisation_of_all(state: NodeState) -> np.ndarray:
    return state.utilisation_of_all()


VECTORISED_KEYS[NodeState.utilisation] = _utilisation_of_all
