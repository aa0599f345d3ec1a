"""The read-only view of the cluster that schedulers decide on."""

from __future__ import annotations

from dataclasses import dataclass

from dl2.core.allocation import Allocation, JobAllocation
from dl2.core.cluster import ClusterSpec
from dl2.core.job import JobSpec


@dataclass(frozen=True, slots=True)
class JobView:
    """What a scheduler can observe of one active (arrived, unfinished) job."""

    spec: JobSpec
    progress_epochs: float
    """Epochs completed so far."""
    attained_service_gpu_s: float
    """GPU-seconds the job has received (Tiresias' attained service in the GPU x time plane)."""
    allocation: JobAllocation
    """Tasks the job held during the previous slot."""
    last_throughput: float
    """Observed throughput (samples/s) in the previous slot; 0 if it did not run."""
    run_time_s: float
    """Seconds the job has held at least one task."""
    num_rescales: int
    """How many times its allocation changed after it first started."""

    @property
    def remaining_epochs(self) -> float:
        """Declared epochs left (never negative; a job may run past a too-low declaration)."""
        return max(self.spec.declared_epochs - self.progress_epochs, 0.0)

    @property
    def remaining_fraction(self) -> float:
        """1 - progress / declared epochs, clipped to [0, 1] (SRTF's key in DL2's code)."""
        return min(max(1.0 - self.progress_epochs / self.spec.declared_epochs, 0.0), 1.0)


@dataclass(frozen=True, slots=True)
class ClusterView:
    """Snapshot at a slot boundary; `jobs` keeps the workload order (arrival time, then source order)."""

    time_s: float
    slot: int
    slot_s: float
    cluster: ClusterSpec
    jobs: tuple[JobView, ...]
    previous: Allocation
    """The allocation held during the previous slot (what a sticky placer starts from)."""
