"""Glue shared by the training stages (warm-up, feedback, fine-tune, ablate): the library's configurations as the
pipeline sets them, model folders in and out, a learned policy as a scheduler builder.

Model folders are written and read by the same library functions as `dl2 train-sl` / `dl2 train-rl`
(`dl2.rl.training`), so a model from the pipeline and one from the command line read the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from pipelines.params import Params
from pipelines.stage import remove

VARIANTS: Mapping[str, dict[str, bool]] = {
    "full": {},
    "no-exploration": {"exploration": False},
    "no-replay": {"replay": False},
    "no-value-baseline": {"value_baseline": False},
}
"""RL components switched off per ablation variant (DL2 §6.5)."""


def continued(params: Params, policy_config: Any, where: str) -> tuple[Any, Any]:
    """(EnvConfig, RLConfig) of the fine-tune stage continuing a model (`dl2.rl.model_io.continuing`): the stage's
    reward, episode length and RL settings, the simulator preset of the pipeline's mode, and the model's window,
    packing, placer and network."""
    from dl2.rl.model_io import continuing
    from dl2.sim.config import SimConfig

    env = replace(params.finetune.env, sim=SimConfig.for_mode(params.workloads.mode))
    return continuing(policy_config, env, params.finetune.rl, where)


def finetune_config(params: Params, network: Any) -> Any:
    """RLConfig of the fine-tune stage (the network of the model it continues)."""
    return replace(params.finetune.rl, network=network)


def ablation_config(params: Params, network: Any, seed: int, variant: str) -> Any:
    """RLConfig of one ablation cell: DL2's own credit with `variant`'s component switched off, at the ablation's
    budget (`ablate.iterations`, `episodes_per_iteration`, `value_warmup`, `epochs`, `samples_per_iteration`),
    without validation (the cell's final policy is what is tested)."""
    a, rl = params.ablate, finetune_config(params, network)
    switches = VARIANTS[variant]
    return replace(
        rl,
        credit="returns",
        iterations=a.iterations,
        episodes_per_iteration=a.episodes_per_iteration,
        value_warmup_iterations=a.value_warmup,
        epochs_per_iteration=a.epochs,
        max_samples_per_iteration=a.samples_per_iteration,
        validate=False,
        seed=seed,
        value_baseline=switches.get("value_baseline", True),
        exploration=replace(rl.exploration, enabled=switches.get("exploration", True)),
        replay=replace(rl.replay, enabled=switches.get("replay", True)),
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
    save_trained(folder, policy_config, policy, value, title, metadata, overwrite=False)


def learned_builder(policy_config: Any, state: dict[str, Any], name: str) -> Any:
    """A scheduler builder (for `run_grid`) of a policy held in memory, greedy."""
    from dl2.rl.inference import NumpyPolicy
    from dl2.rl.learned import LearnedScheduler

    policy = NumpyPolicy.from_state_dict(state, policy_config.observation.shape, policy_config.network)
    return lambda speed, compat: LearnedScheduler(policy_config, policy, greedy=True, name=name, compat=compat)
