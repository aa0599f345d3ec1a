"""Exact credit for single decisions (compatibility mode): replace one decision, finish the run, compare.

Why: sampling from a warmed-up policy rarely leaves its teacher's choices (plain cross-entropy puts the actions a
teacher never takes far below the ones it takes), so neither DL2's returns nor exact slot credit
(`dl2.rl.perturbation`) see those actions tried, and the runs that do try them credit a whole slot's ~100-190
decisions with one number.

The greedy policy plays a training workload, and at a few random slots one decision, drawn uniformly from the
slot's decisions, is replaced by each of up to `alternatives` other possible actions, drawn uniformly. The rest of
that slot is greedy, and a continuation policy finishes the run: the greedy policy itself (exact Q-values of the
policy being improved: policy iteration) or a heuristic run by its own mechanism (the teacher's cost-to-go, as in
AggreVaTe, Ross & Bagnell 2014; much cheaper). The difference in total JCT against the greedy decision is that
action's exact advantage in that state, with common random numbers: classification-based approximate policy
iteration (Lagoudakis & Parr 2003) on the policy's own states. The update that uses it
(`ActorCritic.update_deviations`) reweights the policy by these advantages within a KL trust region.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dl2.core import Allocation, ClusterView
from dl2.env.decision import SlotDecision, action_count
from dl2.env.observation import Observer
from dl2.rl.inference import NumpyPolicy
from dl2.rl.learned import LearnedScheduler
from dl2.rl.model_io import PolicyConfig
from dl2.rl.perturbation import ForkedRunTask, allocation_counts, finish
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import Mode
from dl2.sim.run import speed_model

POLICY = "policy"
"""Continuation by the greedy policy being trained (exact policy iteration)."""


@dataclass(frozen=True, slots=True)
class DeviationTask(ForkedRunTask):
    """One training workload's deviations: at each fork one decision is replaced."""

    alternatives: int = 6
    """Other possible actions tried in place of the chosen decision (fewer when fewer are possible)."""
    continuation: str = POLICY
    """Who finishes each run: 'policy' (the greedy policy) or a heuristic's name (its own mechanism)."""


@dataclass(slots=True)
class DeviationBatch:
    """Per deviated state: its observation, mask and the evaluated actions, greedy first."""

    observations: np.ndarray
    masks: np.ndarray
    actions: np.ndarray
    """(states, 1 + alternatives): column 0 is the greedy action; unused cells hold the greedy action too."""
    advantages: np.ndarray
    """Same shape: greedy run minus the run with that action, in slots of average JCT (column 0: 0)."""
    evaluated: np.ndarray
    """Same shape, bool: which cells hold an evaluated action."""
    slots: np.ndarray
    """Per state: the slot it was in."""
    indices: np.ndarray
    """Per state: the decision's index within its slot."""
    greedy_avg_jct_s: float
    workload: str


class _SlotReplay:
    """The greedy policy's slot from a view, with one decision replaced if asked."""

    def __init__(self, config: PolicyConfig, policy: NumpyPolicy) -> None:
        self.config = config
        self.policy = policy
        self.observer = Observer(config.observation)

    def states(self, view: ClusterView) -> list[tuple[np.ndarray, np.ndarray, int]]:
        """(observation, mask, greedy action) of every decision of the greedy slot."""
        decision = self._decision(view)
        states = []
        while not decision.done:
            observation, mask = self.observer(decision), decision.mask()
            states.append((observation, mask, self.policy.greedy_action(observation, mask)))
            decision.step(states[-1][2])
        return states

    def run(self, view: ClusterView, index: int, action: int) -> Allocation:
        """The slot's allocation with decision number `index` replaced by `action`, the others greedy."""
        decision = self._decision(view)
        step = 0
        while not decision.done:
            greedy = self.policy.greedy_action(self.observer(decision), decision.mask())
            decision.step(action if step == index else greedy)
            step += 1
        return decision.allocation()

    def _decision(self, view: ClusterView) -> SlotDecision:
        observation = self.config.observation
        return SlotDecision(view, observation.window, True, None, work_conserving=True, packed=observation.packed)


def _continuation(task: DeviationTask, greedy: LearnedScheduler) -> Callable[[ClusterView], Allocation]:
    if task.continuation == POLICY:
        return greedy.schedule
    return make_scheduler(task.continuation, speed_model(Mode.COMPAT), True).schedule


def run_deviations(task: DeviationTask) -> DeviationBatch:
    config = task.config
    if config.mode != "compat":
        raise ValueError("deviation credit needs compatibility mode (a deterministic simulator)")
    if task.alternatives < 1:
        raise ValueError("deviation credit needs at least one alternative per state")
    run, rng = task.forked_run()
    work, greedy_total = run.work, run.total_jct_s
    continue_with = _continuation(task, run.greedy)
    scale = len(work.jobs) * work.slot_s  # advantages in slots of average JCT
    replay = _SlotReplay(config, task.policy)
    width = 1 + task.alternatives
    observations, masks, actions, advantages, evaluated, slots, indices = [], [], [], [], [], [], []
    for fork in run.forks:
        view, twin, greedy_allocation = fork.view, fork.simulation, fork.allocation
        states = replay.states(view)
        index = int(rng.integers(len(states)))
        observation, mask, greedy_action = states[index]
        others = np.flatnonzero(mask)
        others = others[others != greedy_action]
        if not others.size:
            continue  # a forced decision: nothing to compare
        chosen = rng.choice(others, size=min(task.alternatives, others.size), replace=False)
        if task.continuation == POLICY:
            base_total = greedy_total  # the greedy slot, then greedy: the run itself
        else:
            base = twin.fork()
            base.apply(greedy_allocation)
            base_total = finish(base, continue_with, task.max_slots)
        row_actions = np.full(width, greedy_action, dtype=np.int64)
        row_advantages = np.zeros(width)
        row_evaluated = np.zeros(width, dtype=bool)
        row_evaluated[0] = True
        for column, action in enumerate(chosen.tolist(), start=1):
            allocation = replay.run(view, index, action)
            row_actions[column] = action
            row_evaluated[column] = True
            if allocation_counts(allocation) == allocation_counts(greedy_allocation):
                continue  # the same slot: advantage 0, nothing to simulate
            branch = twin.fork()
            branch.apply(allocation)
            row_advantages[column] = (base_total - finish(branch, continue_with, task.max_slots)) / scale
        observations.append(observation)
        masks.append(mask)
        actions.append(row_actions)
        advantages.append(row_advantages)
        evaluated.append(row_evaluated)
        slots.append(view.slot)
        indices.append(index)
    size, num_actions = config.observation.size, action_count(config.observation.window)
    return DeviationBatch(
        np.array(observations, dtype=np.float32).reshape(-1, size),
        np.array(masks, dtype=np.int8).reshape(-1, num_actions),
        np.array(actions, dtype=np.int64).reshape(-1, width),
        np.array(advantages, dtype=np.float64).reshape(-1, width),
        np.array(evaluated, dtype=bool).reshape(-1, width),
        np.array(slots, dtype=np.int64),
        np.array(indices, dtype=np.int64),
        greedy_total / len(work.jobs),
        work.name,
    )
