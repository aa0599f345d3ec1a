"""Learning from logged cluster feedback: decision records turned into RL samples (DL2 §4.3, online).

Each slot of a decision log (one cluster) is rebuilt as the scheduler's view: the records carry each job's
demands, limits, progress and held tasks; the cluster is given. The applied decision is replayed through the
same `SlotDecision` the policy drives (per job, bundles first, then workers, then PS, then stop), which yields
the (observation, mask, action) triples the policy would have produced to make that decision, and the observed
progress gives the slot's reward: 'progress' (DL2) = sum of observed epochs / declared epochs, or 'jct' = minus
the jobs in the system (each record is one job present during the slot). Returns are discounted over the log's
slots. `ActorCritic.learn_from_feedback` then takes advantage-weighted steps on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dl2.core import EMPTY_JOB_ALLOCATION, Allocation, ClusterSpec, ClusterView, DecisionRecord, JobAllocation, JobView
from dl2.core.log_format import records_by_slot
from dl2.env.decision import SlotDecision
from dl2.env.observation import ObservationConfig, Observer
from dl2.rl.demonstrations import replay_targets
from dl2.schedulers.placement import Placer


@dataclass(slots=True)
class FeedbackBatch:
    observations: np.ndarray
    masks: np.ndarray
    actions: np.ndarray
    returns: np.ndarray
    """Per decision: the discounted return of its slot."""
    slot_starts: np.ndarray
    """Indices of the first decision of each slot (value-network targets)."""
    num_slots: int

    def __len__(self) -> int:
        return len(self.actions)


def _view(records: Sequence[DecisionRecord], cluster: ClusterSpec, slot: int) -> ClusterView:
    ordered = sorted(records, key=lambda r: (r.arrival_s, r.job_id))
    jobs = tuple(
        JobView(
            r.job_spec(),
            r.progress_epochs,
            0.0,
            JobAllocation((0,) * r.held_workers, (0,) * r.held_ps)
            if r.held_workers or r.held_ps
            else EMPTY_JOB_ALLOCATION,
            0.0,
            0.0,
            0,
        )
        for r in ordered
    )
    first = ordered[0]
    return ClusterView(first.time_s, slot, first.slot_s, cluster, jobs, Allocation())


def feedback_batch(
    records: Sequence[DecisionRecord],
    cluster: ClusterSpec,
    observation: ObservationConfig,
    placer: Placer,
    compat: bool = False,
    reward: str = "progress",
    gamma: float = 0.98,
    reward_scale: float = 10.0,
) -> FeedbackBatch:
    """Samples of one cluster's log (records of other clusters are an error)."""
    by_slot = records_by_slot(records)
    observer = Observer(observation)
    observations, masks, actions, slot_of, rewards = [], [], [], [], []
    for index, time_s in enumerate(sorted(by_slot)):
        slot_records = by_slot[time_s]
        view = _view(slot_records, cluster, index)
        decision = SlotDecision(view, observation.window, compat, placer, packed=compat and observation.packed)
        targets = {r.job_id: (r.applied_workers, r.applied_ps) for r in slot_records}
        for action in replay_targets(decision, targets):
            observations.append(observer(decision))
            masks.append(decision.mask())
            actions.append(action)
            slot_of.append(index)
            decision.step(action)
        if reward == "jct":
            rewards.append(-len(slot_records) / reward_scale)
        else:
            rewards.append(sum(r.observed_epochs / r.declared_epochs for r in slot_records if r.declared_epochs > 0))
    returns_slot = np.zeros(len(rewards))
    running = 0.0
    for k in range(len(rewards) - 1, -1, -1):
        running = rewards[k] + gamma * running
        returns_slot[k] = running
    slot_index = np.array(slot_of, dtype=np.int64)
    _, starts = np.unique(slot_index, return_index=True)
    return FeedbackBatch(
        np.array(observations, dtype=np.float32).reshape(-1, observation.size),
        np.array(masks, dtype=np.int8).reshape(-1, 3 * observation.window + 1),
        np.array(actions, dtype=np.int64),
        returns_slot[slot_index].astype(np.float32) if len(slot_index) else np.zeros(0, dtype=np.float32),
        starts.astype(np.int64),
        len(rewards),
    )
