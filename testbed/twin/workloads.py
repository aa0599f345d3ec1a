"""Shaping a workload for a simulated cluster: its first jobs, its first nodes, all-reduce jobs mixed in."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from dl2.core import Architecture, ClusterSpec, Job, Resources, Workload
from dl2.sim.config import Mode
from dl2.sim.run import speed_model
from dl2.workload.catalogue import CATALOGUE


def first_jobs(workload: Workload, num_jobs: int) -> Workload:
    """The first `num_jobs` jobs (in arrival order) on the same cluster."""
    if num_jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {num_jobs}")
    if num_jobs >= workload.num_jobs:
        return workload
    return replace(workload, name=f"{workload.name}[:{num_jobs}]", jobs=workload.jobs[:num_jobs])


def first_nodes(workload: Workload, num_nodes: int) -> Workload:
    """The same jobs on the cluster's first `num_nodes` nodes."""
    if num_nodes < 1:
        raise ValueError(f"--nodes must be at least 1, got {num_nodes}")
    cluster = workload.cluster
    if num_nodes >= cluster.num_nodes:
        return workload
    smaller = ClusterSpec(cluster.nodes[:num_nodes], f"{cluster.name}-{num_nodes}")
    return replace(workload, name=f"{workload.name}@{num_nodes}nodes", cluster=smaller)


def with_allreduce(workload: Workload, fraction: float, seed: int) -> Workload:
    """A seeded `fraction` of the parameter-server jobs made all-reduce (DL2 §7: workers only), keeping each one's
    requested workers; a job with a traced run time gets the epochs that make it run that long at its requested
    workers, as `dl2.workload.mapping` sets them. The workload then differs from the one `dl2 simulate` loads."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"the all-reduce fraction must be in [0, 1], got {fraction}")
    if fraction == 0.0:
        return workload
    draws = np.random.default_rng(seed).random(workload.num_jobs)
    jobs = [
        _as_allreduce(job) if draw < fraction and job.spec.architecture is Architecture.PS else job
        for job, draw in zip(workload.jobs, draws, strict=True)
    ]
    return replace(workload, name=f"{workload.name}+allreduce{fraction:g}", jobs=tuple(jobs))


def _as_allreduce(job: Job) -> Job:
    spec = job.spec
    epochs, true_epochs = spec.declared_epochs, job.true_epochs
    if job.trace_duration_s is not None:
        throughput = speed_model(Mode.REALISTIC).throughput(spec.model, 0, spec.requested_workers)
        epochs = true_epochs = job.trace_duration_s * throughput / CATALOGUE[spec.model].samples_per_epoch
    new = replace(
        spec,
        architecture=Architecture.ALLREDUCE,
        ps_demand=Resources(),
        max_ps=0,
        requested_ps=0,
        declared_epochs=epochs,
    )
    return replace(job, spec=new, true_epochs=true_epochs)
