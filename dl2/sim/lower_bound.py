"""A lower bound on each job's completion time: the job alone on the cluster, at its fastest placement.

Per job: it starts at its first decision point (the first slot boundary at or after its arrival, as the
simulator decides only there), pays the shortest pause a first start can cost, and then runs at the highest
speed the simulator's own speed function gives over every feasible number of workers and PS and every feasible
placement of them. No schedule can do better for that job: other jobs only take capacity and add interference,
and a change of allocation only adds pauses. The average over the workload bounds any scheduler's average JCT
(realistic mode, before noise). On a cluster of several accelerator types every worker counts as on the fastest type
for its model (`dl2.workload.accelerated_speed.FastestAcceleratorSpeed`): still a bound, if a looser one.

Placements are enumerated up to symmetry: servers with the same capacity are interchangeable, so a placement
is a multiset of per-server (workers, PS) configurations. The realistic speed function depends on a placement
only through the number of worker-PS pairs that share a server (parameter-server jobs; `speed_fit.placement_kappa`) or
whether the ring spans servers (all-reduce), so for each (workers, PS) a dynamic programme over those multisets
finds the placement with the most co-located pairs, which the speed function then evaluates
(`tests/unit/sim/test_lower_bound.py` checks that against brute force over every placement of small jobs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cache

from dl2.core import Architecture, ClusterSpec, Job, JobAllocation, JobSpec, Resources, Workload
from dl2.sim.config import RescaleCost, RescaleKind, SimConfig
from dl2.sim.simulator import Simulation
from dl2.workload.accelerated_speed import on_fastest_accelerators
from dl2.workload.speed import SpeedModel

_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class JobBound:
    """One job's best case."""

    job_id: str
    start_s: float
    """Its first decision point."""
    allocation: JobAllocation
    """Fastest feasible placement (node indices of one concrete instance)."""
    throughput: float
    jct_s: float


def first_decision_s(arrival_s: float, slot_s: float) -> float:
    """The first slot boundary at or after `arrival_s` (the simulator's rule in `Simulation.begin_slot`)."""
    return math.ceil(arrival_s / slot_s - _EPS) * slot_s


def shortest_start_pause_s(rescale: RescaleCost) -> float:
    """The least a job's first start can pause it (a checkpoint-restart restores in at least `restore_min_s`)."""
    if rescale.kind is RescaleKind.NONE:
        return 0.0
    if rescale.kind is RescaleKind.HOT:
        return rescale.hot_pause_s
    return rescale.restore_min_s


def workload_bounds(workload: Workload, config: SimConfig, speed: SpeedModel) -> list[JobBound]:
    """Every job's bound (`config` gives the slot length and the rescale cost; exact declared epochs assumed)."""
    slot_s = config.slot_s or workload.slot_s
    pause_s = shortest_start_pause_s(config.rescale)
    fastest = FastestPlacements(workload.cluster, on_fastest_accelerators(speed, workload.cluster))
    return [job_bound(job, slot_s, fastest, pause_s) for job in workload.jobs]


def average_bound_s(workload: Workload, config: SimConfig, speed: SpeedModel) -> float:
    """The bound on the workload's average JCT: the mean of its jobs' bounds."""
    bounds = workload_bounds(workload, config, speed)
    return sum(bound.jct_s for bound in bounds) / max(len(bounds), 1)


def job_bound(job: Job, slot_s: float, fastest: FastestPlacements, pause_s: float) -> JobBound:
    """`job` alone on the cluster from its first decision point, at its fastest feasible placement."""
    spec = job.spec
    start = first_decision_s(spec.arrival_s, slot_s)
    allocation, throughput = fastest(spec)
    if throughput <= 0:
        return JobBound(spec.job_id, start, allocation, 0.0, math.inf)
    run_s = job.true_epochs * spec.samples_per_epoch / throughput
    return JobBound(spec.job_id, start, allocation, throughput, start + pause_s + run_s - spec.arrival_s)


class FastestPlacements:
    """Per kind of job (model, architecture, demands, limits), its fastest feasible allocation and placement on
    one cluster, computed once."""

    def __init__(self, cluster: ClusterSpec, speed: SpeedModel) -> None:
        self.cluster = cluster
        self.speed = speed
        self.capacities = tuple(sorted({node.capacity for node in cluster.nodes}, key=lambda c: c.as_tuple()))
        self.available = {c: sum(node.capacity == c for node in cluster.nodes) for c in self.capacities}
        self._cache: dict[tuple[object, ...], tuple[JobAllocation, float]] = {}

    def __call__(self, spec: JobSpec) -> tuple[JobAllocation, float]:
        """The allocation with the highest `speed.placed_throughput` (ties: the first found, fewest tasks)."""
        key = (spec.model, spec.architecture, spec.worker_demand, spec.ps_demand, spec.max_workers, spec.max_ps)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._search(spec)
        return found

    def _search(self, spec: JobSpec) -> tuple[JobAllocation, float]:
        best: tuple[JobAllocation, float] = (JobAllocation(), 0.0)
        ring = spec.architecture is Architecture.ALLREDUCE
        for num_ps in [0] if ring else range(1, spec.max_ps + 1):
            for num_workers in range(1, spec.max_workers + 1):
                allocation = self.packed(spec, num_workers, num_ps)
                if allocation is None:
                    continue
                value = self.speed.placed_throughput(spec, allocation)
                if value > best[1] + _EPS:
                    best = (allocation, value)
        return best

    def packed(self, spec: JobSpec, num_workers: int, num_ps: int) -> JobAllocation | None:
        """Exactly these tasks alone on the cluster with the most co-located worker-PS pairs (for all-reduce, on
        the fewest servers); None if they do not fit."""
        ring = spec.architecture is Architecture.ALLREDUCE
        max_workers, max_ps = max(spec.max_workers, num_workers), 0 if ring else max(spec.max_ps, num_ps)
        table = _pair_table(spec.worker_demand, spec.ps_demand, self.capacities, max_workers, max_ps, ring)
        layout = _layout(table, num_workers, num_ps)
        if layout is None or not _enough_servers(layout, self.available):
            return None
        return _instance(layout, self.cluster)


class BestLayoutSimulation(Simulation):
    """The simulator with every job running at the best layout of the tasks it was given, with no interference.

    A bound on what placement alone can reach with an allocation policy's counts held: no placement of the same
    workers and PS is faster than their best layout alone on the cluster (`FastestPlacements.packed`), and
    interference only slows. The policy's placer still puts the tasks on real servers (capacity is checked as
    in any run, and a task it cannot place is not counted); only the speed ignores where they landed."""

    def __init__(self, workload: Workload, config: SimConfig, speed: SpeedModel) -> None:
        super().__init__(workload, replace(config, interference=False), speed, None)
        self._fastest = FastestPlacements(workload.cluster, on_fastest_accelerators(speed, workload.cluster))
        self._layout_throughput: dict[tuple[object, ...], float] = {}

    def _base_throughput(self, i: int) -> float:
        placed = super()._base_throughput(i)
        allocation, spec = self.allocation[i], self.specs[i]
        if placed <= 0.0:
            return placed
        counts = (allocation.num_workers, allocation.num_ps)
        key = (spec.model, spec.architecture, spec.worker_demand, spec.ps_demand, *counts)
        best = self._layout_throughput.get(key)
        if best is None:
            layout = self._fastest.packed(spec, *counts)
            best = self._fastest.speed.placed_throughput(spec, layout) if layout is not None else 0.0
            self._layout_throughput[key] = best
        # the layout search maximises what the speed function reads; max() keeps the bound safe regardless
        return max(best, placed)


Layout = tuple[tuple[Resources, int, int], ...]
"""A placement up to symmetry: per used server, its capacity and the (workers, PS) it hosts."""


PairTable = list[list[tuple[float, Resources, int, int] | None]]


def _layout(table: PairTable, num_workers: int, num_ps: int) -> Layout | None:
    """The best layout of `num_workers` workers and `num_ps` PS read back from `table` (None if none fits)."""
    if table[num_workers][num_ps] is None:
        return None
    layout = []
    workers, servers = num_workers, num_ps
    while workers or servers:
        entry = table[workers][servers]
        assert entry is not None
        _, capacity, a, b = entry
        layout.append((capacity, a, b))
        workers, servers = workers - a, servers - b
    return tuple(layout)


@cache
def _pair_table(
    worker: Resources, ps: Resources, capacities: tuple[Resources, ...], max_workers: int, max_ps: int, ring: bool
) -> PairTable:
    """table[w][p]: (score, capacity, workers, PS of the last server) of the best layout of w workers and p PS.

    The score is the number of co-located pairs minus a small cost per server (so that among layouts with the
    same pairs the fewest servers win; for all-reduce, whose pairs are zero, that is the whole score). An
    unbounded knapsack over per-server configurations: servers of a capacity are as many as needed (the caller
    checks that the cluster has them)."""
    configurations = [
        (capacity, a, b)
        for capacity in capacities
        for a in range(max_workers + 1)
        for b in range(max_ps + 1)
        if (a or b) and (worker.scaled(a) + ps.scaled(b)).fits_in(capacity)
    ]
    server_cost = 1.0 / (2 * (max_workers + max_ps) + 1)
    table: PairTable = [[None] * (max_ps + 1) for _ in range(max_workers + 1)]
    table[0][0] = (0.0, capacities[0], 0, 0)
    for w in range(max_workers + 1):
        for p in range(max_ps + 1):
            if not (w or p):
                continue
            best: tuple[float, Resources, int, int] | None = None
            for capacity, a, b in configurations:
                if a > w or b > p:
                    continue
                rest = table[w - a][p - b]
                if rest is None:
                    continue
                score = rest[0] + (0 if ring else a * b) - server_cost
                if best is None or score > best[0] + _EPS:
                    best = (score, capacity, a, b)
            table[w][p] = best
    return table


def _enough_servers(layout: Layout, available: dict[Resources, int]) -> bool:
    needed: dict[Resources, int] = {}
    for capacity, _, _ in layout:
        needed[capacity] = needed.get(capacity, 0) + 1
    return all(count <= available[capacity] for capacity, count in needed.items())


def _instance(layout: Layout, cluster: ClusterSpec) -> JobAllocation:
    """One concrete placement of `layout`: the lowest-indexed servers of each capacity."""
    free = {
        capacity: [node.node_id for node in cluster.nodes if node.capacity == capacity] for capacity, _, _ in layout
    }
    workers: list[int] = []
    ps: list[int] = []
    for capacity, a, b in layout:
        node = free[capacity].pop(0)
        workers += [node] * a
        ps += [node] * b
    return JobAllocation(tuple(workers), tuple(ps))
