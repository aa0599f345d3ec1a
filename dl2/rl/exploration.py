"""Job-aware exploration (DL2 §4.3).

Random actions waste most of their tries in a space of 3J+1 actions where most allocations are poor; DL2
instead explores around what a sensible allocation looks like. With probability `epsilon` (annealed to zero)
an action is replaced by an exploratory one: first, a job of the window that has no worker or no PS gets what
it lacks (a job holding only one kind of task makes no progress); otherwise a random job moves towards a
random PS:worker ratio drawn per slot from [1/4, 4] (the measured optimum lies anywhere in that range), or
stops with probability `stop_probability`. DL2's code applies its rules to almost every sampled action and
with a hand-tuned bias; these rules are a documented, switchable simplification.
"""

from __future__ import annotations

import numpy as np

from dl2.env.decision import SlotDecision, encode_action, stop_action
from dl2.rl.config import ExplorationConfig
from dl2.schedulers.requests import Role


def exploratory_action(
    decision: SlotDecision, mask: np.ndarray, ratio: float, config: ExplorationConfig, rng: np.random.Generator
) -> int:
    """A job-aware exploratory action that `mask` allows."""
    stop = stop_action(decision.window)
    ranks = decision.column_ranks()
    for column, rank in enumerate(ranks):
        workers, ps = (int(c) for c in decision.counts[rank])
        if decision.is_ps[rank] and (workers == 0 or ps == 0):
            for role in (Role.BUNDLE, Role.WORKER if workers == 0 else Role.PS):
                action = encode_action(column, role)
                if mask[action]:
                    return action
    if mask[stop] and rng.random() < config.stop_probability:
        return stop
    candidates = [column for column in range(len(ranks)) if mask[3 * column : 3 * column + 3].any()]
    if not candidates:
        return stop
    column = int(rng.choice(candidates))
    rank = ranks[column]
    workers, ps = (int(c) for c in decision.counts[rank])
    preferred = Role.PS if decision.is_ps[rank] and ps < ratio * max(workers, 1) else Role.WORKER
    for role in (preferred, Role.BUNDLE, Role.WORKER, Role.PS):
        action = encode_action(column, role)
        if mask[action]:
            return action
    return stop
