"""The pure part of a slot: from the policy's proposal and each job's actual size to the sizes to apply.

No API, no clock, no randomness: the functions here take plain values and return plain values, so every rule is
tested by hand (`tests/unit/kube/test_kube_reconcile.py`). Level-triggered: `plan` says what each job should have;
`changes` compares that with what the job has now, so running it again after a resize (or after a restart) asks
for nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from dl2.kube.policy import Guardrails, Mode


class Reason(StrEnum):
    """Why a job's applied size is what it is."""

    PROPOSED = "proposed"
    """The proposal, within the guardrails."""
    CLAMPED = "clamped"
    """The proposal, moved into the replica bounds or the step limit."""
    UNCHANGED = "unchanged"
    """The proposal is the job's current size."""
    SHADOW = "shadow"
    """The mode does not resize (shadow)."""
    OUT_OF_SCOPE = "out-of-scope"
    """Canary mode, and the job is outside the canary scope."""
    KUEUE = "kueue"
    """Managed by Kueue: a resize would make Kueue requeue it."""
    SIZE_OWNER = "size-owner"
    """Another controller owns its size (an HPA, a GitOps tool): a resize would start a fight over it."""
    COOLDOWN = "cooldown"
    """Resized too recently (`cooldownSlots`)."""
    MAX_CHANGES = "max-changes"
    """This slot already changes `maxJobsChangedPerSlot` jobs."""


@dataclass(frozen=True, slots=True)
class JobState:
    """What the rules need of one job."""

    job_id: str
    current: tuple[int, int]
    """(workers, PS) its spec asks for now."""
    max_workers: int
    max_ps: int
    kueue: bool = False
    in_scope: bool = True
    """In the canary scope (ignored outside canary mode)."""
    resized_slot: int | None = None
    """Slot of the controller's last resize of it."""
    size_owned: bool = False
    """Another controller owns its size (`contract.size_owner`)."""


@dataclass(frozen=True, slots=True)
class Target:
    job_id: str
    workers: int
    ps: int
    reason: Reason

    @property
    def size(self) -> tuple[int, int]:
        return self.workers, self.ps


def may_resize(job: JobState, mode: Mode) -> Reason | None:
    """None if the mode lets the controller resize the job, else why not."""
    if mode in (Mode.OFF, Mode.SHADOW):
        return Reason.SHADOW
    if job.kueue:
        return Reason.KUEUE
    if job.size_owned:
        return Reason.SIZE_OWNER
    if mode is Mode.CANARY and not job.in_scope:
        return Reason.OUT_OF_SCOPE
    return None


def bounds(limit: int, guardrails: Guardrails) -> tuple[int, int]:
    """[low, high] of one role: the job's limit and the guardrails' (a role the job lacks stays at 0)."""
    if limit <= 0:
        return 0, 0
    high = limit if guardrails.max_replicas is None else min(limit, guardrails.max_replicas)
    return min(guardrails.min_replicas, high), high


def clamp_role(proposed: int, current: int, limit: int, guardrails: Guardrails) -> int:
    """One role's count: into the bounds, then at most `maxStepPerSlot` away from the current count."""
    low, high = bounds(limit, guardrails)
    target = min(max(proposed, low), high)
    step = guardrails.max_step_per_slot
    if step is not None:
        target = min(max(target, current - step), current + step)
    return target


def clamp(job: JobState, proposed: tuple[int, int], guardrails: Guardrails, slot: int) -> Target:
    """One job's applied size in an allowed mode (before the per-slot change limit)."""
    workers = clamp_role(proposed[0], job.current[0], job.max_workers, guardrails)
    ps = clamp_role(proposed[1], job.current[1], job.max_ps, guardrails)
    if (workers, ps) == job.current:
        return Target(job.job_id, workers, ps, Reason.UNCHANGED)
    if job.resized_slot is not None and 0 <= slot - job.resized_slot <= guardrails.cooldown_slots:
        return Target(job.job_id, *job.current, Reason.COOLDOWN)
    reason = Reason.PROPOSED if (workers, ps) == proposed else Reason.CLAMPED
    return Target(job.job_id, workers, ps, reason)


def plan(
    jobs: Sequence[JobState], proposals: Sequence[tuple[int, int]], mode: Mode, guardrails: Guardrails, slot: int
) -> list[Target]:
    """Every job's applied size this slot, in the jobs' order (workload order: the first ones keep their change
    when `maxJobsChangedPerSlot` binds)."""
    targets = []
    changed = 0
    limit = guardrails.max_jobs_changed_per_slot
    for job, proposed in zip(jobs, proposals, strict=True):
        blocked = may_resize(job, mode)
        if blocked is not None:
            targets.append(Target(job.job_id, *job.current, blocked))
            continue
        target = clamp(job, proposed, guardrails, slot)
        if target.size != job.current:
            if limit is not None and changed >= limit:
                target = Target(job.job_id, *job.current, Reason.MAX_CHANGES)
            else:
                changed += 1
        targets.append(target)
    return targets


def changes(targets: Sequence[Target], actual: dict[str, tuple[int, int]]) -> list[Target]:
    """The targets a job does not have yet (desired vs actual); jobs gone from `actual` are left out."""
    return [t for t in targets if t.job_id in actual and actual[t.job_id] != t.size]
