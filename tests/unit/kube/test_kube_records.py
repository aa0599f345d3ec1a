"""A controller's record completed at the next slot: the progress seen since and where the job's pods ran."""

from __future__ import annotations

from dl2.core import DecisionRecord, JobAllocation
from dl2.kube.records import observed


def draft(job_id: str = "a", progress: float = 2.0) -> DecisionRecord:
    return DecisionRecord(
        time_s=600.0, slot_s=600.0, cluster="c", job_id=job_id, model="resnet-50", architecture="ps", arrival_s=0.0,
        declared_epochs=10.0, samples_per_epoch=100.0, worker_gpu=1.0, worker_cpu=4.0, worker_mem_gb=8.0, ps_cpu=2.0,
        ps_mem_gb=4.0, max_workers=4, max_ps=4, progress_epochs=progress, held_workers=1, held_ps=1,
        model_version="m/1", incumbent="drf", incumbent_workers=2, incumbent_ps=1, proposed_workers=2, proposed_ps=1,
        applied_workers=2, applied_ps=1, mode="active", observed_epochs=0.0,
    )  # fmt: skip


def test_the_next_slot_gives_the_progress_and_the_nodes_the_pods_ran_on():
    record = observed(draft(), {"a": 3.5}, {"a": JobAllocation((0, 1), (1,))})
    assert record.observed_epochs == 1.5
    assert (record.applied_worker_nodes, record.applied_ps_nodes) == ((0, 1), (1,))


def test_a_job_gone_by_the_next_slot_keeps_its_placement_unknown():
    record = observed(draft(), {"a": 10.0}, {"b": JobAllocation((0,), ())})
    assert record.observed_epochs == 8.0
    assert (record.applied_worker_nodes, record.applied_ps_nodes) == ((), ())


def test_a_job_whose_pods_are_all_pending_keeps_its_placement_unknown():
    record = observed(draft(), {"a": 2.0}, {"a": JobAllocation((), ())})
    assert record.observed_epochs == 0.0 and record.applied_worker_nodes == () and record.applied_ps_nodes == ()


def test_without_placements_only_the_progress_is_filled_in():
    record = observed(draft(progress=4.0), {"a": 3.0})
    assert record.observed_epochs == 0.0 and record.applied_worker_nodes == ()
