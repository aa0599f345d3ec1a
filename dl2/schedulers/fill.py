"""The allocation mechanisms that turn a policy's request stream into an allocation.

- `fill_first_failure` is the authors' simulator: the cluster starts empty every slot, each request is placed on
  the least-loaded server only, and the first request that does not fit ends allocation for the slot.
- `fill_with_placer` is realistic mode: requests are granted against the cluster's free capacity in total
  (a refused job drops out, the others go on: back-filling), then `place_sticky` places the resulting targets,
  keeping running tasks where they are.
"""

from __future__ import annotations

from collections.abc import Sequence

from dl2.core import Allocation, ClusterView, JobAllocation
from dl2.schedulers.least_loaded import LeastLoadedNodes
from dl2.schedulers.placement import Placer, place_sticky
from dl2.schedulers.requests import Counts, RequestStream, Role, RoleDemands

_PS = Role.PS
_WORKER = Role.WORKER


def fill_first_failure(
    view: ClusterView, stream: RequestStream, counts: Counts, demands: Sequence[RoleDemands]
) -> Allocation:
    """`demands[rank]`: the job's worker, PS and bundle demands (`role_demands`)."""
    nodes = LeastLoadedNodes(view.cluster)
    jobs = view.jobs
    has_ps = [job.spec.max_ps > 0 for job in jobs]
    workers: list[list[int]] = [[] for _ in jobs]
    ps: list[list[int]] = [[] for _ in jobs]
    place = nodes.place
    try:
        rank, role = next(stream)
        while True:
            node = place(demands[rank][role])
            if node < 0:
                break
            count = counts[rank]
            if role != _PS:
                workers[rank].append(node)
                count[0] += 1
            if role == _PS or (role != _WORKER and has_ps[rank]):
                ps[rank].append(node)
                count[1] += 1
            rank, role = stream.send(True)
    except StopIteration:
        pass
    finally:
        stream.close()
    return Allocation(
        {
            job.spec.job_id: JobAllocation(tuple(workers[rank]), tuple(ps[rank]))
            for rank, job in enumerate(jobs)
            # a PS job with workers but no PS (its PS was the request that failed) makes no progress: leave it out
            if workers[rank] and (ps[rank] or not has_ps[rank])
        }
    )


def fill_with_placer(
    view: ClusterView,
    stream: RequestStream,
    counts: Counts,
    demands: Sequence[RoleDemands],
    placer: Placer,
    smallest: tuple[float, float, float] = (0.0, 0.0, 0.0),
    speed: object | None = None,
) -> Allocation:
    """`smallest`: per resource, a lower bound on any job's worker or PS demand. Once the free budget falls below
    it in some resource, no further request can be granted and the stream is cut short (a long queue of
    waiting jobs would otherwise each be asked and refused). `speed`: what placement reads per-type speeds from
    (`place_sticky`)."""
    total = view.cluster.total_capacity
    free_gpu, free_cpu, free_mem = total.as_tuple()
    jobs = view.jobs
    has_ps = [job.spec.max_ps > 0 for job in jobs]
    try:
        rank, role = next(stream)
        while True:
            gpu, cpu, mem = demands[rank][role]
            granted = gpu <= free_gpu and cpu <= free_cpu and mem <= free_mem
            if granted:
                free_gpu -= gpu
                free_cpu -= cpu
                free_mem -= mem
                count = counts[rank]
                if role != _PS:
                    count[0] += 1
                if role == _PS or (role != _WORKER and has_ps[rank]):
                    count[1] += 1
                if free_gpu < smallest[0] or free_cpu < smallest[1] or free_mem < smallest[2]:
                    break
            rank, role = stream.send(granted)
    except StopIteration:
        pass
    finally:
        stream.close()
    return place_sticky(view, [(w, p) for w, p in counts], placer, speed=speed)
