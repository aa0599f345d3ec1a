"""Marginal allocation on each job's speed-up hull (ours): tasks go where they add the most of a job's best speed.

For each job type the speed function gives, for every task count, the fastest (PS, workers) split; the upper
concave hull of throughput against task count (from zero) is the job's menu of efficient sizes. Every slot, jobs
climb their hulls one segment at a time, the segment with the highest gain per task first, where the gain is
the throughput added as a fraction of the job's best throughput:

    priority = (delta throughput / delta tasks) / best throughput x (remaining time at best speed) ^ -alpha

until the next segment no longer fits the cluster's free capacity. With alpha = 0 this maximises the sum over
jobs of speed / best speed (how many jobs' worth of full-speed progress the cluster makes); marginal allocation
on concave pieces is the classical optimal rule for a separable concave objective under one budget (Fox, 1966).
A small alpha breaks ties towards shorter jobs (SRPT). `DEFAULT_SIZE_EXPONENT` (0.1) was chosen on the validation
workloads `authors-small` seeds 5000-5009, never on test workloads (`benchmarks/speedup_hull.py`, `docs/results.md`).

In the contended setting the cluster is full nearly every slot and jobs hardly queue, so what is lost against
the no-contention bound is jobs running below their best speed; spending each task where it buys the most speed
is what helps, more than strict shortest-first order.

In compatibility mode the tasks are requested in the packed order (`dl2.schedulers.packing`), which the authors'
least-loaded placement packs without stranding CPU: the first `cpu_first_count` CPU-only tasks, then the GPU
workers, then the rest, each kind shortest remaining time first, the first phase counted on what the slot already
holds (`order="shortest-first"` asks job by job, to measure what packing adds). In realistic mode the targets go
straight to the placer. Like Optimus and `srpt-knee`, it uses the simulator's speed function (an oracle).

`order="marginal"` (registered as `speedup-hull-marginal`) asks for the tasks in the order the allocation climbs,
highest priority first, a segment's workers and PS paired as bundles: each request is then the best next segment
given what the slot holds, which a policy scores job by job. It is the teacher for DL2 policies whose slot is
packed after the decision (`ObservationConfig.packed`); asked that way of the authors' placement directly, it
strands CPU like any job-by-job order.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache

from dl2.core import Architecture, ClusterView, JobSpec, JobView
from dl2.schedulers.base import HeuristicScheduler
from dl2.schedulers.packing import cpu_first_count, is_gpu_task, split_by_kind
from dl2.schedulers.placement import Placer
from dl2.schedulers.requests import Counts, Request, RequestStream, Role, RoleDemands
from dl2.workload.speed import SpeedModel

DEFAULT_SIZE_EXPONENT = 0.1
ORDERS = ("packed", "shortest-first", "marginal")
_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class HullPoint:
    """An efficient size of one job type: the fastest split of `tasks` tasks."""

    tasks: int
    throughput: float
    ps: int
    workers: int


class SpeedupHull(HeuristicScheduler):
    name = "speedup-hull"

    def __init__(
        self,
        speed: SpeedModel,
        compat: bool = False,
        placer: Placer | None = None,
        size_exponent: float = DEFAULT_SIZE_EXPONENT,
        order: str = "packed",
    ) -> None:
        """`size_exponent`: alpha above; `order`: how the tasks are requested, 'packed' (compatibility mode; elsewhere
        as 'shortest-first'), 'shortest-first' (job by job) or 'marginal' (as the allocation climbs)."""
        if order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)}, got {order!r}")
        super().__init__(compat, placer)
        self.speed = speed
        self.placement_speed = speed
        self.size_exponent = size_exponent
        self.order = order
        if order == "marginal":
            self.name = "speedup-hull-marginal"
        self._hull = cache(self._build_hull)

    def _build_hull(
        self, model: str, architecture: Architecture, max_workers: int, max_ps: int
    ) -> tuple[HullPoint, ...]:
        return hull_of(lambda ps, workers: self.speed.throughput(model, ps, workers), architecture, max_workers, max_ps)

    def hull(self, spec: JobSpec) -> tuple[HullPoint, ...]:
        """The job type's efficient sizes, starting with the empty allocation."""
        return self._hull(spec.model, spec.architecture, spec.max_workers, spec.max_ps)

    def remaining_at_best_s(self, job: JobView) -> float:
        """The job's remaining time at its best speed."""
        return job.remaining_epochs * job.spec.samples_per_epoch / self.hull(job.spec)[-1].throughput

    def targets(self, view: ClusterView, demands: list[RoleDemands]) -> list[HullPoint]:
        """Per rank, the hull point the job is given this slot (tasks 0: nothing)."""
        return self.climb(view, demands)[0]

    def climb(
        self, view: ClusterView, demands: list[RoleDemands]
    ) -> tuple[list[HullPoint], list[tuple[int, HullPoint]]]:
        """The targets, and the steps that reach them in the order taken: (rank, hull point reached)."""
        steps: list[tuple[int, HullPoint]] = []
        hulls = [self.hull(job.spec) for job in view.jobs]
        level = [0] * len(hulls)
        free = list(view.cluster.total_capacity.as_tuple())
        weights = [
            1.0 / hull[-1].throughput / max(self.remaining_at_best_s(job), _EPS) ** self.size_exponent
            for job, hull in zip(view.jobs, hulls, strict=True)
        ]
        heap = [(-_slope(hull[0], hull[1]) * weights[rank], rank) for rank, hull in enumerate(hulls) if len(hull) > 1]
        heapq.heapify(heap)
        while heap:
            _, rank = heapq.heappop(heap)
            hull = hulls[rank]
            current, step = hull[level[rank]], hull[level[rank] + 1]
            worker, ps = demands[rank][Role.WORKER], demands[rank][Role.PS]
            more_workers, more_ps = step.workers - current.workers, step.ps - current.ps
            # per resource (gpu, cpu, mem), spelled out: thousands of steps a slot at Philly scale
            need_gpu = more_workers * worker[0] + more_ps * ps[0]
            need_cpu = more_workers * worker[1] + more_ps * ps[1]
            need_mem = more_workers * worker[2] + more_ps * ps[2]
            if need_gpu > free[0] + _EPS or need_cpu > free[1] + _EPS or need_mem > free[2] + _EPS:
                continue  # this job stays where it is; smaller steps of other jobs may still fit
            free = [free[0] - need_gpu, free[1] - need_cpu, free[2] - need_mem]
            level[rank] += 1
            steps.append((rank, step))
            if level[rank] + 1 < len(hull):
                heapq.heappush(heap, (-_slope(step, hull[level[rank] + 1]) * weights[rank], rank))
        return [hull[at] for hull, at in zip(hulls, level, strict=True)], steps

    def direct_counts(self, view: ClusterView, demands: list[RoleDemands]) -> Counts | None:
        return [[point.workers, point.ps] for point in self.targets(view, demands)]

    def requests(self, view: ClusterView, counts: Counts) -> RequestStream:
        """This slot's targets, task by task; tasks that `counts` already holds are not asked again (a DAgger label
        restarts the stream from a student's partial allocation)."""
        demands = self._role_demands(view)
        if self.order == "marginal":
            for rank, point in self.climb(view, demands)[1]:
                # only what the slot does not hold yet; a worker and a PS together as one bundle (DL2's third
                # action: fewer decisions per slot)
                more_workers = point.workers - counts[rank][Role.WORKER]
                more_ps = point.ps - counts[rank][Role.PS]
                bundles = max(min(more_workers, more_ps), 0)
                for role, count in ((Role.BUNDLE, bundles), (Role.WORKER, more_workers - bundles)):
                    for _ in range(count):
                        _ = yield rank, role
                for _ in range(more_ps - bundles):
                    _ = yield rank, Role.PS
            return
        targets = self.targets(view, demands)
        # shortest remaining time first within each kind of task: an order a policy scores job by job (a student
        # imitated the arrival order far worse)
        order_of_jobs = sorted(range(len(targets)), key=lambda rank: (self.remaining_at_best_s(view.jobs[rank]), rank))
        tasks: list[Request] = []
        for rank in order_of_jobs:
            point = targets[rank]
            tasks += [(rank, Role.WORKER)] * point.workers + [(rank, Role.PS)] * point.ps
        first = cpu_first_count(view.cluster, tasks, demands) if self.order == "packed" and self.compat else None
        if first is None:
            for request in self._missing(tasks, targets, counts):
                _ = yield request  # not `yield from`: the mechanism sends grants back, which it cannot take
            return
        # the packed order, counted on what the slot already holds: a student that gave more CPU-only tasks than
        # the first phase's share is labelled with GPU workers next, not with the rest of the phase
        cpu_tasks, gpu_tasks = split_by_kind(tasks, demands)
        held = sum(
            ps + (workers if not is_gpu_task(demands, (rank, Role.WORKER)) else 0)
            for rank, (workers, ps) in enumerate(counts)
        )
        for task in self._missing(cpu_tasks, targets, counts):
            if held >= first:
                break
            held += bool((yield task))
        for task in self._missing(gpu_tasks + cpu_tasks, targets, counts):
            _ = yield task

    @staticmethod
    def _missing(tasks: list[Request], targets: list[HullPoint], counts: Counts) -> Iterator[Request]:
        """The tasks of `tasks` that the slot does not hold yet, each checked when it is reached (`counts` is live:
        grants update it). Every task fits the cluster in total: a refusal (compatibility mode) is the mechanism's
        to act on."""
        for rank, role in tasks:
            target = targets[rank].workers if role is Role.WORKER else targets[rank].ps
            if counts[rank][role] < target:
                yield rank, role


def hull_of(
    throughput: Callable[[int, int], float], architecture: Architecture, max_workers: int, max_ps: int
) -> tuple[HullPoint, ...]:
    """The upper concave hull of (tasks, fastest throughput) from the empty allocation, for a throughput of
    (PS, workers): a type's (`SpeedupHull.hull`), or one job's where a model knows it otherwise."""
    fastest: dict[int, HullPoint] = {}
    ps_range = range(1, max_ps + 1) if architecture is Architecture.PS else range(0, 1)
    for ps in ps_range:
        for workers in range(1, max_workers + 1):
            point = HullPoint(ps + workers, throughput(ps, workers), ps, workers)
            if point.tasks not in fastest or point.throughput > fastest[point.tasks].throughput:
                fastest[point.tasks] = point
    hull = [HullPoint(0, 0.0, 0, 0)]
    for point in sorted(fastest.values(), key=lambda p: p.tasks):
        if point.throughput <= hull[-1].throughput:
            continue  # more tasks, no faster: never efficient
        # drop the last point while it lies on or below the chord from the one before it to this point
        while len(hull) >= 2 and _slope(hull[-2], hull[-1]) <= _slope(hull[-2], point):
            hull.pop()
        hull.append(point)
    return tuple(hull)


def _slope(start: HullPoint, end: HullPoint) -> float:
    return (end.throughput - start.throughput) / (end.tasks - start.tasks)
