"""Off-policy evaluation of a challenger from a cluster's decision records: doubly robust over logged propensities.

Before a challenger is promoted, the records the cluster logged under the policy in charge say something about
it without running it: each slot of the log is rebuilt as the view the scheduler had (held tasks on their
recorded nodes, attained service and previous throughput from the job's earlier records), the challenger and the
incumbent each decide on it, and each decision's reward is estimated. The reward is DL2's: a job's progress in
the slot over its declared epochs, summed over the slot's jobs (short jobs count more, as in JCT).

Per record, for a policy's worker and PS counts `a`, the doubly robust estimate (Dudik, Langford & Li, 2011) is

    r_hat(a) + [a == applied] / propensity * (observed - r_hat(applied))

with `r_hat` a reward model (`RewardModel`): the speeds calibrated from the same records, on the recorded nodes
(the job's nodes extended or cut to `a`), scaled by factors fitted on the log for what speeds leave out
(interference, the pause of a rescale). Where the policy agrees with what was
applied the observed progress corrects the model's error, weighted by how likely that decision was
(`DecisionRecord.applied_propensity`, logged by canary exploration: `dl2.schedulers.exploring`); elsewhere the
model alone speaks. The estimate is of the challenger's effect on one slot in the states the incumbent led to,
not of its JCT over a run (which also depends on the states it would lead to): a prediction to compare with the
outcome, not a substitute for it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dl2.core import Allocation, ClusterSpec, ClusterView, DecisionRecord, JobAllocation, JobView, Scheduler
from dl2.core.log_format import records_by_slot
from dl2.sim.metrics import mean_ci95
from dl2.workload.speed import SpeedModel

Counts = tuple[int, int]
REWARDS = ("progress", "remaining")


@dataclass(frozen=True, slots=True)
class LoggedSlot:
    """One slot of a log: the view the scheduler had and the records of its jobs (in the view's order)."""

    view: ClusterView
    records: tuple[DecisionRecord, ...]


@dataclass(frozen=True, slots=True)
class OffPolicyEstimate:
    """A challenger against the incumbent on a log's slots: mean per-slot reward (progress over declared epochs,
    summed over jobs) of each, their relative difference with a 95% interval, and how much of it the logged
    outcomes rather than the reward model carry."""

    challenger: float
    incumbent: float
    difference: float
    """challenger / incumbent - 1: positive when the challenger makes more (normalised) progress."""
    low: float
    high: float
    """95% interval of `difference` (t over the means of `blocks` runs of consecutive slots)."""
    direct_difference: float
    """The same from the reward model alone (the direct method): what the logged outcomes corrected."""
    slots: int
    explored: int
    """Records whose applied decision was drawn (propensity below 1)."""
    matched: float
    """Share of the explored records where the challenger's counts equal the applied ones (where the logged
    outcome corrects the model)."""
    blocks: int

    def summary(self) -> dict[str, float]:
        """The figures a report or a registry keeps."""
        return {
            "difference": self.difference,
            "low": self.low,
            "high": self.high,
            "direct_difference": self.direct_difference,
            "matched": self.matched,
            "explored": float(self.explored),
            "slots": float(self.slots),
        }


def logged_slots(records: Sequence[DecisionRecord], cluster: ClusterSpec) -> list[LoggedSlot]:
    """The log's slots in time order, each rebuilt as the view its scheduler had (records of other clusters are an
    error). A job's held tasks sit on the nodes its previous record applied them to (node 0 where the log has no
    placement), so a policy deciding on the view sees the cluster's free resources as they were."""
    by_slot = records_by_slot(records)
    previous: dict[str, DecisionRecord] = {}
    attained: dict[str, float] = defaultdict(float)
    run_time: dict[str, float] = defaultdict(float)
    rescales: dict[str, int] = defaultdict(int)
    slots = []
    for index, time_s in enumerate(sorted(by_slot)):
        ordered = tuple(sorted(by_slot[time_s], key=lambda r: (r.arrival_s, r.job_id)))
        jobs = []
        for record in ordered:
            before = previous.get(record.job_id)
            held = _held(record, before)
            last_throughput = 0.0
            if before is not None and before.slot_s > 0:
                last_throughput = before.observed_epochs * before.samples_per_epoch / before.slot_s
            jobs.append(
                JobView(
                    record.job_spec(),
                    record.progress_epochs,
                    attained[record.job_id],
                    held,
                    last_throughput,
                    run_time[record.job_id],
                    rescales[record.job_id],
                )
            )
        held_before = Allocation({job.spec.job_id: job.allocation for job in jobs if not job.allocation.is_empty})
        view = ClusterView(time_s, index, ordered[0].slot_s, cluster, tuple(jobs), held_before)
        slots.append(LoggedSlot(view, ordered))
        for record in ordered:
            before = previous.get(record.job_id)
            if record.applied_workers:
                attained[record.job_id] += record.applied_workers * record.worker_gpu * record.slot_s
                run_time[record.job_id] += record.slot_s
            if before is not None and before.applied_workers and _counts(before) != _counts(record):
                rescales[record.job_id] += 1
            previous[record.job_id] = record
    return slots


def _counts(record: DecisionRecord) -> Counts:
    return record.applied_workers, record.applied_ps


def _held(record: DecisionRecord, before: DecisionRecord | None) -> JobAllocation:
    """The tasks `record`'s job held going into its slot: its previous record's applied nodes where they agree
    with the held counts."""
    workers, ps = record.held_workers, record.held_ps
    if not (workers or ps):
        return JobAllocation()
    if before is not None and len(before.applied_worker_nodes) == workers and len(before.applied_ps_nodes) == ps:
        return JobAllocation(before.applied_worker_nodes, before.applied_ps_nodes)
    return JobAllocation((0,) * workers, (0,) * ps)


@dataclass(frozen=True, slots=True)
class RewardModel:
    """Progress over declared epochs for a job's record and a count of tasks: the speeds `speed` gives on the
    recorded nodes (extended with the last of them, or cut, to the counts), times a factor fitted on the log
    itself for what the speeds leave out (co-located jobs' interference; the pause of a rescale): one for a
    job that keeps the tasks it held, one for a job whose tasks change."""

    speed: SpeedModel
    steady: float = 1.0
    rescaled: float = 1.0
    reward: str = "progress"
    """'progress' (DL2's: epochs over declared epochs) or 'remaining' (epochs over the epochs left at the slot's
    start: a job near its end counts most, as shortest-remaining-first does for JCT)."""

    @classmethod
    def fitted(cls, records: Sequence[DecisionRecord], speed: SpeedModel, reward: str = "progress") -> RewardModel:
        """The factors that make the model's total over the log's records of each kind equal to the observed."""
        if reward not in REWARDS:
            raise ValueError(f"reward must be one of {', '.join(REWARDS)}, got {reward!r}")
        sums = {True: [0.0, 0.0], False: [0.0, 0.0]}  # keeps its tasks -> [observed, predicted]
        plain = cls(speed, reward=reward)
        for record in records:
            predicted = plain.predict(record, _counts(record))
            if predicted <= 0:
                continue
            kept = sums[_counts(record) == (record.held_workers, record.held_ps)]
            kept[0] += plain.observed(record)
            kept[1] += predicted
        steady, rescaled = ((o / p if p > 0 else 1.0) for o, p in (sums[True], sums[False]))
        return cls(speed, steady, rescaled, reward)

    def scale(self, record: DecisionRecord) -> float:
        """What a job's epochs in the slot are divided by."""
        if self.reward == "remaining":  # a job past its declared epochs counts as 1% from its end
            return max(record.declared_epochs - record.progress_epochs, 0.01 * record.declared_epochs)
        return record.declared_epochs

    def observed(self, record: DecisionRecord) -> float:
        return record.observed_epochs / self.scale(record) if record.declared_epochs > 0 else 0.0

    def predict(self, record: DecisionRecord, counts: Counts) -> float:
        workers, ps = counts
        if workers == 0 or record.declared_epochs <= 0 or record.samples_per_epoch <= 0:
            return 0.0
        nodes = JobAllocation(_resized(record.applied_worker_nodes, workers), _resized(record.applied_ps_nodes, ps))
        epochs = self.speed.placed_throughput(record.job_spec(), nodes) * record.slot_s / record.samples_per_epoch
        epochs *= self.steady if counts == (record.held_workers, record.held_ps) else self.rescaled
        remaining = record.declared_epochs - record.progress_epochs
        if remaining > 0:
            epochs = min(epochs, remaining)
        return epochs / self.scale(record)


def _resized(nodes: tuple[int, ...], count: int) -> tuple[int, ...]:
    if len(nodes) >= count:
        return nodes[:count]
    return nodes + (nodes[-1] if nodes else 0,) * (count - len(nodes))


def slot_values(
    slots: Sequence[LoggedSlot], policy: Scheduler, model: RewardModel
) -> tuple[np.ndarray, np.ndarray, int]:
    """Per slot, the doubly robust and the direct-method reward of `policy`'s decisions, and how many explored
    records its decisions matched."""
    policy.reset()
    doubly_robust = np.zeros(len(slots))
    direct = np.zeros(len(slots))
    matched = 0
    for index, slot in enumerate(slots):
        decided = policy.schedule(slot.view)
        for record in slot.records:
            placed = decided.get(record.job_id)
            counts = (placed.num_workers, placed.num_ps)
            modelled = model.predict(record, counts)
            direct[index] += modelled
            doubly_robust[index] += modelled
            if counts == _counts(record):
                correction = model.observed(record) - modelled
                doubly_robust[index] += correction / record.applied_propensity
                matched += record.applied_propensity < 1.0
    return doubly_robust, direct, matched


def off_policy_difference(
    records: Sequence[DecisionRecord],
    cluster: ClusterSpec,
    challenger: Scheduler,
    incumbent: Scheduler,
    speed: SpeedModel,
    blocks: int = 20,
    reward: str = "progress",
) -> OffPolicyEstimate:
    """The challenger against the incumbent on the log of `records` (`speed`: the reward model's, the speeds the
    same records calibrate; `reward`: `RewardModel.reward`)."""
    slots = logged_slots(records, cluster)
    if not slots:
        raise ValueError("no records to evaluate on")
    model = RewardModel.fitted(records, speed, reward)
    ours, ours_direct, matched = slot_values(slots, challenger, model)
    theirs, theirs_direct, _ = slot_values(slots, incumbent, model)
    base = float(np.mean(theirs))
    # consecutive slots are nearly the same state: the interval is over means of runs of slots (batch means)
    runs = [float(np.mean(part)) for part in np.array_split(ours - theirs, min(blocks, len(slots))) if len(part)]
    mean, half = mean_ci95(runs)
    scale = base if base > 0 else 1.0
    explored = sum(r.applied_propensity < 1.0 for r in records)
    return OffPolicyEstimate(
        challenger=float(np.mean(ours)),
        incumbent=base,
        difference=mean / scale,
        low=(mean - half) / scale,
        high=(mean + half) / scale,
        direct_difference=float(np.mean(ours_direct) - np.mean(theirs_direct)) / scale,
        slots=len(slots),
        explored=explored,
        matched=matched / explored if explored else 0.0,
        blocks=len(runs),
    )
