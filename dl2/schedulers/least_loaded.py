"""The DL2 authors' placement rule: each task goes to the least-loaded server, and only there.

Load is the sum of used slots over resource types; ties go to the lowest server index. If the task does not fit
on that server the request fails (compatibility mode). Servers sit in a heap of integers
`load * num_nodes + index`, so finding and updating the least-loaded one is a single C-level heap operation.
"""

from __future__ import annotations

import heapq

from dl2.core import ClusterSpec
from dl2.schedulers.requests import Demand


class LeastLoadedNodes:
    """Per-slot placement state of the authors' rule; every slot starts from an empty cluster."""

    def __init__(self, cluster: ClusterSpec) -> None:
        self.num_nodes = cluster.num_nodes
        self.free_gpu = [node.capacity.gpu for node in cluster.nodes]
        self.free_cpu = [node.capacity.cpu for node in cluster.nodes]
        self.free_mem = [node.capacity.mem_gb for node in cluster.nodes]
        self.heap = list(range(self.num_nodes))  # load 0 everywhere: keys are the indices, already a heap

    def place(self, demand: Demand) -> int:
        """Node index that now hosts a task of this demand, or -1 if the least-loaded node cannot take it."""
        key = self.heap[0]
        node = key % self.num_nodes
        gpu, cpu, mem = demand
        if gpu > self.free_gpu[node] or cpu > self.free_cpu[node] or mem > self.free_mem[node]:
            return -1
        self.free_gpu[node] -= gpu
        self.free_cpu[node] -= cpu
        self.free_mem[node] -= mem
        # their load counts slots of every type; units are integral in the authors' setting
        heapq.heapreplace(self.heap, key + round(gpu + cpu + mem) * self.num_nodes)
        return node
