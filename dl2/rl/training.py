"""Training entry points shared by the CLI and the pipelines: supervised warm-up and online RL fine-tuning.

Seeds keep data apart: warm-up records teacher demonstrations on workloads `seed_offset + k`, holds out one
workload for imitation accuracy, RL trains on `train_seed_offset + episode`, checkpoints are chosen on the
validation seeds, and the test workloads (e.g. the authors' reference files) are never touched here.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from dl2.core import Scheduler
from dl2.env.config import EnvConfig
from dl2.env.observation import ObservationConfig
from dl2.io import to_json
from dl2.paths import git_commit
from dl2.rl.actor_critic import ActorCritic, IterationStats, TrainingState
from dl2.rl.config import NetworkConfig, RLConfig, WarmUpConfig, is_search_teacher
from dl2.rl.demonstrations import Demonstrations, SlotTeacher, record, record_on_policy
from dl2.rl.inference import NumpyPolicy
from dl2.rl.model_io import PolicyConfig, load_config, load_state, model_card, save_model
from dl2.rl.networks import PolicyNetwork, ValueNetwork
from dl2.rl.rollout_teacher import is_rollout_teacher, make_rollout_teacher
from dl2.rl.supervised import SupervisedHistory, train_supervised
from dl2.rl.workers import RolloutPool
from dl2.schedulers.placement import Placer
from dl2.schedulers.registry import PLACERS, SCHEDULERS, make_scheduler
from dl2.sim.config import Mode, SimConfig
from dl2.sim.metrics import report_unit
from dl2.sim.run import World, interference_model, speed_model
from dl2.workload.source import workload
from dl2.workload.speed import SpeedModel

_T = TypeVar("_T")
_R = TypeVar("_R")


def sim_config(mode: str, seed: int = 0) -> SimConfig:
    return SimConfig.for_mode(Mode(mode), seed)


def make_teacher(config: WarmUpConfig, world: World | None = None) -> Scheduler | SlotTeacher:
    """The warm-up's teacher; in a calibrated `world` it reads that world's speeds (what the cluster's records
    say, as a deployment could), not the catalogue's."""
    mode = Mode(config.mode)
    speed, compat = (world.speed if world is not None else speed_model(mode)), mode is Mode.COMPAT
    if is_rollout_teacher(config.teacher):
        placer = None if compat else PLACERS[config.placer]()
        return make_rollout_teacher(config.teacher, speed, compat, config.observation.window, placer)
    if is_search_teacher(config.teacher):
        return search_teacher(config.teacher, speed, PLACERS[config.placer])
    return make_scheduler(config.teacher, speed, compat, config.placer)


def search_teacher(name: str, speed: SpeedModel, make_placer: Callable[[], Placer]) -> Scheduler:
    """`lookahead:A+B...` or `lookahead-fitted:A+B...` looking ahead in the world of `speed` (with the catalogue's
    interference), its candidates placing with `make_placer`'s placers: the search `dl2 simulate --scheduler`
    runs by that name, as expert iteration's teacher."""
    from dl2.rl.fitted_lookahead import FITTED_PREFIX, make_fitted_lookahead
    from dl2.rl.lookahead import load_policy, make_lookahead

    world, sim = World(speed, interference_model()), SimConfig.realistic()

    def policy(folder: str, make: Callable[[], Placer]) -> Scheduler:
        return load_policy(folder, compat=False, placer=make())

    if name.startswith(FITTED_PREFIX):
        return make_fitted_lookahead(name, world, sim, make_placer, build_policy=policy)

    def build(candidate: str) -> Scheduler:
        if candidate in SCHEDULERS:
            return make_scheduler(candidate, speed, False, make_placer())
        return policy(candidate, make_placer)

    return make_lookahead(name, build, world, sim)


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


def _record_one(task: tuple[WarmUpConfig, int, World | None]) -> tuple[Demonstrations, float]:
    config, seed, world = task
    return record(
        workload(config.source, seed),
        make_teacher(config, world),
        sim_config(config.mode, seed),
        config.observation,
        PLACERS[config.placer](),
        config.record_every,
        world,
    )


def record_teacher(
    config: WarmUpConfig,
    seeds: list[int],
    on_workload: Callable[[], None] | None = None,
    world: World | None = None,
) -> list[tuple[Demonstrations, float]]:
    """Per workload of `seeds`: the teacher's demonstrations and its replayed average JCT (s), in `world`."""
    return _in_parallel(_record_one, [(config, seed, world) for seed in seeds], config.workers, on_workload)


def recorded_workloads(config: WarmUpConfig) -> int:
    """How many workloads `warm_up` records (teacher runs, the held-out one and the DAgger rounds')."""
    return config.episodes + 1 + config.dagger_rounds * config.dagger_episodes


def warm_up(
    config: WarmUpConfig,
    on_epoch: Callable[[int, float, float], None] | None = None,
    on_workload: Callable[[], None] | None = None,
    policy: PolicyNetwork | None = None,
    world: World | None = None,
) -> tuple[PolicyNetwork, SupervisedHistory, dict[str, Any]]:
    """`on_workload` is called as each of the `recorded_workloads(config)` recordings finishes. `policy`: start
    from this network (e.g. an earlier warm-up) instead of a fresh one; with `config.episodes == 0` it is
    trained on DAgger rounds only (its own states, labelled by the teacher). `world`: where the teacher and the
    student run and what speeds the teacher reads (None: the catalogue's; a cluster's calibrated twin re-warms
    a policy on what that cluster's records say)."""
    if policy is None and config.episodes == 0:
        raise ValueError("a warm-up from scratch needs teacher runs (episodes >= 1)")
    # recordings and training never overlap: the cores that record in `workers` processes train as threads
    torch.set_num_threads(config.workers)
    seeds = list(range(config.seed_offset, config.seed_offset + config.episodes))
    *parts, (held_out, _) = record_teacher(config, [*seeds, config.held_out_seed], on_workload, world)
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
        tasks = [(config, student, seed, world) for seed in range(next_seed, next_seed + config.dagger_episodes)]
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


def _record_student(task: tuple[WarmUpConfig, NumpyPolicy, int, World | None]) -> Demonstrations:
    return record_student(*task)


def record_student(config: WarmUpConfig, student: NumpyPolicy, seed: int, world: World | None = None) -> Demonstrations:
    """One DAgger workload: the (greedy) student drives, the teacher labels, in `world`."""
    return record_on_policy(
        workload(config.source, seed),
        student.greedy_action,
        make_teacher(config, world),
        sim_config(config.mode, seed),
        config.observation,
        PLACERS[config.placer](),
        config.record_every,
        config.dagger_max_slots,
        world,
    )


def fine_tune(
    env: EnvConfig,
    config: RLConfig,
    pool: RolloutPool,
    policy: PolicyNetwork | None = None,
    value: ValueNetwork | None = None,
    on_iteration: Callable[[IterationStats], None] | None = None,
    world: World | None = None,
) -> tuple[ActorCritic, TrainingState]:
    """RL from `policy`/`value` (None: fresh networks), its episodes in `world` (None: the catalogue's)."""
    torch.set_num_threads(1)
    trainer = ActorCritic(env, config, policy, value, world)
    return trainer, trainer.train(pool, on_iteration)


def warm_up_with_progress(
    config: WarmUpConfig,
    policy: PolicyNetwork | None = None,
    on_epoch: Callable[[int, float, float], None] | None = None,
    world: World | None = None,
) -> tuple[PolicyNetwork, SupervisedHistory, dict[str, Any]]:
    """`warm_up` in `world` with progress bars on stderr (recordings, then epochs); `on_epoch` is called too."""
    from tqdm import tqdm

    recording = tqdm(total=recorded_workloads(config), desc="warm-up: recording", unit="workload", file=sys.stderr)
    trainings = (1 if config.episodes else 0) + config.dagger_rounds  # no first training without teacher runs
    total = config.supervised.epochs * trainings
    epochs = tqdm(total=total, desc="warm-up: training", unit="epoch", file=sys.stderr)

    def each_epoch(epoch: int, loss: float, accuracy: float) -> None:
        epochs.set_postfix(loss=f"{loss:.3f}", held_out_accuracy=f"{accuracy:.3f}")
        epochs.update()
        if on_epoch is not None:
            on_epoch(epoch, loss, accuracy)

    try:
        return warm_up(config, each_epoch, recording.update, policy, world)
    finally:
        recording.close()
        epochs.close()


def rl_with_progress(
    env: EnvConfig,
    config: RLConfig,
    pool: RolloutPool,
    start: Trained | None = None,
    on_iteration: Callable[[IterationStats], None] | None = None,
    world: World | None = None,
) -> tuple[ActorCritic, TrainingState]:
    """`fine_tune` from `start` (or from scratch) in `world` with a progress bar on stderr; `on_iteration` is
    called too."""
    from tqdm import tqdm

    scale, unit_name = report_unit(env.sim.mode.value)
    bar = tqdm(total=config.iterations, desc="RL", unit="iteration", file=sys.stderr)

    def each_iteration(stats: IterationStats) -> None:
        postfix = {"train_jct": f"{stats.train_jct_s / scale:.2f} {unit_name}"}
        if stats.validation_jct_s is not None:
            postfix["validation_jct"] = f"{stats.validation_jct_s / scale:.2f} {unit_name}"
        bar.set_postfix(postfix)
        bar.update()
        if on_iteration is not None:
            on_iteration(stats)

    try:
        policy, value = (start.policy, start.value) if start is not None else (None, None)
        return fine_tune(env, config, pool, policy, value, each_iteration, world)
    finally:
        bar.close()


def policy_config(observation: ObservationConfig, network: NetworkConfig, mode: str, placer: str) -> PolicyConfig:
    return PolicyConfig(observation=observation, network=network, mode=mode, placer=placer)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Trained:
    """A model folder in memory: its configuration, networks (the value network if it has one) and metadata."""

    config: PolicyConfig
    policy: PolicyNetwork
    value: ValueNetwork | None
    metadata: dict[str, Any]


def load_trained(folder: Path) -> Trained:
    """A model folder's networks, to continue training it (`--init`)."""
    config, metadata = load_config(folder)
    policy = PolicyNetwork(config.observation.shape, config.network)
    policy.load_state_dict(load_state(folder, config=config))
    value = None
    if (Path(folder) / "value.pt").is_file():
        value = ValueNetwork(config.observation.shape, config.network)
        value.load_state_dict(load_state(folder, "value.pt", config))
    return Trained(config, policy, value, metadata)


def save_trained(
    directory: Path,
    config: PolicyConfig,
    policy: dict[str, torch.Tensor],
    value: dict[str, torch.Tensor] | None,
    title: str,
    metadata: dict[str, Any],
    overwrite: bool,
    files: dict[str, bytes] | None = None,
) -> Path:
    """A model folder with its card (and `files`, `save_model`'s); the metadata records the commit of the code that
    trained it."""
    metadata = {"git_commit": git_commit(), **metadata}
    return save_model(directory, config, policy, value, model_card(title, metadata), metadata, overwrite, files)


def warm_up_metadata(
    config: WarmUpConfig, history: SupervisedHistory, facts: dict[str, Any], seconds: float, **extra: Any
) -> dict[str, Any]:
    """What a warm-up's model folder records (`config.json` metadata and its card)."""
    document: dict[str, Any] = to_json(
        {"kind": "warm-up", "warm_up": config, "facts": facts, "seconds": seconds, "history": history, **extra}
    )
    return document


def rl_metadata(config: RLConfig, env: EnvConfig, state: TrainingState, seconds: float, **extra: Any) -> dict[str, Any]:
    """What an RL run's model folder records (`config.json` metadata and its card)."""
    document = {
        "kind": "rl",
        "rl": config,
        "env": env,
        "best_iteration": state.best_iteration,
        "best_validation_avg_jct_s": state.best_validation_jct_s,
        "seconds": seconds,
        "history": state.history,
        **extra,
    }
    result: dict[str, Any] = to_json(document)
    return result
