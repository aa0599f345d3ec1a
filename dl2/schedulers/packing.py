"""An order of task requests that the authors' least-loaded placement packs without stranding (compatibility mode).

In the authors' mechanism every task goes to the least-loaded server (load: used slots of all types summed) and
the first task that does not fit there ends the slot (`dl2.schedulers.least_loaded`). In their setting a GPU
worker takes 4 GPU and 2 CPU slots (load 6), a PS or a CPU worker 2 CPU slots (load 2), on servers of 8 + 8.
CPU is what runs out. Asked job by job, a server that received only CPU tasks is full at load 8 while servers
holding GPU workers still have CPU room at load 12: the full server is the least-loaded one, and it refuses every
later task. With `srpt-knee-ladder` on the validation workloads that strands about 32 of the 192 CPU task slots
of a busy slot.

Asking for the same tasks in another order avoids it. Water-filling by load places task kinds in the order asked,
so: first `k` CPU tasks per server (all servers end level), then every GPU worker (each on a server that still
has CPU room for it), then the remaining CPU tasks (onto the servers left lightest). With G GPU workers on N
servers, `k = 4 - ceil(G / N)` fills every server's CPU; a policy sees the switch in the least-loaded server's
free CPU. `cpu_first_count` takes the smallest `k` that a replay of the authors' placement confirms: 0 (GPU workers
first) whenever that packs, so that no job holds PS while its workers wait.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from dl2.core import ClusterSpec
from dl2.schedulers.least_loaded import LeastLoadedNodes
from dl2.schedulers.requests import Request, RoleDemands


def places_everything(cluster: ClusterSpec, order: Sequence[Request], demands: Sequence[RoleDemands]) -> bool:
    """Whether the authors' placement grants every request of `order` (on an empty cluster, as each slot starts)."""
    return len(_place_until_refused(cluster, order, demands)) == len(order)


def is_gpu_task(demands: Sequence[RoleDemands], task: Request) -> bool:
    return demands[task[0]][task[1]][0] > 0


def split_by_kind(tasks: Sequence[Request], demands: Sequence[RoleDemands]) -> tuple[list[Request], list[Request]]:
    """(CPU-only tasks, GPU tasks), each in the order of `tasks`."""
    cpu_tasks: list[Request] = []
    gpu_tasks: list[Request] = []
    for task in tasks:
        (gpu_tasks if is_gpu_task(demands, task) else cpu_tasks).append(task)
    return cpu_tasks, gpu_tasks


def cpu_first_count(cluster: ClusterSpec, tasks: Sequence[Request], demands: Sequence[RoleDemands]) -> int | None:
    """How many CPU-only tasks to ask for before the GPU tasks so that least-loaded placement grants every task of
    `tasks`: `k` per server for the smallest `k` that works (0 when GPU workers first pack, so that no job holds PS
    while its workers wait). None if no `k` works, or if all tasks are of one kind (any order is the same)."""
    cpu_tasks, gpu_tasks = split_by_kind(tasks, demands)
    if not gpu_tasks or not cpu_tasks:
        return None
    num_nodes = cluster.num_nodes
    for per_server in range(math.ceil(len(cpu_tasks) / num_nodes) + 1):
        first = per_server * num_nodes
        if places_everything(cluster, cpu_tasks[:first] + gpu_tasks + cpu_tasks[first:], demands):
            return first
    return None


def packed_order(cluster: ClusterSpec, tasks: Sequence[Request], demands: Sequence[RoleDemands]) -> list[Request]:
    """`tasks` (each request granted one task) reordered so that least-loaded placement grants them all: the first
    `cpu_first_count` CPU-only tasks, then the GPU tasks, then the other CPU-only tasks. If no such order works,
    `tasks` in their own order (which the caller's mechanism then cuts where it must)."""
    first = cpu_first_count(cluster, tasks, demands)
    if first is None:
        return list(tasks)
    cpu_tasks, gpu_tasks = split_by_kind(tasks, demands)
    return cpu_tasks[:first] + gpu_tasks + cpu_tasks[first:]


def place_packed(
    cluster: ClusterSpec, tasks: Sequence[Request], demands: Sequence[RoleDemands]
) -> list[tuple[Request, int]]:
    """(task, server) for `tasks` placed by the authors' rule in an order of the packed family that places them all
    (any one: in compatibility mode speed does not depend on the servers), or, if none does, for those the plain
    order places before the first refusal. Tries first the CPU-first count that fills every server's CPU,
    `tasks per server - ceil(G / N)` (one replay in nearly every slot), then 0, 1, ... per server."""
    cpu_tasks, gpu_tasks = split_by_kind(tasks, demands)
    num_nodes = cluster.num_nodes
    candidates = [0]
    if cpu_tasks and gpu_tasks:
        task_cpu = demands[cpu_tasks[0][0]][cpu_tasks[0][1]][1]
        per_server = int(cluster.nodes[0].capacity.cpu // task_cpu) if task_cpu > 0 else 0
        guess = max(per_server - math.ceil(len(gpu_tasks) / num_nodes), 0)
        candidates = [guess, *(k for k in range(math.ceil(len(cpu_tasks) / num_nodes) + 1) if k != guess)]
    for per_server in candidates:
        first = per_server * num_nodes
        placed = _place_until_refused(cluster, cpu_tasks[:first] + gpu_tasks + cpu_tasks[first:], demands)
        if len(placed) == len(tasks):
            return placed
    return _place_until_refused(cluster, tasks, demands)


def _place_until_refused(
    cluster: ClusterSpec, order: Sequence[Request], demands: Sequence[RoleDemands]
) -> list[tuple[Request, int]]:
    nodes = LeastLoadedNodes(cluster)
    placed = []
    for rank, role in order:
        node = nodes.place(demands[rank][role])
        if node < 0:
            break
        placed.append(((rank, role), node))
    return placed
