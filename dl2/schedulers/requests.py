"""How heuristic policies speak to the allocation mechanism: a stream of task requests.

A policy is a generator that yields `(rank, role)` requests, where `rank` is a job's position in
`view.jobs`, and is sent back whether the request was granted. The mechanism (`dl2.schedulers.fill`) owns the
cluster state and the per-job task counts; it decides placement and what a refusal means (the authors' code
stops the whole slot at the first refusal; realistic mode only drops that job). Policy and mechanism stay
apart, as in Gavel and Blox.
"""

from __future__ import annotations

from collections.abc import Generator
from enum import IntEnum

from dl2.core import Architecture, JobSpec

Demand = tuple[float, float, float]
"""(gpu, cpu, mem_gb) of one request."""


class Role(IntEnum):
    WORKER = 0
    PS = 1
    BUNDLE = 2
    """One worker plus one PS, on one node (a worker alone for an all-reduce job)."""


Request = tuple[int, Role]
RequestStream = Generator[Request, bool, None]
Counts = list[list[int]]
"""Per rank: [workers, parameter servers] granted so far in this slot."""


RoleDemands = tuple[Demand, Demand, Demand]
"""A job's demand per `Role`: worker, PS, bundle."""


def role_demands(spec: JobSpec) -> RoleDemands:
    """Demand of a worker, a PS and a bundle of this job, indexed by `Role`."""
    worker = spec.worker_demand.as_tuple()
    ps = spec.ps_demand.as_tuple()
    if spec.architecture is Architecture.ALLREDUCE:
        return worker, ps, worker
    return worker, ps, (worker[0] + ps[0], worker[1] + ps[1], worker[2] + ps[2])


def bundle_caps(spec: JobSpec) -> tuple[int, int]:
    """(workers, PS) a job reaches when it is given bundles until `below_caps` fails."""
    if spec.architecture is Architecture.ALLREDUCE:
        return spec.max_workers, 0
    bundles = min(spec.max_workers, spec.max_ps)
    return bundles, bundles


def below_caps(spec: JobSpec, workers: int, ps: int) -> bool:
    """Can the job take one more bundle? (Both roles below their caps; all-reduce jobs need workers only.)"""
    if spec.architecture is Architecture.ALLREDUCE:
        return workers < spec.max_workers
    return workers < spec.max_workers and ps < spec.max_ps
