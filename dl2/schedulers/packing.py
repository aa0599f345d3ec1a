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
servers, `k = 4 - ceil(G / N)` fills every server's CPU. The order is checked by replaying the authors' placement
on a copy before it is used.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from dl2.core import ClusterSpec
from dl2.schedulers.least_loaded import LeastLoadedNodes
from dl2.schedulers.requests import Request, RoleDemands


def places_everything(cluster: ClusterSpec, order: Sequence[Request], demands: Sequence[RoleDemands]) -> bool:
    """Whether the authors' placement grants every request of `order` (on an empty cluster, as each slot starts)."""
    nodes = LeastLoadedNodes(cluster)
    return all(nodes.place(demands[rank][role]) >= 0 for rank, role in order)


def packed_order(cluster: ClusterSpec, tasks: Sequence[Request], demands: Sequence[RoleDemands]) -> list[Request]:
    """`tasks` (each request granted one task) reordered so that least-loaded placement grants them all: CPU-only
    tasks up to `k` per server first, then the GPU tasks, then the other CPU-only tasks. `k` is the rule above when
    it works: CPU-only tasks first until every server has room left for exactly the GPU tasks it will take, a
    switch a policy can see in the least-loaded server's free CPU. Otherwise the largest `k` that works; if none
    does, `tasks` in their own order (which the caller's mechanism then cuts where it must)."""
    gpu_tasks = [task for task in tasks if demands[task[0]][task[1]][0] > 0]
    cpu_tasks = [task for task in tasks if demands[task[0]][task[1]][0] <= 0]
    if not gpu_tasks or not cpu_tasks:
        return list(tasks)
    num_nodes = cluster.num_nodes
    gpu_demand = demands[gpu_tasks[0][0]][gpu_tasks[0][1]]
    cpu_demand = demands[cpu_tasks[0][0]][cpu_tasks[0][1]]
    smallest_cpu = min(node.capacity.cpu for node in cluster.nodes)
    slots = int(smallest_cpu // cpu_demand[1]) if cpu_demand[1] > 0 else 0
    # a GPU task takes the CPU of this many CPU-only tasks (one in the authors' setting)
    gpu_in_slots = math.ceil(gpu_demand[1] / cpu_demand[1]) if cpu_demand[1] > 0 else 0
    rule = slots - gpu_in_slots * math.ceil(len(gpu_tasks) / num_nodes)
    candidates = [rule] if rule >= 0 else []
    candidates += range(math.ceil(len(cpu_tasks) / num_nodes), -1, -1)
    for per_server in candidates:
        first = per_server * num_nodes
        order = cpu_tasks[:first] + gpu_tasks + cpu_tasks[first:]
        if places_everything(cluster, order, demands):
            return order
    return list(tasks)
