"""Improving a trained policy: RL in a simulated world, then advantage-weighted steps on logged decisions
(DL2 §4.3), each step kept only if the policy then validates no worse.

The pipeline's `finetune` stage runs both (`fine_tune_with_feedback`), its `online` stage the second on the
records clusters logged and then, for a realistic-mode policy, a re-warming in each cluster's calibrated twin
(`learn_online`, `dl2.rl.in_twin`). Logged behaviour can mislead (the logging policy's probabilities are unknown,
the cluster may differ from the simulator), which is why the steps on it are validated before they are kept, and a
challenger from the twin is kept only if the twin finds it faster.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from dl2.env.config import EnvConfig
from dl2.rl.actor_critic import ActorCritic, IterationStats, TrainingState, learn_from_feedback
from dl2.rl.config import RLConfig, TwinLearningConfig
from dl2.rl.feedback import FeedbackBatch
from dl2.rl.in_twin import TwinVerdict, learn_in_twin
from dl2.rl.networks import PolicyNetwork, ValueNetwork
from dl2.rl.training import Trained, load_trained, rl_with_progress
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


@dataclass(frozen=True)
class LearnedOnline:
    """What `learn_online` gave: the feedback steps' checkpoint and outcome (None: nothing to learn from), each
    cluster twin's verdict in order, why there was no learning in a twin (None: there was), and the policy it
    all ends with (None: nothing was kept, the start stands)."""

    feedback: tuple[Checkpoint, FeedbackOutcome] | None
    twin: list[TwinVerdict]
    twin_skipped: str | None
    final: Trained | None


def learn_online(
    env: EnvConfig,
    config: RLConfig,
    start: Trained,
    batches: Sequence[FeedbackBatch],
    steps: int,
    workers: int,
    validated_jct_s: float | None,
    twin_logs: Sequence[Path],
    twin: TwinLearningConfig | None,
    scratch: Path,
) -> LearnedOnline:
    """The feedback steps (`learn_from_records`), then, from what they kept, a re-warming in the calibrated twin of
    each log of `twin_logs` in turn (None `twin`: none), each challenger kept only on the twin's verdict. The
    challengers are written under `scratch`."""
    learned = learn_from_records(env, config, start, batches, steps, workers, validated_jct_s)
    current = with_weights(start, learned[0]) if learned is not None and learned[1].kept else start
    changed = current is not start
    verdicts: list[TwinVerdict] = []
    skipped = None
    if twin is None:
        skipped = "learning in a calibrated twin is off"
    elif start.config.mode != "realistic":
        skipped = "a compat-mode policy: a cluster's calibrated twin plays realistic mode"
    elif not twin_logs:
        skipped = "no cluster log with its cluster.json"
    for index, log in enumerate(twin_logs if skipped is None else ()):
        assert twin is not None
        out = scratch / f"twin-{index}"
        verdict = learn_in_twin(log, current, twin, workers, out, f"re-warmed in the calibrated twin of {log.name}")
        verdicts.append(verdict)
        if verdict.kept:  # its own value network is none: the one it replaces is the closest start for more RL
            challenger = load_trained(out)
            current, changed = replace(challenger, value=current.value, metadata=current.metadata), True
    return LearnedOnline(learned, verdicts, skipped, current if changed else None)


def with_weights(trained: Trained, checkpoint: Checkpoint) -> Trained:
    """`trained` with the networks of `checkpoint` (fresh modules: `trained`'s are left as they are)."""
    shape, network = trained.config.observation.shape, trained.config.network
    policy = PolicyNetwork(shape, network)
    policy.load_state_dict(checkpoint.policy)
    value = ValueNetwork(shape, network)
    value.load_state_dict(checkpoint.value)
    return replace(trained, policy=policy, value=value)


def _copy(module: torch.nn.Module) -> StateDict:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}
