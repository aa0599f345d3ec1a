"""A what-if run from a scheduler's view: the cluster's active jobs alone, as a deployment knows them, simulated on.

A scheduler that looks ahead (`dl2.rl.lookahead`) has only what a real cluster shows it at a slot boundary: the
active jobs, their progress and the tasks they held. `what_if` turns that `ClusterView` into a `Simulation` that
continues from it in a given world (the catalogue's speeds and interference, or those a cluster's records
calibrate): no future arrivals (nobody knows them), each job needing its declared epochs (what it says of itself;
one already past them finishes in its next running moment), its tasks held as in the view (so a change pays the
rescale pause), and no speed noise or epoch error (the continuation is the model's expectation, not a draw).
"""

from __future__ import annotations

import math
from dataclasses import replace

from dl2.core import Allocation, ClusterView, Job, Workload
from dl2.sim.config import SimConfig
from dl2.sim.simulator import Simulation
from dl2.workload.interference import InterferenceModel
from dl2.workload.speed import SpeedModel

PAST_DECLARED_EPOCHS = 1e-6
"""Epochs left to a job that has already run its declared epochs (it is still active, so it needs a little more)."""


def what_if(
    view: ClusterView, config: SimConfig, speed: SpeedModel, interference: InterferenceModel | None
) -> Simulation:
    """A run of `view`'s active jobs from `view`'s slot on, their allocations being the ones they hold."""
    jobs = tuple(
        Job(job.spec, max(job.spec.declared_epochs, job.progress_epochs + PAST_DECLARED_EPOCHS)) for job in view.jobs
    )
    workload = Workload("what-if", view.cluster, jobs, view.slot_s)
    expected = replace(config, speed_noise=0.0, epoch_error=0.0, slot_s=view.slot_s)
    simulation = Simulation(workload, expected, speed, interference)
    simulation.slot = view.slot
    simulation.begin_slot()  # every job has arrived by now
    for i, job in enumerate(view.jobs):
        simulation.progress[i] = job.progress_epochs
        simulation.gpu_seconds[i] = job.attained_service_gpu_s
        simulation.run_time_s[i] = job.run_time_s
        simulation.last_throughput[i] = job.last_throughput
        if job.run_time_s > 0:
            simulation.first_start_s[i] = job.spec.arrival_s  # a started job: its next change is a rescale
    held = {job.spec.job_id: job.allocation for job in view.jobs if not job.allocation.is_empty}
    simulation.hold(Allocation(held))  # the view's previous allocation also names jobs that have finished
    for i, job in enumerate(view.jobs):
        simulation.num_rescales[i] = job.num_rescales
    return simulation


def remaining_jct_estimate_s(run: Simulation) -> float:
    """What the active jobs of an unfinished what-if run still add to the sum of completion times, estimated
    without simulating: each job's work left at its asked size (the share of its epochs left of its time alone,
    `Simulation.isolated_s`, times the GPUs it asks for) is served shortest first by the whole cluster's GPUs (a
    fluid SRPT, the order that minimises the sum), and no job ends sooner than alone at its asked size.

    A lookahead with a horizon (`dl2.rl.lookahead`) judges every candidate's continuation with this one function,
    so what matters is that it credits work done and jobs finished alike: the first slots are simulated, where the
    candidates differ; the tail, which the base decides for all of them, is estimated."""
    if not run.active:
        return 0.0
    total = run.cluster.total_capacity
    gpu_based = total.gpu > 0
    capacity = total.gpu if gpu_based else total.cpu
    alone: list[float] = []
    work: list[float] = []
    for i in run.active:
        spec = run.specs[i]
        left = max(run.true_epochs[i] - run.progress[i], 0.0) / run.true_epochs[i] if run.true_epochs[i] > 0 else 0.0
        seconds = left * run.isolated_s(i)
        if not math.isfinite(seconds):
            return math.inf
        demand = spec.worker_demand.gpu if gpu_based else spec.worker_demand.cpu
        alone.append(seconds)
        work.append(seconds * demand * spec.requested_workers)
    order = sorted(range(len(work)), key=work.__getitem__)
    served = 0.0
    added = 0.0
    for position in order:
        served += work[position]
        added += max(alone[position], served / capacity)
    return added
