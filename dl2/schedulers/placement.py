"""Placement in realistic mode: placers choose a node per task; placement is sticky across slots.

A `Placer` scores the nodes that can host one more task. `place_sticky` turns per-job targets (workers, PS)
into an allocation: each job keeps the tasks it already has, up to its new target (moving a running task costs
a restart, DL2 §5), and new tasks go where the placer says. A task that fits nowhere is dropped, and a PS job
left without a worker or without a PS gets nothing this slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from dl2.core import (
    Allocation,
    Architecture,
    ClusterSpec,
    ClusterView,
    JobAllocation,
    Resources,
)

_EPS = 1e-9


class Placer(Protocol):
    """Chooses a node for one task."""

    name: str

    def choose(self, free: np.ndarray, capacity: np.ndarray, demand: np.ndarray, job_nodes: Sequence[int]) -> int:
        """Index of the node for a task of `demand`, or -1 if none fits.

        `free` and `capacity` are (num_nodes, 3) arrays of (gpu, cpu, mem_gb); `job_nodes` are the nodes that
        already host this job's tasks (for placers that keep a job together).
        """
        ...


def fitting_nodes(free: np.ndarray, demand: np.ndarray) -> np.ndarray:
    """Boolean mask of the nodes with room for `demand`."""
    mask: np.ndarray = np.all(free >= demand - _EPS, axis=1)
    return mask


def capacity_matrix(cluster: ClusterSpec) -> np.ndarray:
    return np.array([node.capacity.as_tuple() for node in cluster.nodes], dtype=float)


def _vector(resources: Resources) -> np.ndarray:
    return np.array(resources.as_tuple(), dtype=float)


def place_sticky(view: ClusterView, targets: Sequence[tuple[int, int]], placer: Placer) -> Allocation:
    """Allocation giving job `view.jobs[r]` up to `targets[r]` = (workers, PS), keeping existing tasks in place."""
    capacity = capacity_matrix(view.cluster)
    free = capacity.copy()
    kept: list[tuple[list[int], list[int]]] = []
    for job, (workers, ps) in zip(view.jobs, targets, strict=True):
        old = job.allocation
        keep_workers = list(old.worker_nodes[:workers])
        keep_ps = list(old.ps_nodes[:ps])
        for nodes, demand in ((keep_workers, job.spec.worker_demand), (keep_ps, job.spec.ps_demand)):
            if nodes:
                np.subtract.at(free, nodes, _vector(demand))
        kept.append((keep_workers, keep_ps))
    jobs: dict[str, JobAllocation] = {}
    for job, (workers, ps), (worker_nodes, ps_nodes) in zip(view.jobs, targets, kept, strict=True):
        spec = job.spec
        for count, nodes, demand in ((workers, worker_nodes, spec.worker_demand), (ps, ps_nodes, spec.ps_demand)):
            vector = _vector(demand)
            while len(nodes) < count:
                node = placer.choose(free, capacity, vector, worker_nodes + ps_nodes)
                if node < 0:
                    break
                free[node] -= vector
                nodes.append(node)
        runnable = bool(worker_nodes) and (spec.architecture is Architecture.ALLREDUCE or bool(ps_nodes))
        if not runnable:
            for nodes, demand in ((worker_nodes, spec.worker_demand), (ps_nodes, spec.ps_demand)):
                if nodes:
                    np.add.at(free, nodes, _vector(demand))
            continue
        old = job.allocation
        if tuple(worker_nodes) == old.worker_nodes and tuple(ps_nodes) == old.ps_nodes:
            jobs[spec.job_id] = old
        else:
            jobs[spec.job_id] = JobAllocation(tuple(worker_nodes), tuple(ps_nodes))
    return Allocation(jobs)
