"""Improving a trained policy: RL in a simulated world, then advantage-weighted steps on logged decisions
(DL2 §4.3), each step kept only if the policy then validates no worse.

The pipeline's `finetune` stage runs both (`fine_tune_with_feedback`), its `online` stage only the second on
the records clusters logged (`learn_from_records`). Logged behaviour can mislead (the logging policy's
probabilities are unknown, the cluster may differ from the simulator), which is why the steps on it are
validated before they are kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from dl2.env.config import EnvConfig
from dl2.rl.actor_critic import ActorCritic, IterationStats, TrainingState, learn_from_feedback
from dl2.rl.config import RLConfig
from dl2.rl.feedback import FeedbackBatch
from dl2.rl.training import Trained, rl_with_progress
from dl2.rl.workers import RolloutPool, make_pool

StateDict = dict[str, torch.Tensor]


@dataclass(frozen=True)
class FeedbackOutcome:
    """What the steps on logged decisions gave: the validation before and after, whether they were kept, and the
    last step's losses."""

    decisions: int
    validation_jct_s_before: float
    validation_jct_s_after: float
    kept: bool
    policy_loss: float
    value_loss: float

    def record(self, logs: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The outcome as model metadata and stage reports hold it, with the logs it learned from."""
        return {
            "logs": list(logs),
            "validation_avg_jct_s_before": self.validation_jct_s_before,
            "validation_avg_jct_s_after": self.validation_jct_s_after,
            "kept": self.kept,
            "policy_loss": self.policy_loss,
            "value_loss": self.value_loss,
        }


@dataclass(frozen=True)
class Checkpoint:
    """A policy, its value network and the validation average JCT that chose it."""

    policy: StateDict
    value: StateDict
    validation_jct_s: float


@dataclass(frozen=True)
class FineTuned:
    """`fine_tune_with_feedback`'s result: the RL run's state with its best checkpoint replaced by the one
    finally chosen, the validation of the starting model, what the feedback steps gave (None: no steps) and the
    wall-clock seconds."""

    state: TrainingState
    initial_validation_jct_s: float
    feedback: FeedbackOutcome | None
    seconds: float


def learn_from_batches(
    trainer: ActorCritic, start: Checkpoint, batches: Sequence[FeedbackBatch], steps: int, pool: RolloutPool
) -> tuple[Checkpoint, FeedbackOutcome | None]:
    """`steps` advantage-weighted steps per batch from `start`; the result if it validates no worse than
    `start`, else `start` (the checkpoint chosen, and what happened; None when there was nothing to learn)."""
    if not batches or steps == 0:
        return start, None
    trainer.policy.load_state_dict(start.policy)
    trainer.value.load_state_dict(start.value)
    losses = [learn_from_feedback(trainer, batch, steps) for batch in batches]
    after = trainer.validate(pool)
    kept = after <= start.validation_jct_s
    outcome = FeedbackOutcome(
        decisions=sum(len(batch) for batch in batches),
        validation_jct_s_before=start.validation_jct_s,
        validation_jct_s_after=after,
        kept=kept,
        policy_loss=losses[-1][0],
        value_loss=losses[-1][1],
    )
    if not kept:
        return start, outcome
    return Checkpoint(_copy(trainer.policy), _copy(trainer.value), after), outcome


def fine_tune_with_feedback(
    env: EnvConfig,
    config: RLConfig,
    start: Trained,
    batches: Sequence[FeedbackBatch],
    feedback_steps: int,
    workers: int,
    on_iteration: Callable[[IterationStats], None] | None = None,
) -> FineTuned:
    """RL from `start` (the best validating checkpoint kept), then the feedback steps from that checkpoint."""
    torch.manual_seed(config.seed)
    started = time.perf_counter()
    pool = make_pool("local", workers)
    try:
        trainer, state = rl_with_progress(env, config, pool, start, on_iteration=on_iteration)
        best = Checkpoint(state.best_policy, state.best_value, state.best_validation_jct_s)
        chosen, feedback = learn_from_batches(trainer, best, batches, feedback_steps, pool)
    finally:
        pool.close()
    state = replace(state, best_policy=chosen.policy, best_value=chosen.value)
    state.best_validation_jct_s = chosen.validation_jct_s
    return FineTuned(state, trainer.initial_validation_jct_s, feedback, time.perf_counter() - started)


def learn_from_records(
    env: EnvConfig,
    config: RLConfig,
    start: Trained,
    batches: Sequence[FeedbackBatch],
    steps: int,
    workers: int,
    validated_jct_s: float | None = None,
) -> tuple[Checkpoint, FeedbackOutcome] | None:
    """The feedback steps alone from a trained model: the checkpoint chosen and what happened (None: nothing to
    learn from); `validated_jct_s`: the model's validation figure when already measured on the same seeds
    (None: validated here first)."""
    if not batches or steps == 0:
        return None
    torch.manual_seed(config.seed)
    torch.set_num_threads(1)
    pool = make_pool("local", workers)
    try:
        trainer = ActorCritic(env, config, start.policy, start.value)
        before = trainer.validate(pool) if validated_jct_s is None else validated_jct_s
        chosen, outcome = learn_from_batches(
            trainer, Checkpoint(_copy(trainer.policy), _copy(trainer.value), before), batches, steps, pool
        )
    finally:
        pool.close()
    assert outcome is not None  # there were batches and steps
    return chosen, outcome


def _copy(module: torch.nn.Module) -> StateDict:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}
