"""The asked-sizes scheduler: what a cluster does with dl2 off (each job at the size it was submitted with)."""

from __future__ import annotations

from dataclasses import replace

from dl2.core import Job, Workload
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import SimConfig
from dl2.sim.run import speed_model
from dl2.sim.simulator import Simulation
from dl2.workload.registry import load_workloads
from testbed.twin.workloads import first_jobs
from tests.builders import allreduce_job, make_job, one_node_workload


def _asking(job: Job, workers: int, ps: int) -> Job:
    return replace(job, spec=replace(job.spec, requested_workers=workers, requested_ps=ps))


def _sizes_per_slot(workload: Workload) -> list[dict[str, tuple[int, int]]]:
    """Each slot's (workers, PS) per job that holds tasks, the run played to its end."""
    config = SimConfig.realistic(0, max_slots=2000)
    speed = speed_model(config.mode)
    scheduler = make_scheduler("asked-sizes", speed, compat=False)
    sim = Simulation(workload, config, speed)
    slots = []
    while not sim.done:
        allocation = scheduler.schedule(sim.begin_slot())
        slots.append({job_id: (a.num_workers, a.num_ps) for job_id, a in allocation.jobs.items() if a.num_workers})
        sim.apply(allocation)
    return slots


def test_every_job_runs_at_its_asked_size_while_it_fits() -> None:
    # one node of 8 GPUs and 8 CPUs, workers of 4 GPUs + 2 CPUs, PS of 2 CPUs: a asks 1 worker + 1 PS (of at most
    # 4 + 4), b 1 worker (of 4): they fill the GPUs, and c, asking 2 workers, waits; neither a nor b grows
    workload = one_node_workload(
        _asking(make_job("a", 2.0), 1, 1),
        _asking(allreduce_job("b"), 1, 0),
        _asking(allreduce_job("c"), 2, 0),
    )
    slots = _sizes_per_slot(workload)
    assert slots[0] == {"a": (1, 1), "b": (1, 0)}
    assert all(slot.get("a", (1, 1)) == (1, 1) and slot.get("b", (1, 0)) == (1, 0) for slot in slots)
    assert slots[-1] == {"c": (2, 0)}  # once both are done, c holds all it asked for


def test_no_job_ever_holds_more_than_it_asked() -> None:
    workload = first_jobs(load_workloads("philly")[0], 30)
    asked = {job.spec.job_id: (job.spec.requested_workers, job.spec.requested_ps) for job in workload.jobs}
    slots = _sizes_per_slot(workload)
    assert slots
    for slot in slots:
        for job_id, (workers, ps) in slot.items():
            assert workers <= asked[job_id][0] and ps <= asked[job_id][1]
