"""A workload: a cluster and the jobs submitted to it."""

from __future__ import annotations

from dataclasses import dataclass, replace

from dl2.core.cluster import ClusterSpec
from dl2.core.job import Job


@dataclass(frozen=True, slots=True)
class Workload:
    """Jobs to run on a cluster, in slots of `slot_s` seconds.

    Jobs are kept sorted by arrival time; jobs arriving together keep their source order (for the authors'
    workloads that is job-id order), which is the tie-break every scheduler uses.
    """

    name: str
    cluster: ClusterSpec
    jobs: tuple[Job, ...]
    slot_s: float
    """Scheduling interval the workload was built for (1200 s in the authors' simulator)."""
    source: str = ""
    """Where it came from (file path or generator description)."""

    def __post_init__(self) -> None:
        ids = [job.spec.job_id for job in self.jobs]
        if len(set(ids)) != len(ids):
            raise ValueError(f"workload {self.name}: duplicate job ids")
        arrivals = [job.spec.arrival_s for job in self.jobs]
        if arrivals != sorted(arrivals):
            object.__setattr__(self, "jobs", tuple(sorted(self.jobs, key=lambda job: job.spec.arrival_s)))

    @property
    def num_jobs(self) -> int:
        return len(self.jobs)

    def denser(self, density: float) -> Workload:
        """The same jobs with every arrival time divided by `density` (the gaps between arrivals shrink alike;
        below 1, they grow): a load `density` times as dense."""
        if density == 1:
            return self
        jobs = tuple(replace(job, spec=replace(job.spec, arrival_s=job.spec.arrival_s / density)) for job in self.jobs)
        return replace(self, jobs=jobs)
