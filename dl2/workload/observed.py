"""A cluster's own jobs as its decision records saw them: the workload a calibrated twin runs.

A policy fine-tuned in a twin calibrated from a cluster's records (`dl2.workload.calibration`) should train on
that cluster's jobs, not on the catalogue's generator: the mix of types (new ones included, under the labels
they were submitted with), their demands, sizes and arrivals. Each job's first record gives what was submitted
(`DecisionRecord.job_spec`); how many epochs it really needed is known for the jobs that finished while logged
(they leave the records before the last slot: the progress of their last record plus what it observed) and is
the declared number for the others.

`observed_workload` is the records' jobs as they came; `resampled_workload(observed, seed)` a bootstrap of it
for training episodes: as many jobs drawn with replacement, put on the observed arrival times in order, so the
arrival process and the job mix are the cluster's while no two episodes are the same week.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from dl2.core import ClusterSpec, DecisionRecord, Job, Workload

MIN_EPOCHS = 1e-3
"""Floor of a job's epochs (a job that finished within its first logged slot has observed next to none)."""


def observed_jobs(records: Sequence[DecisionRecord]) -> list[Job]:
    """One job per id in `records`, in arrival order (module docstring)."""
    first: dict[str, DecisionRecord] = {}
    last: dict[str, DecisionRecord] = {}
    for record in sorted(records, key=lambda r: (r.time_s, r.job_id)):
        first.setdefault(record.job_id, record)
        last[record.job_id] = record
    if not first:
        return []
    final_time_s = max(record.time_s for record in last.values())
    jobs = []
    for job_id, opening in first.items():
        spec = opening.job_spec()
        closing = last[job_id]
        finished = closing.time_s < final_time_s
        epochs = closing.progress_epochs + closing.observed_epochs if finished else spec.declared_epochs
        jobs.append(Job(spec, max(epochs, MIN_EPOCHS)))
    return sorted(jobs, key=lambda job: (job.spec.arrival_s, job.spec.job_id))


def observed_workload(records: Sequence[DecisionRecord], cluster: ClusterSpec, name: str = "observed") -> Workload:
    """The records' jobs on the records' cluster, in slots of the records' length, the first arrival at 0."""
    jobs = observed_jobs(records)
    if not jobs:
        raise ValueError("no decision records: no jobs to build a workload from")
    start = jobs[0].spec.arrival_s
    shifted = tuple(replace(job, spec=replace(job.spec, arrival_s=job.spec.arrival_s - start)) for job in jobs)
    return Workload(name, cluster, shifted, records[0].slot_s, source=f"decision records of {cluster.name}")


def resampled_workload(observed: Workload, seed: int) -> Workload:
    """A bootstrap of `observed`: as many jobs drawn with replacement (seeded), on the observed arrival times."""
    rng = np.random.default_rng(seed)
    jobs = observed.jobs
    drawn = rng.integers(0, len(jobs), size=len(jobs))
    arrivals = sorted(job.spec.arrival_s for job in jobs)
    resampled = tuple(
        replace(jobs[index], spec=replace(jobs[index].spec, job_id=f"{jobs[index].spec.job_id}#{n}", arrival_s=at))
        for n, (index, at) in enumerate(zip(drawn.tolist(), arrivals, strict=True))
    )
    return replace(observed, name=f"{observed.name}/{seed}", jobs=resampled)
