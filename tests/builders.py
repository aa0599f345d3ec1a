"""Hand-made jobs, one-node workloads and a speed model whose results can be computed by hand: what the unit
tests build their cases from (imported, as a module; the fixtures live in `conftest.py` and `kube_fixtures.py`)."""

from __future__ import annotations

from dl2.core import Architecture, ClusterSpec, Job, JobAllocation, JobSpec, Resources, Workload

COMPAT_WORKER = Resources(gpu=4.0, cpu=2.0)
COMPAT_PS = Resources(cpu=2.0)


class LinearSpeed:
    """throughput = number of workers when the job has at least one PS (1 epoch/s per worker at 1 sample/epoch)."""

    def throughput(self, model: str, num_ps: int, num_workers: int) -> float:
        return float(num_workers) if num_ps > 0 else 0.0

    def placed_throughput(self, spec: JobSpec, allocation: JobAllocation) -> float:
        return self.throughput(spec.model, allocation.num_ps, allocation.num_workers)


def make_job(job_id: str, epochs: float, arrival_s: float = 0.0, max_tasks: int = 4, model: str = "resnet-50") -> Job:
    spec = JobSpec(
        job_id=job_id,
        model=model,
        arrival_s=arrival_s,
        declared_epochs=epochs,
        samples_per_epoch=1.0,
        worker_demand=COMPAT_WORKER,
        ps_demand=COMPAT_PS,
        max_workers=max_tasks,
        max_ps=max_tasks,
    )
    return Job(spec, epochs)


def allreduce_job(job_id: str, max_workers: int = 4) -> Job:
    """A data-parallel job (workers only) of 10 epochs."""
    spec = JobSpec(
        job_id=job_id,
        model="resnet-50",
        arrival_s=0.0,
        declared_epochs=10.0,
        samples_per_epoch=1.0,
        worker_demand=COMPAT_WORKER,
        ps_demand=Resources(),
        max_workers=max_workers,
        max_ps=0,
        architecture=Architecture.ALLREDUCE,
        requested_ps=0,
    )
    return Job(spec, 10.0)


def one_node_workload(*jobs: Job, slot_s: float = 100.0, num_nodes: int = 1) -> Workload:
    cluster = ClusterSpec.homogeneous(num_nodes, Resources(gpu=8.0, cpu=8.0), kind="test")
    return Workload("hand", cluster, tuple(jobs), slot_s)
