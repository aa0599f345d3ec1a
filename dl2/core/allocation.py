"""Allocations: per job, the nodes that host its workers and parameter servers."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class JobAllocation:
    """Where one job's tasks run: one node index per worker and per parameter server."""

    worker_nodes: tuple[int, ...] = ()
    ps_nodes: tuple[int, ...] = ()

    @property
    def num_workers(self) -> int:
        return len(self.worker_nodes)

    @property
    def num_ps(self) -> int:
        return len(self.ps_nodes)

    @property
    def is_empty(self) -> bool:
        return not self.worker_nodes and not self.ps_nodes

    def same_placement(self, other: JobAllocation) -> bool:
        """True when both hold the same tasks on the same nodes (order of tasks does not matter)."""
        if self is other:
            return True
        return sorted(self.worker_nodes) == sorted(other.worker_nodes) and sorted(self.ps_nodes) == sorted(
            other.ps_nodes
        )


EMPTY_JOB_ALLOCATION = JobAllocation()


@dataclass(frozen=True, slots=True)
class Allocation:
    """A scheduler's decision for one slot: job id -> its tasks' placement. Jobs not listed get nothing."""

    jobs: Mapping[str, JobAllocation] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "jobs", MappingProxyType(dict(self.jobs)))

    def get(self, job_id: str) -> JobAllocation:
        return self.jobs.get(job_id, EMPTY_JOB_ALLOCATION)

    def __iter__(self) -> Iterator[str]:
        return iter(self.jobs)

    def __len__(self) -> int:
        return len(self.jobs)
