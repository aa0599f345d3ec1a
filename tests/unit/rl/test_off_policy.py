"""Off-policy evaluation from decision records: the doubly robust estimate by hand, the rebuilt views, a policy
against itself, and the propensity field through the log format."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from dl2.core import Allocation, ClusterView, DecisionRecord, InputError, JobAllocation
from dl2.core.log_format import parse_record
from dl2.placement.samples import record_run
from dl2.rl.off_policy import RewardModel, logged_slots, off_policy_difference, slot_values
from dl2.schedulers.exploring import ExplorationScope, ExploringScheduler
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import SimConfig
from dl2.sim.run import speed_model
from tests.builders import LinearSpeed, make_job, one_node_workload, tiny_workload


class Fixed:
    name = "fixed"

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def reset(self) -> None:
        pass

    def schedule(self, view: ClusterView) -> Allocation:
        return Allocation({job.spec.job_id: JobAllocation((0,) * self.workers, (0,)) for job in view.jobs})


def _one_record(workers: int, observed: float, propensity: float) -> list[DecisionRecord]:
    # one job of 100 epochs, one slot of 100 s on one node: LinearSpeed runs it at `workers` epochs/s
    workload = one_node_workload(make_job("a", 100.0))
    records = record_run(workload, Fixed(workers), SimConfig.realistic(0, max_slots=1), LinearSpeed(), None)
    return [replace(records[0], observed_epochs=observed, applied_propensity=propensity)]


def test_the_doubly_robust_estimate_by_hand() -> None:
    # logged: 1 worker, observed 40 epochs of 100 (the model says 100 s x 1 epoch/s = 100: factor 0.4 fitted on
    # the log, so the model predicts 0.4 for the logged action); the applied decision was drawn with probability 0.5
    records = _one_record(1, observed=40.0, propensity=0.5)
    model = RewardModel.fitted(records, LinearSpeed())
    assert model.rescaled == pytest.approx(0.4)  # the job held nothing before: its tasks changed
    slots = logged_slots(records, one_node_workload(make_job("a", 1.0)).cluster)
    # a policy that agrees: the model's 0.4 + (0.4 - 0.4) / 0.5; with the model's factor at 1, it would be
    # 1.0 + (0.4 - 1.0) / 0.5 = -0.2: the correction is weighted by 1 / propensity
    same, same_direct, matched = slot_values(slots, Fixed(1), model)
    assert same[0] == pytest.approx(0.4) and same_direct[0] == pytest.approx(0.4) and matched == 1
    unscaled, _, _ = slot_values(slots, Fixed(1), RewardModel(LinearSpeed()))
    assert unscaled[0] == pytest.approx(1.0 + (0.4 - 1.0) / 0.5)
    # a policy that does not agree: the model alone, 2 workers -> 200 epochs x 0.4, capped at what is left (100)
    other, other_direct, other_matched = slot_values(slots, Fixed(2), model)
    assert other[0] == other_direct[0] == pytest.approx(0.8) and other_matched == 0


def test_views_rebuilt_from_records_hold_the_tasks_where_they_were_applied() -> None:
    workload = tiny_workload(num_jobs=10, num_nodes=3, seed=2)
    config = SimConfig.realistic(seed=2)
    speed = speed_model(config.mode)
    records = record_run(workload, make_scheduler("drf", speed, False), config, speed, None)
    slots = logged_slots(records, workload.cluster)
    assert len(slots) == len({r.time_s for r in records})
    applied: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}
    for slot in slots:
        for job, record in zip(slot.view.jobs, slot.records, strict=True):
            assert job.spec.job_id == record.job_id
            if record.job_id in applied and record.held_workers:
                assert (job.allocation.worker_nodes, job.allocation.ps_nodes) == applied[record.job_id]
                assert slot.view.previous.get(record.job_id) == job.allocation  # what a sticky placer keeps
            applied[record.job_id] = (record.applied_worker_nodes, record.applied_ps_nodes)


def test_a_policy_against_itself_differs_by_nothing_and_drf_against_the_logger_is_estimated() -> None:
    workload = tiny_workload(num_jobs=12, num_nodes=2, seed=4)
    config = SimConfig.realistic(seed=4)
    speed = speed_model(config.mode)
    logger = ExploringScheduler(make_scheduler("optimus", speed, False), ExplorationScope(0.3, 1.0), seed=1)
    records = record_run(workload, logger, config, speed, None)
    optimus = make_scheduler("optimus", speed, False)
    itself = off_policy_difference(records, workload.cluster, optimus, make_scheduler("optimus", speed, False), speed)
    assert itself.difference == itself.low == itself.high == 0.0
    assert itself.explored == sum(r.applied_propensity < 1 for r in records) > 0
    assert 0.5 < itself.matched <= 1.0  # unmoved draws (0.7 of them) are the logger's own decisions
    other = off_policy_difference(
        records, workload.cluster, make_scheduler("drf", speed, False), make_scheduler("optimus", speed, False), speed
    )
    assert other.low <= other.difference <= other.high
    assert other.slots == itself.slots and other.blocks >= 2


def test_the_propensity_is_optional_in_the_log_and_must_be_a_probability() -> None:
    record = _one_record(1, observed=40.0, propensity=0.25)[0]
    line = record.to_json_dict()
    assert parse_record(json.dumps(line), "log.jsonl", 1).applied_propensity == 0.25
    del line["applied_propensity"]
    assert parse_record(json.dumps(line), "log.jsonl", 1).applied_propensity == 1.0  # written before exploration
    for bad in (0, 1.5, -0.1, "0.5"):
        with pytest.raises(InputError, match="applied_propensity"):
            parse_record(json.dumps({**line, "applied_propensity": bad}), "log.jsonl", 3)
