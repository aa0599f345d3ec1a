"""Training jobs: what a user submits (JobSpec) and the ground truth only the simulator reads (Job)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from dl2.core.resources import Resources


class Architecture(StrEnum):
    """How a job synchronises its workers."""

    PS = "ps"
    """Parameter-server job: workers push gradients to and pull parameters from PS tasks (DL2 §2)."""
    ALLREDUCE = "allreduce"
    """Data-parallel all-reduce job (DDP): workers only, no PS (DL2 §7)."""


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job as submitted: everything a scheduler may know about it."""

    job_id: str
    """Unique id within the workload (traceable to the source row)."""
    model: str
    """Job type: a model name of the catalogue (`dl2.workload.catalogue`)."""
    arrival_s: float
    """Submission time, seconds from the start of the workload."""
    declared_epochs: float
    """Epochs the user declares (DL2 §6.4: may be wrong; the truth is `Job.true_epochs`)."""
    samples_per_epoch: float
    """Throughput units per epoch: epochs per second = throughput / samples_per_epoch."""
    worker_demand: Resources
    """Resources of one worker."""
    ps_demand: Resources
    """Resources of one parameter server (zero for all-reduce jobs)."""
    max_workers: int
    """Most workers the job may hold."""
    max_ps: int
    """Most parameter servers the job may hold (0 for all-reduce jobs)."""
    architecture: Architecture = Architecture.PS
    """Parameter-server or all-reduce."""
    requested_workers: int = 1
    """Workers the user asked for (what a gang scheduler such as Tiresias gives)."""
    requested_ps: int = 1
    """Parameter servers the user asked for (0 for all-reduce jobs)."""

    def __post_init__(self) -> None:
        if self.architecture is Architecture.ALLREDUCE and (self.max_ps or self.requested_ps):
            raise ValueError(f"job {self.job_id}: all-reduce jobs have no parameter servers")
        if self.max_workers < 1:
            raise ValueError(f"job {self.job_id}: max_workers must be at least 1")


@dataclass(frozen=True, slots=True)
class Job:
    """A job of a workload: its submission plus the truth the simulator uses to run it."""

    spec: JobSpec
    true_epochs: float
    """Epochs it really needs to finish (equal to `declared_epochs` unless estimates are wrong)."""
    trace_duration_s: float | None = None
    """Run time recorded in the source trace, if any (at `requested_workers`)."""
