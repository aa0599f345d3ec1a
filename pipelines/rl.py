"""Glue shared by the training stages (warm-up, feedback, fine-tune, ablate): configs from params, model folders
in and out, a learned policy as a scheduler builder.

The model-folder metadata and card are those of `dl2 train-sl` / `dl2 train-rl` (`dl2.cli.train`), so a model
from the pipeline and one from the CLI read the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from dl2.cli.train import _card as model_card
from dl2.cli.train import _jsonable as jsonable  # noqa: F401
from pipelines.params import Params
from pipelines.stage import remove

VARIANTS: Mapping[str, dict[str, bool]] = {
    "full": {},
    "no-exploration": {"exploration": False},
    "no-replay": {"replay": False},
    "no-value-baseline": {"value_baseline": False},
}
"""RL components switched off per ablation variant (DL2 §6.5)."""


def network_config(params: Params) -> Any:
    from dl2.rl.networks import NetworkConfig

    return NetworkConfig(hidden=params.warmup.hidden, kind=params.warmup.network)


def load_networks(folder: Path) -> tuple[Any, Any, Any | None, dict[str, Any]]:
    """(PolicyConfig, policy network, value network or None, metadata) of a model folder (as `dl2 train-rl
    --init`)."""
    from dl2.rl.model_io import load_config, load_state
    from dl2.rl.networks import PolicyNetwork, ValueNetwork

    config, metadata = load_config(folder)
    policy = PolicyNetwork(config.observation.shape, config.network)
    policy.load_state_dict(load_state(folder))
    value = None
    if (folder / "value.pt").is_file():
        value = ValueNetwork(config.observation.shape, config.network)
        value.load_state_dict(load_state(folder, "value.pt"))
    return config, policy, value, metadata


def env_config(params: Params, policy_config: Any) -> Any:
    from dl2.env.env import EnvConfig
    from dl2.rl.training import sim_config

    return EnvConfig(
        observation=policy_config.observation,
        sim=sim_config(params.workloads.mode),
        placer=policy_config.placer,
        reward=params.finetune.reward,
        max_slots=params.finetune.max_slots,
    )


def rl_config(
    params: Params,
    network: Any,
    iterations: int,
    seed: int,
    variant: str = "full",
    episodes: int | None = None,
    value_warmup: int | None = None,
) -> Any:
    """RLConfig of the fine-tune stage (an ablation variant switches components off; `episodes` per iteration
    and `value_warmup` default to fine-tuning's)."""
    from dl2.rl.actor_critic import ReplayConfig, RLConfig
    from dl2.rl.exploration import ExplorationConfig

    f, w = params.finetune, params.workloads
    switches = VARIANTS[variant]
    config = RLConfig(
        iterations=iterations,
        episodes_per_iteration=episodes or f.episodes_per_iteration,
        train_source=w.train_source,
        validation_source=w.train_source,
        validation_seeds=w.validation_seeds,
        validate_every=f.validate_every,
        validation_max_slots=f.validation_max_slots,
        learning_rate=f.learning_rate,
        entropy_weight=f.entropy_weight,
        gamma=f.gamma,
        clip=f.clip or None,
        epochs_per_iteration=f.epochs,
        value_warmup_iterations=f.value_warmup if value_warmup is None else value_warmup,
        network=network,
        seed=seed,
    )
    return replace(
        config,
        value_baseline=switches.get("value_baseline", True),
        exploration=ExplorationConfig(enabled=switches.get("exploration", True)),
        replay=ReplayConfig(enabled=switches.get("replay", True)),
    )


def finetune_config(params: Params, network: Any) -> Any:
    """RLConfig of the fine-tune stage: `rl_config` with the credit chosen in params (ablations keep DL2's)."""
    f = params.finetune
    return replace(
        rl_config(params, network, f.iterations, f.seed),
        credit=f.credit,
        perturbation_probability=f.perturbation_probability,
        alternatives=f.alternatives,
        continuation=f.continuation,
        temperature=f.temperature,
        kl_weight=f.kl_weight,
        minibatch_size=f.minibatch_size,
    )


def rl_seeds(config: Any) -> range:
    """Workload seeds RL trains on."""
    return range(config.train_seed_offset, config.train_seed_offset + config.iterations * config.episodes_per_iteration)


def save(
    folder: Path, policy_config: Any, policy: Any, value: Any | None, title: str, metadata: dict[str, Any]
) -> None:
    """Write a model folder in place of the old one (no `.previous`: the old one is in DVC's cache and MLflow)."""
    from dl2.rl.training import save_trained

    remove(folder)
    save_trained(folder, policy_config, policy, value, model_card(title, metadata), metadata, overwrite=False)


def learned_builder(policy_config: Any, state: dict[str, Any], name: str) -> Any:
    """A scheduler builder (for `run_grid`) of a policy held in memory, greedy."""
    from dl2.rl.inference import NumpyPolicy
    from dl2.rl.learned import LearnedScheduler

    policy = NumpyPolicy.from_state_dict(state, policy_config.observation.shape, policy_config.network)
    return lambda speed, compat: LearnedScheduler(policy_config, policy, greedy=True, name=name, compat=compat)


def unit(mode: str) -> tuple[float, str]:
    """Reporting unit of JCTs: slots of 1200 s in compat mode, hours in realistic mode (as the CLI)."""
    return (1200.0, "slots") if mode == "compat" else (3600.0, "h")
