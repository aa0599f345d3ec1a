"""A truth played on a workload: the jobs as the cluster receives them, and the speed and interference they really
run at.

Which jobs are of a new type, which have a scaling knee, and which of the cluster's GPU servers are slow are drawn
with the truth's seed (each its own stream, so that adding a knee or slow nodes to a truth moves no other draw). A
job of a new type is submitted under its type's declared catalogue label, with its type's demands, and with its
epochs rescaled so that what a reader of the catalogue expects of it (its declared epochs at the label's speed at
the asked size) takes as long as the job did in the workload: the arrivals and expected sizes stay the workload's,
only the truth departs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from dl2.core import Architecture, ClusterSpec, Job, JobSpec, Resources, Workload
from dl2.sim.config import SimConfig
from dl2.sim.run import catalogue_speed
from dl2.truth.model import NewJobType, Truth
from dl2.truth.speed import TrueInterference, TrueSpeedModel
from dl2.workload.catalogue import CATALOGUE


@dataclass(frozen=True, slots=True)
class TrueCluster:
    """A workload under a truth: what the simulator or the cluster twin runs."""

    truth: Truth
    workload: Workload
    """The jobs as submitted (arrivals, new types' labels, demands and epochs)."""
    speed: TrueSpeedModel
    interference: TrueInterference
    new_type_of: dict[str, str]
    """Job id -> the new type it really is (absent: the catalogue type it declares)."""
    knee_of: dict[str, int] = field(default_factory=dict)
    """Job id -> its knee (`dl2.truth.model.ScalingKnee.workers`), for the jobs that have one."""
    slow_nodes: frozenset[int] = frozenset()
    """The workload's cluster's nodes that are slow (`dl2.truth.model.SlowNodes`; empty without them): what a
    scheduler reading the truth may be handed."""

    def config(self, config: SimConfig) -> SimConfig:
        """The run's configuration with the truth's cost of a resize."""
        return config if self.truth.rescale is None else replace(config, rescale=self.truth.rescale)

    def type_of(self, spec: JobSpec) -> str:
        """What a job really is: its new type, or its catalogue label."""
        return self.new_type_of.get(spec.job_id, spec.model)

    def oracle_workload(self) -> Workload:
        """The same jobs, each labelled with what it really is: what a heuristic reading the truth is given (a
        new type's name is unknown to the catalogue, so only a scheduler reading the truth can be handed it)."""
        jobs = tuple(
            replace(job, spec=replace(job.spec, model=self.new_type_of[job.spec.job_id]))
            if job.spec.job_id in self.new_type_of
            else job
            for job in self.workload.jobs
        )
        return replace(self.workload, jobs=jobs)


def realise(truth: Truth, workload: Workload) -> TrueCluster:
    """Play `truth` on `workload` (module docstring)."""
    rng = np.random.default_rng([truth.seed, 11])
    draws = rng.uniform(size=workload.num_jobs)
    bounds = np.cumsum([new.share for new in truth.new_types])
    new_of: dict[str, NewJobType] = {}
    jobs = []
    for job, draw in zip(workload.denser(truth.arrival_density).jobs, draws, strict=True):
        position = int(np.searchsorted(bounds, draw, side="right"))
        if position < len(truth.new_types):
            new = truth.new_types[position]
            new_of[job.spec.job_id] = new
            job = _as_new_type(job, new)
        jobs.append(job)
    submitted = replace(workload, jobs=tuple(jobs), name=f"{workload.name}+{truth.name}")
    knee_of = knee_jobs(truth, workload)
    slow = slow_nodes(truth, workload.cluster)
    return TrueCluster(
        truth,
        submitted,
        TrueSpeedModel(truth, new_of, catalogue_speed(), knee_of, slow),
        TrueInterference(truth, new_of),
        {job_id: new.name for job_id, new in new_of.items()},
        knee_of,
        slow,
    )


def knee_jobs(truth: Truth, workload: Workload) -> dict[str, int]:
    """Job id -> its knee, for the share of the jobs the truth's knee names (none without one): drawn from the
    truth's seed in a stream of its own, so the new types' and the interference's draws stay what they were."""
    if truth.knee is None:
        return {}
    draws = np.random.default_rng([truth.seed, 13]).uniform(size=workload.num_jobs)
    return {
        job.spec.job_id: truth.knee.workers
        for job, draw in zip(workload.jobs, draws, strict=True)
        if draw < truth.knee.share
    }


def slow_nodes(truth: Truth, cluster: ClusterSpec) -> frozenset[int]:
    """The nodes of `cluster` that the truth's `SlowNodes` makes slow (none without it): its share of the GPU
    servers (`capacity.gpu > 0`), at least one, drawn from the truth's seed in a stream of its own, so the new
    types', the knee's and the interference's draws stay what they were."""
    if truth.slow_nodes is None:
        return frozenset()
    servers = [node.node_id for node in cluster.nodes if node.capacity.gpu > 0]
    if not servers:
        return frozenset()
    count = max(1, round(truth.slow_nodes.share * len(servers)))
    drawn = np.random.default_rng([truth.seed, 17]).choice(servers, size=count, replace=False)
    return frozenset(int(node) for node in drawn)


def _as_new_type(job: Job, new: NewJobType) -> Job:
    spec = job.spec
    speed = catalogue_speed()
    num_ps = spec.requested_ps if spec.architecture is Architecture.PS else 0
    # epochs per second at the asked size as the catalogue sees the job, before and after the new label
    before = speed.throughput(spec.model, num_ps, spec.requested_workers) / spec.samples_per_epoch
    label = CATALOGUE[new.declared]
    after = speed.throughput(new.declared, num_ps, spec.requested_workers) / label.samples_per_epoch
    ratio = after / before
    allreduce = spec.architecture is Architecture.ALLREDUCE
    relabelled = replace(
        spec,
        model=new.declared,
        samples_per_epoch=label.samples_per_epoch,
        declared_epochs=spec.declared_epochs * ratio,
        worker_demand=new.worker_demand,
        ps_demand=Resources() if allreduce else new.ps_demand,
    )
    return replace(job, spec=relabelled, true_epochs=job.true_epochs * ratio)
