"""Canary exploration in the controller (`dl2.kube.exploration`): moves by hand, within the guardrails, only where
the controller may resize, with the probability of each applied size."""

from __future__ import annotations

import pytest

from dl2.kube.exploration import explore, slot_draws
from dl2.kube.policy import Guardrails, Mode
from dl2.kube.reconcile import JobState, Reason, Target, plan

DOWN, STAY, UP = 0.05, 0.5, 0.15  # with epsilon 0.2: below 0.1 moves down, 0.1 to 0.2 up, the rest stays


def _jobs() -> list[JobState]:
    return [
        JobState("a", (2, 1), 4, 4),  # may move either way
        JobState("b", (1, 1), 4, 4),  # one worker: may only grow
        JobState("c", (4, 1), 4, 4),  # at its limit: may only shrink
        JobState("d", (2, 1), 4, 4, in_scope=False),  # out of the canary
    ]


NONE = Guardrails()


def _plan(jobs: list[JobState], guardrails: Guardrails = NONE) -> list[Target]:
    return plan(jobs, [job.current for job in jobs], Mode.CANARY, guardrails, 10)


def test_moves_and_their_probabilities_by_hand() -> None:
    jobs = _jobs()
    targets, propensities = explore(jobs, _plan(jobs), Guardrails(), 0.2, [DOWN, DOWN, UP, DOWN])
    assert [t.size for t in targets] == [(1, 1), (1, 1), (4, 1), (2, 1)]
    # a moved down (0.1); b could not shrink: it stays with 0.8 + 0.1; c could not grow: the same; d is not drawn
    assert propensities == pytest.approx({"a": 0.1, "b": 0.9, "c": 0.9})
    targets, propensities = explore(jobs, _plan(jobs), Guardrails(), 0.2, [UP, UP, DOWN, STAY])
    assert [t.size for t in targets] == [(3, 1), (2, 1), (3, 1), (2, 1)]
    assert propensities == pytest.approx({"a": 0.1, "b": 0.1, "c": 0.1})
    assert targets[3].reason is Reason.OUT_OF_SCOPE


def test_the_guardrails_bound_every_move() -> None:
    jobs = _jobs()
    # maxReplicas 2: a cannot grow; minReplicas 2: a cannot shrink either, so it stays for certain
    guardrails = Guardrails(min_replicas=2, max_replicas=2)
    bounded = [JobState("a", (2, 2), 4, 4)]
    targets, propensities = explore(bounded, _plan(bounded, guardrails), guardrails, 0.2, [UP])
    assert targets[0].size == (2, 2) and propensities == {"a": 1.0}
    # one change a slot: the first job's move uses it, the second may not change
    guardrails = Guardrails(max_jobs_changed_per_slot=1)
    targets, _ = explore(jobs[:2], _plan(jobs[:2], guardrails), guardrails, 0.2, [UP, UP])
    assert [t.size for t in targets] == [(3, 1), (1, 1)]
    # the step limit counts from the current size: a proposal already one above may not go one further
    guardrails = Guardrails(max_step_per_slot=1)
    jobs = [JobState("a", (2, 1), 8, 8)]
    proposed = plan(jobs, [(3, 1)], Mode.CANARY, guardrails, 10)
    targets, propensities = explore(jobs, proposed, guardrails, 0.2, [UP])
    assert targets[0].size == (3, 1) and propensities["a"] == pytest.approx(0.9)


def test_held_jobs_are_never_moved() -> None:
    jobs = [JobState("k", (2, 1), 4, 4, kueue=True), JobState("o", (2, 1), 4, 4, size_owned=True)]
    targets, propensities = explore(jobs, _plan(jobs), Guardrails(), 0.5, [DOWN, DOWN])
    assert [t.size for t in targets] == [(2, 1), (2, 1)] and propensities == {}


def test_the_draws_of_a_slot_are_the_same_after_a_restart() -> None:
    assert slot_draws("dl2-local", 7, 5) == slot_draws("dl2-local", 7, 5)
    assert slot_draws("dl2-local", 7, 5) != slot_draws("dl2-local", 8, 5)
    assert all(0 <= x < 1 for x in slot_draws("other", 7, 100))
