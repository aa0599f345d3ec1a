"""Training entry points shared by the CLI and the pipelines: supervised warm-up and online RL fine-tuning.

Seeds keep data apart: warm-up records teacher demonstrations on workloads `seed_offset + k`, holds out one
workload for imitation accuracy, RL trains on `train_seed_offset + episode`, checkpoints are chosen on the
validation seeds, and the test workloads (e.g. the authors' reference files) are never touched here.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dl2.env.env import EnvConfig
from dl2.env.observation import ObservationConfig
from dl2.rl.actor_critic import ActorCritic, IterationStats, RLConfig, TrainingState
from dl2.rl.demonstrations import Demonstrations, record, record_on_policy
from dl2.rl.inference import NumpyPolicy
from dl2.rl.model_io import PolicyConfig, save_model
from dl2.rl.networks import NetworkConfig, PolicyNetwork, ValueNetwork
from dl2.rl.supervised import SupervisedConfig, SupervisedHistory, train_supervised
from dl2.rl.workers import RolloutPool
from dl2.rl.workload_source import workload
from dl2.schedulers.registry import PLACERS, make_scheduler
from dl2.sim.config import Mode, SimConfig
from dl2.sim.run import speed_model


@dataclass(frozen=True, slots=True)
class WarmUpConfig:
    """What the supervised warm-up imitates, on which workloads."""

    teacher: str = "optimus"
    """A heuristic scheduler name (drf, fifo, srtf, optimus, optimus-fitted, tiresias)."""
    source: str = "authors-small"
    """Workload source of the demonstrations (`dl2.rl.workload_source`)."""
    mode: str = "compat"
    """Simulator mode."""
    episodes: int = 12
    """Workloads the teacher is recorded on (seeds `seed_offset` ...)."""
    seed_offset: int = 100
    held_out_seed: int = 999
    """Workload whose demonstrations measure imitation accuracy (never trained on)."""
    record_every: int = 2
    """Record every n-th slot (consecutive slots look alike)."""
    dagger_rounds: int = 2
    """Rounds of DAgger after imitating the teacher's own runs: the student drives on fresh workloads, the
    teacher labels what it sees, and training continues on all data so far (0: plain behaviour cloning)."""
    dagger_episodes: int = 4
    """Workloads per DAgger round."""
    observation: ObservationConfig = field(default_factory=ObservationConfig)
    placer: str = "load-balance"
    supervised: SupervisedConfig = field(default_factory=SupervisedConfig)


def sim_config(mode: str, seed: int = 0) -> SimConfig:
    return SimConfig.for_mode(Mode(mode), seed)


def record_teacher(config: WarmUpConfig, seeds: list[int]) -> tuple[Demonstrations, float]:
    """Demonstrations of the teacher on the workloads of `seeds`, and its mean replayed average JCT (s)."""
    mode = Mode(config.mode)
    speed = speed_model(mode)
    compat = mode is Mode.COMPAT
    parts = []
    for seed in seeds:
        teacher = make_scheduler(config.teacher, speed, compat, config.placer)
        parts.append(
            record(
                workload(config.source, seed),
                teacher,
                sim_config(config.mode, seed),
                config.observation,
                PLACERS[config.placer](),
                config.record_every,
            )
        )
    return Demonstrations.concatenate(p[0] for p in parts), float(np.mean([p[1] for p in parts]))


def warm_up(
    config: WarmUpConfig, on_epoch: Callable[[int, float, float], None] | None = None
) -> tuple[PolicyNetwork, SupervisedHistory, dict[str, Any]]:
    torch.set_num_threads(1)
    train, teacher_jct = record_teacher(config, list(range(config.seed_offset, config.seed_offset + config.episodes)))
    held_out, _ = record_teacher(config, [config.held_out_seed])
    policy, history = train_supervised(train, held_out, config.supervised, config.observation.shape, on_epoch=on_epoch)
    next_seed = config.seed_offset + config.episodes
    for _ in range(config.dagger_rounds):
        student = NumpyPolicy.from_state_dict(policy.state_dict(), config.observation.shape, config.supervised.network)
        seeds = range(next_seed, next_seed + config.dagger_episodes)
        next_seed += config.dagger_episodes
        labelled = [record_student(config, student, seed) for seed in seeds]
        train = Demonstrations.concatenate([train, *labelled])
        policy, more = train_supervised(
            train, held_out, config.supervised, config.observation.shape, policy=policy, on_epoch=on_epoch
        )
        history.train_loss += more.train_loss
        history.held_out_accuracy += more.held_out_accuracy
    facts = {
        "demonstrations": len(train),
        "held_out_demonstrations": len(held_out),
        "teacher_replayed_avg_jct_s": teacher_jct,
        "held_out_accuracy": history.held_out_accuracy[-1] if history.held_out_accuracy else None,
    }
    return policy, history, facts


def record_student(config: WarmUpConfig, student: NumpyPolicy, seed: int) -> Demonstrations:
    """One DAgger workload: the (greedy) student drives, the teacher labels."""
    mode = Mode(config.mode)
    teacher = make_scheduler(config.teacher, speed_model(mode), mode is Mode.COMPAT, config.placer)
    return record_on_policy(
        workload(config.source, seed),
        student.greedy_action,
        teacher,
        sim_config(config.mode, seed),
        config.observation,
        PLACERS[config.placer](),
        config.record_every,
    )


def fine_tune(
    env: EnvConfig,
    config: RLConfig,
    pool: RolloutPool,
    policy: PolicyNetwork | None = None,
    value: ValueNetwork | None = None,
    on_iteration: Callable[[IterationStats], None] | None = None,
) -> tuple[ActorCritic, TrainingState]:
    torch.set_num_threads(1)
    trainer = ActorCritic(env, config, policy, value)
    return trainer, trainer.train(pool, on_iteration)


def git_commit() -> str | None:
    done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    return done.stdout.strip() or None


def policy_config(observation: ObservationConfig, network: NetworkConfig, mode: str, placer: str) -> PolicyConfig:
    return PolicyConfig(observation=observation, network=network, mode=mode, placer=placer)


def save_trained(
    directory: Path,
    config: PolicyConfig,
    policy: dict[str, torch.Tensor],
    value: dict[str, torch.Tensor] | None,
    card: str,
    metadata: dict[str, Any],
    overwrite: bool,
) -> Path:
    return save_model(directory, config, policy, value, card, {"git_commit": git_commit(), **metadata}, overwrite)


def as_dict(config: object) -> dict[str, Any]:
    return asdict(config)  # type: ignore[call-overload, no-any-return]
