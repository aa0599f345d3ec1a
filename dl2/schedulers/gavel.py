"""Gavel (Narayanan et al., OSDI'20): heterogeneity-aware max-min fairness, realised round by round.

The policy (Gavel's allocation). X[m, k] is the fraction of time job m should run on accelerator type k (each row
sums to at most 1, a job runs on one type at a time). Its effective throughput is sum_k X[m, k] x T[m, k], T[m, k]
its throughput on type k; normalised by the throughput it would get with an equal time share of every type
(mean_k T[m, k]), it says how much a job gains from what it is given whatever its speed. The policy maximises the
smallest normalised effective throughput, each job's counted per worker it asks for (its share in GPUs, so that on
one type it is max-min fairness of GPU share: attained service in the GPU x time plane, as Tiresias counts it),
subject to each type's GPUs: sum_m X[m, k] x GPUs(m) <= GPUs(k). Among the allocations that reach that minimum it
takes one of largest total (weighted, normalised) effective throughput, so that no capacity is left to chance; a
second linear programme (`max_min_fractions`). It is re-solved when a job arrives or finishes.

The mechanism (Gavel's rounds; a slot is a round). Each job gets its requested workers and PS (Gavel schedules
jobs at a fixed scale factor; dl2's `requested_workers`) on one type or not at all. Each (job, type) pair holds a
credit: its target time on the type, X[m, k] x slot, added every slot, less the time it ran there (read from the
previous slot's allocation, what a deployment sees). Pairs go by credit, largest first; a job takes the first
type with GPUs left for it, then pairs the policy gives no time fill what is left (work conservation, fastest
type first). Placement is the configured placer within the chosen type (`place_sticky`'s `worker_types`), and a
job that keeps its type keeps its servers. A job that does not fit its type's servers (fragmentation) waits for
the next slot: the round is not filled again behind it. A job bigger than every type (which Gavel's mechanism
does not foresee) runs over several when what is left holds it, placed by the placers' type rules.

What it reads: the throughput of each job on each type, T[m, k], from the speed model it is handed, placed on
`on_cluster(speed, cluster)`: the catalogue's one profile scaled by each type's measured factors
(`dl2.workload.accelerated_speed`, what a deployment knows on day one), or the truth's model (a ceiling: it reads
each job's true speed). Any `SpeedModel` plugs in, and `on_cluster` lets a model that knows per-type speeds of its
own stand in for the factors. On a cluster of one GPU type, T cancels out: it is max-min fair GPU sharing, in
rounds, with gang-scheduled requested sizes (a type-agnostic time-sliced fair share).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
from scipy.optimize import linprog

from dl2.core import (
    EMPTY_JOB_ALLOCATION,
    Allocation,
    Architecture,
    ClusterSpec,
    ClusterView,
    JobAllocation,
    JobSpec,
    JobView,
)
from dl2.schedulers.accelerator_types import NO_TYPE, AcceleratorTypes
from dl2.schedulers.load_balance import LoadBalancePlacer
from dl2.schedulers.placement import Placer, place_sticky
from dl2.workload.accelerated_speed import on_accelerators
from dl2.workload.speed import SpeedModel

OnCluster = Callable[[SpeedModel, ClusterSpec], SpeedModel]
"""(the speed model handed to the scheduler, the cluster) -> a model whose `placed_throughput` plays the nodes'
accelerator types (`on_accelerators` by default, as the simulator does)."""

_SLACK = 1e-6
"""Relative slack on the max-min level when the second programme maximises throughput at that level (the first
programme's optimum is only as exact as the solver)."""


def requested_size(spec: JobSpec) -> tuple[int, int]:
    """The (workers, PS) a job is scheduled with: what it asked for, within its caps (Gavel's fixed scale)."""
    workers = max(min(spec.requested_workers, spec.max_workers), 1)
    ps = max(min(spec.requested_ps, spec.max_ps), 1) if spec.architecture is Architecture.PS else 0
    return workers, ps


def max_min_fractions(weights: np.ndarray, gpus: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Gavel's max-min fair time fractions X (jobs x types).

    `weights[m, k]`: job m's weighted normalised throughput on type k (0 where it cannot run there); `gpus[m]`:
    the GPUs it holds while it runs; `capacity[k]`: the type's GPUs. Maximises min_m sum_k X[m, k] weights[m, k]
    subject to sum_k X[m, k] <= 1 and sum_m X[m, k] gpus[m] <= capacity[k], then, at that level, the sum of
    sum_k X[m, k] weights[m, k]. Jobs that can run nowhere (a zero row) are left out of the minimum.
    """
    num_jobs, num_types = weights.shape
    fractions = np.zeros((num_jobs, num_types))
    runnable = np.flatnonzero(weights.max(axis=1, initial=0.0) > 0)
    if runnable.size == 0:
        return fractions
    w = weights[runnable]
    n = runnable.size
    size = n * num_types  # variables: X row-major, then the level t
    bounds = [(0.0, 1.0 if w[m, k] > 0 else 0.0) for m in range(n) for k in range(num_types)]
    rows, limits = [], []
    for m in range(n):  # each job runs on one type at a time
        row = np.zeros(size + 1)
        row[m * num_types : (m + 1) * num_types] = 1.0
        rows.append(row)
        limits.append(1.0)
    for k in range(num_types):  # each type's GPUs
        row = np.zeros(size + 1)
        row[k:size:num_types] = gpus[runnable]
        rows.append(row)
        limits.append(float(capacity[k]))
    level = []
    for m in range(n):  # t <= the job's weighted normalised effective throughput
        row = np.zeros(size + 1)
        row[m * num_types : (m + 1) * num_types] = -w[m]
        row[size] = 1.0
        level.append(row)
    first = linprog(
        np.r_[np.zeros(size), -1.0],
        A_ub=np.array(rows + level),
        b_ub=np.array(limits + [0.0] * n),
        bounds=[*bounds, (0.0, None)],
        method="highs",
    )
    if not first.success:
        raise RuntimeError(f"gavel: the max-min programme failed ({first.message})")
    t = float(first.x[size]) * (1.0 - _SLACK)
    second = linprog(
        -w.ravel(),
        A_ub=np.array([row[:size] for row in rows + level]),  # level rows: -w . x <= -t
        b_ub=np.array(limits + [-t] * n),
        bounds=bounds,
        method="highs",
    )
    chosen = second.x if second.success else first.x[:size]
    fractions[runnable] = np.clip(chosen.reshape(n, num_types), 0.0, 1.0)
    return fractions


class Gavel:
    """Heterogeneity-aware max-min fairness (the module docstring); realistic mode only."""

    name = "gavel"

    def __init__(
        self, speed: SpeedModel, placer: Placer | None = None, on_cluster: OnCluster = on_accelerators
    ) -> None:
        self.speed = speed
        self.placer = placer or LoadBalancePlacer()
        self.on_cluster = on_cluster
        self.reset()

    def reset(self) -> None:
        self._cluster: ClusterSpec | None = None
        self._placed_speed: SpeedModel | None = None
        self._throughputs: dict[str, np.ndarray] = {}
        """Per job id: its throughput on each type (a job's speed does not change while it waits)."""
        self._credits: dict[str, np.ndarray] = {}
        """Per job id: per type, the time (s) it is owed there: its target's share of every slot, less what it ran."""
        self._fractions_key: tuple[str, ...] | None = None
        self._fractions: dict[str, np.ndarray] = {}

    def schedule(self, view: ClusterView) -> Allocation:
        if not view.jobs:
            return Allocation()
        types = AcceleratorTypes.of(view.cluster)
        if view.cluster is not self._cluster:
            self.reset()
            self._cluster = view.cluster
            self._placed_speed = self.on_cluster(self.speed, view.cluster)
        fractions = self.fractions(view)
        active = {job.spec.job_id for job in view.jobs}
        self._credits = {job_id: credit for job_id, credit in self._credits.items() if job_id in active}
        for job in view.jobs:
            credit = self._credits.setdefault(job.spec.job_id, np.zeros(_columns(types)))
            credit -= view.slot_s * self._ran(job, types)
            credit += view.slot_s * fractions[job.spec.job_id]
        chosen = self._choose(view, types, fractions)
        # placed in the order chosen; a job that changes type gives up its servers (it restarts elsewhere)
        order = sorted(chosen, key=lambda rank: chosen[rank][1])
        jobs: list[JobView] = []
        targets: list[tuple[int, int]] = []
        kinds: list[int] = []
        for rank in (*order, *(rank for rank in range(len(view.jobs)) if rank not in chosen)):
            job = view.jobs[rank]
            kind = chosen[rank][0] if rank in chosen else NO_TYPE
            held = job.allocation.worker_nodes
            if kind != NO_TYPE and held and any(types.type_of_node[node] != kind for node in held):
                job = replace(job, allocation=EMPTY_JOB_ALLOCATION)
            jobs.append(job)
            targets.append(requested_size(job.spec) if rank in chosen else (0, 0))
            kinds.append(kind)
        return place_sticky(replace(view, jobs=tuple(jobs)), targets, self.placer, kinds)

    def fractions(self, view: ClusterView) -> dict[str, np.ndarray]:
        """Per active job id: its target time fraction on each type (re-solved when the set of jobs changes)."""
        key = tuple(job.spec.job_id for job in view.jobs)
        if key == self._fractions_key:
            return self._fractions
        types = AcceleratorTypes.of(view.cluster)
        capacity = np.array(types.gpus or [0.0])  # a cluster without GPUs keeps its CPU-only jobs' books in one column
        rows, gpus = [], []
        for job in view.jobs:
            throughput = self.throughputs(job.spec, view.cluster)
            need = self._gpus(job.spec)
            fits = (capacity >= need - 1e-9) & (throughput > 0)
            mean = throughput.mean() if len(throughput) else 0.0
            # normalised by an equal time share of every type, counted per worker (the module docstring)
            normalised = throughput / mean if mean > 0 else np.zeros_like(throughput)
            rows.append(np.where(fits, normalised * requested_size(job.spec)[0], 0.0))
            gpus.append(need)
        gpu_jobs = [rank for rank, need in enumerate(gpus) if need > 0]
        x = np.zeros((len(view.jobs), len(capacity)))
        if gpu_jobs:
            x[gpu_jobs] = max_min_fractions(np.array([rows[r] for r in gpu_jobs]), np.array(gpus)[gpu_jobs], capacity)
        for rank, need in enumerate(gpus):
            if need <= 0:  # no GPU: the type does not matter; it runs whenever its CPUs fit (type 0 keeps the books)
                x[rank, 0] = 1.0
        self._fractions_key = key
        self._fractions = {job.spec.job_id: x[rank] for rank, job in enumerate(view.jobs)}
        return self._fractions

    def throughputs(self, spec: JobSpec, cluster: ClusterSpec) -> np.ndarray:
        """The job's throughput at its requested size on each type, placed as the profiles were measured: every
        worker on a server of its own of that type, every PS on a server without its workers."""
        known = self._throughputs.get(spec.job_id)
        if known is not None:
            return known
        assert self._placed_speed is not None
        types = AcceleratorTypes.of(cluster)
        workers, ps = requested_size(spec)
        values = np.zeros(_columns(types))
        for kind in range(len(types.types)):
            nodes = [node for node, of in enumerate(types.type_of_node) if of == kind]
            worker_nodes = tuple(nodes[i % len(nodes)] for i in range(workers))
            others = [node for node in range(cluster.num_nodes) if node not in set(worker_nodes)] or [0]
            ps_nodes = tuple(others[i % len(others)] for i in range(ps))
            values[kind] = self._placed_speed.placed_throughput(spec, JobAllocation(worker_nodes, ps_nodes))
        self._throughputs[spec.job_id] = values
        return values

    @staticmethod
    def _gpus(spec: JobSpec) -> float:
        return requested_size(spec)[0] * spec.worker_demand.gpu

    @staticmethod
    def _ran(job: JobView, types: AcceleratorTypes) -> np.ndarray:
        """Per type, the share of the previous slot the job ran there (by its workers; a CPU-only job: type 0)."""
        ran = np.zeros(_columns(types))
        held = job.allocation.worker_nodes
        if not held:
            return ran
        if job.spec.worker_demand.gpu <= 0:
            ran[0] = 1.0
            return ran
        for node in held:
            kind = types.type_of_node[node]
            if kind != NO_TYPE:
                ran[kind] += 1.0 / len(held)
        return ran

    def _choose(
        self, view: ClusterView, types: AcceleratorTypes, fractions: dict[str, np.ndarray]
    ) -> dict[int, tuple[int, int]]:
        """rank -> (type, position in the round's order) of the jobs that run this slot: pairs by credit, a job
        on the first type with GPUs left for it; then pairs without a target share, fastest type first; then jobs
        that no one type can hold, over several (`NO_TYPE`: the placer's type rules)."""
        pairs: list[tuple[bool, float, int, int]] = []
        for rank, job in enumerate(view.jobs):
            x = fractions[job.spec.job_id]
            credit = self._credits[job.spec.job_id]
            throughput = self.throughputs(job.spec, view.cluster)
            for kind in range(len(types.types)):
                if x[kind] > 0:
                    pairs.append((False, -float(credit[kind]), rank, kind))
                elif throughput[kind] > 0 and types.gpus[kind] >= self._gpus(job.spec) - 1e-9:
                    pairs.append((True, -float(throughput[kind]), rank, kind))
        pairs.sort()
        free = list(types.gpus)
        chosen: dict[int, tuple[int, int]] = {}
        for _, _, rank, kind in pairs:
            if rank in chosen:
                continue
            spec = view.jobs[rank].spec
            need = self._gpus(spec)
            if need <= 0:
                chosen[rank] = (NO_TYPE, len(chosen))
            elif need <= free[kind] + 1e-9:
                free[kind] -= need
                chosen[rank] = (kind, len(chosen))
        # a job bigger than every type (Gavel's mechanism assumes none): across types, if what is left holds it
        largest = max(types.gpus, default=0.0)
        for rank, job in enumerate(view.jobs):
            need = self._gpus(job.spec)
            if rank not in chosen and need > largest + 1e-9 and need <= sum(free) + 1e-9:
                for kind in types.order(job.spec.model):
                    taken = min(free[kind], need)
                    free[kind] -= taken
                    need -= taken
                chosen[rank] = (NO_TYPE, len(chosen))
        return chosen


def _columns(types: AcceleratorTypes) -> int:
    """Columns of the per-type books: one per GPU type (one on a cluster without GPUs, for CPU-only jobs)."""
    return max(len(types.types), 1)
