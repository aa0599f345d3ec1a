"""`Workload.denser`: arrivals divided by the density, the jobs and their order kept."""

from __future__ import annotations

from dl2.core import Workload
from tests.builders import make_job, one_node_workload


def _workload() -> Workload:
    return one_node_workload(make_job("a", 1.0, 0.0), make_job("b", 1.0, 600.0), make_job("c", 1.0, 1800.0))


def test_arrivals_shrink_by_the_density_in_order() -> None:
    denser = _workload().denser(3.0)
    assert [(job.spec.job_id, job.spec.arrival_s) for job in denser.jobs] == [("a", 0.0), ("b", 200.0), ("c", 600.0)]
    assert denser.cluster == _workload().cluster and denser.name == "hand"


def test_a_density_below_one_spreads_them_and_one_keeps_the_workload() -> None:
    workload = _workload()
    assert [job.spec.arrival_s for job in workload.denser(0.5).jobs] == [0.0, 1200.0, 3600.0]
    assert workload.denser(1.0) is workload
