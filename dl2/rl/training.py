"""Training entry points shared by the CLI and the pipelines: supervised warm-up and online RL fine-tuning.

Seeds keep data apart: warm-up records teacher demonstrations on workloads `seed_offset + k`, holds out one
workload for imitation accuracy, RL trains on `train_seed_offset + episode`, checkpoints are chosen on the
validation seeds, and the test workloads (e.g. the authors' reference files) are never touched here.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from dl2.core import Scheduler
from dl2.env.env import EnvConfig
from dl2.env.observation import ObservationConfig
from dl2.rl.actor_critic import ActorCritic, IterationStats, RLConfig, TrainingState
from dl2.rl.demonstrations import Demonstrations, SlotTeacher, record, record_on_policy
from dl2.rl.inference import NumpyPolicy
from dl2.rl.model_io import PolicyConfig, save_model
from dl2.rl.networks import NetworkConfig, PolicyNetwork, ValueNetwork
from dl2.rl.rollout_teacher import is_rollout_teacher, make_rollout_teacher
from dl2.rl.supervised import SupervisedConfig, SupervisedHistory, train_supervised
from dl2.rl.workers import RolloutPool
from dl2.rl.workload_source import workload
from dl2.schedulers.registry import PLACERS, make_scheduler
from dl2.sim.config import Mode, SimConfig
from dl2.sim.run import speed_model

_T = TypeVar("_T")
_R = TypeVar("_R")


@dataclass(frozen=True, slots=True)
class WarmUpConfig:
    """What the supervised warm-up imitates, on which workloads."""

    teacher: str = "optimus"
    """A heuristic scheduler name (drf, fifo, srtf, optimus, optimus-fitted, tiresias, srpt-knee-fill), or
    `rollout:srpt-knee-fill` (rollout policy improvement over it: `dl2.rl.rollout_teacher`)."""
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
    dagger_max_slots: int = 3_000
    """A DAgger workload is cut after this many slots (a poor student can take far longer than its teacher)."""
    observation: ObservationConfig = field(default_factory=ObservationConfig)
    placer: str = "load-balance"
    supervised: SupervisedConfig = field(default_factory=SupervisedConfig)
    workers: int = 1
    """Processes recording workloads in parallel (the recordings do not depend on it)."""


def sim_config(mode: str, seed: int = 0) -> SimConfig:
    return SimConfig.for_mode(Mode(mode), seed)


def make_teacher(config: WarmUpConfig) -> Scheduler | SlotTeacher:
    mode = Mode(config.mode)
    speed, compat = speed_model(mode), mode is Mode.COMPAT
    if is_rollout_teacher(config.teacher):
        placer = None if compat else PLACERS[config.placer]()
        return make_rollout_teacher(config.teacher, speed, compat, config.observation.window, placer)
    return make_scheduler(config.teacher, speed, compat, config.placer)


def _in_parallel(
    function: Callable[[_T], _R], arguments: list[_T], workers: int, on_done: Callable[[], None] | None = None
) -> list[_R]:
    """`function` over `arguments` in order, in up to `workers` forked processes (1: in this one); `on_done` is
    called here as each one finishes."""
    with contextlib.ExitStack() as stack:
        if workers <= 1 or len(arguments) <= 1:
            finished: Iterable[_R] = map(function, arguments)
        else:
            pool = stack.enter_context(multiprocessing.get_context("fork").Pool(min(workers, len(arguments))))
            finished = pool.imap(function, arguments, chunksize=1)
        results = []
        for result in finished:
            results.append(result)
            if on_done is not None:
                on_done()
        return results


def _record_one(task: tuple[WarmUpConfig, int]) -> tuple[Demonstrations, float]:
    config, seed = task
    return record(
        workload(config.source, seed),
        make_teacher(config),
        sim_config(config.mode, seed),
        config.observation,
        PLACERS[config.placer](),
        config.record_every,
    )


def record_teacher(
    config: WarmUpConfig, seeds: list[int], on_workload: Callable[[], None] | None = None
) -> list[tuple[Demonstrations, float]]:
    """Per workload of `seeds`: the teacher's demonstrations and its replayed average JCT (s)."""
    return _in_parallel(_record_one, [(config, seed) for seed in seeds], config.workers, on_workload)


def recorded_workloads(config: WarmUpConfig) -> int:
    """How many workloads `warm_up` records (teacher runs, the held-out one and the DAgger rounds')."""
    return config.episodes + 1 + config.dagger_rounds * config.dagger_episodes


def warm_up(
    config: WarmUpConfig,
    on_epoch: Callable[[int, float, float], None] | None = None,
    on_workload: Callable[[], None] | None = None,
    policy: PolicyNetwork | None = None,
) -> tuple[PolicyNetwork, SupervisedHistory, dict[str, Any]]:
    """`on_workload` is called as each of the `recorded_workloads(config)` recordings finishes. `policy`: start
    from this network (e.g. an earlier warm-up) instead of a fresh one; with `config.episodes == 0` it is
    trained on DAgger rounds only (its own states, labelled by the teacher)."""
    if policy is None and config.episodes == 0:
        raise ValueError("a warm-up from scratch needs teacher runs (episodes >= 1)")
    torch.set_num_threads(1)
    seeds = list(range(config.seed_offset, config.seed_offset + config.episodes))
    *parts, (held_out, _) = record_teacher(config, [*seeds, config.held_out_seed], on_workload)
    train = Demonstrations.concatenate([part[0] for part in parts] or [held_out.empty()])
    teacher_jct = float(np.mean([part[1] for part in parts])) if parts else None
    history = SupervisedHistory()
    if parts:
        policy, history = train_supervised(
            train, held_out, config.supervised, config.observation.shape, policy=policy, on_epoch=on_epoch
        )
    assert policy is not None
    next_seed = config.seed_offset + config.episodes
    for _ in range(config.dagger_rounds):
        student = NumpyPolicy.from_state_dict(policy.state_dict(), config.observation.shape, config.supervised.network)
        tasks = [(config, student, seed) for seed in range(next_seed, next_seed + config.dagger_episodes)]
        next_seed += config.dagger_episodes
        labelled = _in_parallel(_record_student, tasks, config.workers, on_workload)
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


def _record_student(task: tuple[WarmUpConfig, NumpyPolicy, int]) -> Demonstrations:
    return record_student(*task)


def record_student(config: WarmUpConfig, student: NumpyPolicy, seed: int) -> Demonstrations:
    """One DAgger workload: the (greedy) student drives, the teacher labels."""
    return record_on_policy(
        workload(config.source, seed),
        student.greedy_action,
        make_teacher(config),
        sim_config(config.mode, seed),
        config.observation,
        PLACERS[config.placer](),
        config.record_every,
        config.dagger_max_slots,
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
