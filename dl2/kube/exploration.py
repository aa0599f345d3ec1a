"""Exploration in canary mode: a canary job's worker count moved by one around the policy's, the probability logged.

A challenger is evaluated off-policy from the cluster's records (`dl2.rl.off_policy`) only where the records say
how likely each applied decision was. With `spec.canary.explore` above 0, each job the controller may resize in
canary mode (in the scope, not held by Kueue, another owner or its cooldown) has its worker target moved one down
or one up with probability explore / 2 each, where the guardrails and the job's limits allow; each record carries
the probability of its applied size (`DecisionRecord.applied_propensity`; 1 for every other job). Jobs out of the
scope never see it. Pure: the draws come in as numbers (`slot_draws` makes them from the cluster and the slot, so
a controller that restarts mid-slot draws the same).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from dl2.kube.policy import Guardrails
from dl2.kube.reconcile import JobState, Reason, Target
from dl2.schedulers.exploring import drawn_move

EXPLORABLE = (Reason.PROPOSED, Reason.CLAMPED, Reason.UNCHANGED)
"""Targets the controller may change this slot: the others are held where they are for a reason."""


def slot_draws(cluster: str, slot: int, count: int) -> list[float]:
    """`count` uniform draws for one slot of one cluster, the same on every replica and after a restart."""
    rng = np.random.default_rng([zlib.crc32(cluster.encode()), slot])
    return [float(x) for x in rng.random(count)]


def explore(
    jobs: Sequence[JobState], targets: Sequence[Target], guardrails: Guardrails, epsilon: float, draws: Sequence[float]
) -> tuple[list[Target], dict[str, float]]:
    """The targets with each explorable job's workers moved as its draw says, and per moved-or-movable job the
    probability of its applied worker count (jobs not listed: 1). `jobs`, `targets` and `draws` are in the same
    order; a move keeps within minReplicas (and one worker), maxReplicas and the job's limit, maxStepPerSlot from
    its current size, and maxJobsChangedPerSlot."""
    changed = sum(target.size != job.current for job, target in zip(jobs, targets, strict=True))
    explored: list[Target] = []
    propensities: dict[str, float] = {}
    for job, target, draw in zip(jobs, targets, draws, strict=True):
        if epsilon <= 0 or target.reason not in EXPLORABLE or target.workers < 1:
            explored.append(target)
            continue
        down, up = (_allowed(job, target, target.workers + step, guardrails, changed) for step in (-1, 1))
        move, propensities[job.job_id] = drawn_move(draw, epsilon, down, up)
        if move:
            moved = Target(job.job_id, target.workers + move, target.ps, target.reason)
            changed += (moved.size != job.current) - (target.size != job.current)
            target = moved
        explored.append(target)
    return explored, propensities


def _allowed(job: JobState, target: Target, workers: int, guardrails: Guardrails, changed: int) -> bool:
    """Whether `job`'s target may become `workers` workers, with `changed` jobs changed in the slot so far."""
    low = max(1, guardrails.min_replicas)
    high = job.max_workers if guardrails.max_replicas is None else min(job.max_workers, guardrails.max_replicas)
    step = guardrails.max_step_per_slot
    if not low <= workers <= high or (step is not None and abs(workers - job.current[0]) > step):
        return False
    # a job the plan leaves as it is would become one more change of the slot
    newly_changed = target.size == job.current and (workers, target.ps) != job.current
    limit = guardrails.max_jobs_changed_per_slot
    return not (newly_changed and limit is not None and changed >= limit)
