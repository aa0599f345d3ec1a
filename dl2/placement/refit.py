"""Harmony refit from a cluster's decision records: its speed model fitted to what the cluster showed, its placer
retrained against that model.

Harmony's two learned parts are trained on the catalogue's world (`dl2 train-speed-model`, `dl2 train-placer`).
A cluster whose interference or speeds differ makes both wrong in the same way. The records of the cluster's
controller hold what is needed to fix the first (placements, who shared which server, observed progress:
`dl2.placement.samples.samples_from_records`), and the first is all the second needs (Harmony §4 trains the
placer in the speed model's world, not on the cluster). So:

1. the speed model starts from the deployed one and is fitted to the records' steady samples (warm start: a week
   of one cluster's records covers far fewer placements than the catalogue's runs); the last
   `held_out_fraction` of the log's slots is held out, and the deployed and refit models' errors on it are
   reported (the refit is kept only if it is the better of the two on them);
2. the placer starts from the deployed one and is retrained by `PlacerTrainer` in the world of the kept speed
   model, on the cluster's own jobs (`records:<log>`), under the allocation policies it will place for.

Both folders are written as the `dl2` commands write theirs, so `dl2 simulate --placer`, `dl2 extender` and the
benchmarks take the retrained placer as they take the shipped one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from dl2.config import Probability, config
from dl2.core import ClusterSpec, DecisionRecord, InputError
from dl2.core.log_format import read_cluster_log
from dl2.nn.state_io import load_weights, write_model_dir
from dl2.placement.config import PlacerConfig, PlacerTraining, PredictorTraining
from dl2.placement.episodes import World
from dl2.placement.model_files import read_config
from dl2.placement.policy import WEIGHTS as PLACER_WEIGHTS
from dl2.placement.predictor import PredictorResult, train_predictor
from dl2.placement.samples import SpeedSamples, relative_errors, samples_from_records
from dl2.placement.speed_model import WEIGHTS as SPEED_WEIGHTS
from dl2.placement.speed_model import NumpySpeedModel
from dl2.placement.training import PlacerTrainer
from dl2.placement.world import PredictedSpeeds
from dl2.workload.speed import SpeedModel

CRITIC_WEIGHTS = "critic.pt"


@config
class HarmonyRefitConfig:
    """How Harmony's speed model and placer are refit to a cluster's records."""

    speed: PredictorTraining = field(
        default_factory=lambda: PredictorTraining(epochs=30, batch_size=128, learning_rate=1e-3)
    )
    """The speed model's fine-tuning (its widths are the deployed model's). A week of a 12-server cluster holds a
    few thousand steady samples: small batches and many passes (docs/results.md, "Harmony refit")."""
    held_out_fraction: Probability = 0.25
    """The last part of the log's slots, held out to compare the deployed and refit speed models."""
    placer: PlacerTraining = field(
        default_factory=lambda: PlacerTraining(
            iterations=24,
            source="",
            validation_seeds=(2_000, 2_001),
            schedulers=("optimus", "speedup-hull"),
            validate_every=4,
            epsilon_start=0.2,
            explorers=("load-balance", "binpack", "isolate-strict"),
        )
    )
    """The placer's retraining; its `source` is set to the log's jobs (`records:<log>`), its widths are the
    deployed placer's. The allocation policies are the teachers the twin chooses among (`dl2.rl.in_twin`)."""


@dataclass(frozen=True)
class SpeedRefit:
    """The speed model fitted to a log: the kept model, and the deployed and refit models' mean relative errors
    on the held-out slots."""

    model: PredictorResult
    kept: str
    """'refit' or 'deployed': the one with the lower held-out error."""
    error_deployed: float
    error_refit: float
    train_samples: int
    held_out_samples: int


@dataclass(frozen=True)
class HarmonyRefit:
    """What a refit wrote and measured."""

    speed: SpeedRefit
    placer_dir: Path
    speed_dir: Path
    best_validation_h: float
    untrained_validation_h: float
    seconds: float
    best_iteration: int = -1
    """The retraining's iteration kept (-1: none beat the deployed placer, which `placer_dir` then holds)."""

    def record(self) -> dict[str, Any]:
        """As stage reports and model metadata hold it."""
        return {
            "placer": str(self.placer_dir),
            "speed_model": str(self.speed_dir),
            "speed_model_kept": self.speed.kept,
            "speed_error_deployed": self.speed.error_deployed,
            "speed_error_refit": self.speed.error_refit,
            "speed_train_samples": self.speed.train_samples,
            "speed_held_out_samples": self.speed.held_out_samples,
            "placer_validation_h": self.best_validation_h,
            "placer_untrained_validation_h": self.untrained_validation_h,
            "placer_best_iteration": self.best_iteration,
            "seconds": self.seconds,
        }


def split_by_time(samples: SpeedSamples, held_out_fraction: float) -> tuple[SpeedSamples, SpeedSamples]:
    """The samples of the earlier slots and of the last `held_out_fraction` of them (`samples_from_records` keeps
    slot order): the held-out part is what the cluster did after what the model learned from."""
    rows = np.arange(len(samples))
    cut = len(samples) - round(len(samples) * held_out_fraction)
    return samples.subset(rows[:cut]), samples.subset(rows[cut:])


def load_speed_model(directory: Path) -> PredictorResult:
    """A speed-model folder as a training result (its weights and configuration), to start a refit from."""
    model = NumpySpeedModel.from_dir(directory)
    return PredictorResult(dict(load_weights(directory / SPEED_WEIGHTS)), model.config, [])


def mean_error(model: PredictorResult, samples: SpeedSamples) -> float:
    """Mean relative error of `model`'s throughput on `samples`."""
    if not len(samples):
        return float("nan")
    predicted = model.numpy_model().log_throughput(samples.encoded)
    return float(relative_errors(predicted, samples.log_throughput).mean())


def refit_speed_model(
    records: list[DecisionRecord], cluster: ClusterSpec, deployed: PredictorResult, config: HarmonyRefitConfig
) -> SpeedRefit:
    """Fine-tune `deployed` on the records' earlier slots; keep whichever of the two errs less on the later ones."""
    samples = samples_from_records(records, cluster, placer="log")
    if len(samples) < 2:
        raise InputError("records", f"{len(samples)} steady samples: too few to refit the speed model from")
    train, held_out = split_by_time(samples, config.held_out_fraction)
    training = replace(config.speed, network=deployed.config)
    refit = train_predictor(train, training, initial=deployed)
    error_deployed, error_refit = mean_error(deployed, held_out), mean_error(refit, held_out)
    better = not error_refit > error_deployed  # NaN (nothing held out): the refit
    return SpeedRefit(
        refit if better else deployed,
        "refit" if better else "deployed",
        error_deployed,
        error_refit,
        len(train),
        len(held_out),
    )


def refit_harmony(
    log: Path,
    deployed_speed: Path,
    deployed_placer: Path,
    out: Path,
    world_speed: SpeedModel,
    config: HarmonyRefitConfig | None = None,
    on_iteration: Callable[[Any], None] | None = None,
) -> HarmonyRefit:
    """Refit Harmony to the decision log `log`: writes `out/speed-model` and `out/placer` (a Harmony placer
    folder). `world_speed` is what the allocation policies read while the placer trains (the calibrated twin's
    speeds, `dl2.sim.calibrated`, as a deployment reads them)."""
    config = config or HarmonyRefitConfig()
    started = time.perf_counter()
    records, cluster = read_cluster_log(log)  # a record of another cluster, or off its nodes, is bad input
    speed = refit_speed_model(records, cluster, load_speed_model(deployed_speed), config)
    speed_dir, placer_dir = out / "speed-model", out / "placer"
    speed_document = {"kind": "speed-model", **speed.model.config.to_json_dict(), "metadata": {
        "refit_from": str(log), "deployed": str(deployed_speed), "kept": speed.kept,
        "held_out_error_deployed": speed.error_deployed, "held_out_error_refit": speed.error_refit,
        "train_samples": speed.train_samples, "held_out_samples": speed.held_out_samples,
    }}  # fmt: skip
    write_model_dir(
        speed_dir, {SPEED_WEIGHTS: speed.model.state}, speed_document, speed_card(log, speed), overwrite=True
    )

    trainer = placer_trainer(log, deployed_placer, speed.model.numpy_model(), world_speed, config)
    result = trainer.train(on_iteration)
    seconds = time.perf_counter() - started
    untrained_h = float(np.mean(result.untrained_validation_runs_s)) / 3600
    best_h = result.best_validation_jct_s / 3600
    placer_document = {"kind": "placer", **trainer.training.network.to_json_dict(), "metadata": {
        "refit_from": str(log), "deployed": str(deployed_placer), "speed_model": str(speed_dir),
        "best_iteration": result.best_iteration, "best_validation_avg_jct_s": result.best_validation_jct_s,
        "untrained_validation_runs_s": result.untrained_validation_runs_s, "seconds": round(seconds, 1),
    }}  # fmt: skip
    weights = {PLACER_WEIGHTS: result.best_policy, CRITIC_WEIGHTS: result.best_critic}
    card = placer_card(log, deployed_placer, result.best_iteration, untrained_h, best_h)
    write_model_dir(placer_dir, weights, placer_document, card, overwrite=True)
    return HarmonyRefit(speed, placer_dir, speed_dir, best_h, untrained_h, seconds, result.best_iteration)


def placer_trainer(
    log: Path, deployed_placer: Path, speed: NumpySpeedModel, world_speed: SpeedModel, config: HarmonyRefitConfig
) -> PlacerTrainer:
    """The deployed placer's trainer in `speed`'s world, on the log's jobs (`records:<log>`)."""
    placer_config = PlacerConfig.from_json_dict(read_config(deployed_placer, "placer"), str(deployed_placer))
    training = replace(config.placer, source=f"records:{log}", network=placer_config)
    critic = deployed_placer / CRITIC_WEIGHTS
    initial = (load_weights(deployed_placer / PLACER_WEIGHTS), load_weights(critic) if critic.is_file() else None)
    return PlacerTrainer(training, World(world_speed, None, PredictedSpeeds(speed)), initial)


def speed_card(log: Path, speed: SpeedRefit) -> str:
    return f"""# Harmony's speed model, refit to a cluster's records

Fitted to the steady samples of `{log}` ({speed.train_samples:,} samples), starting from the deployed model. On the
last slots of the log ({speed.held_out_samples:,} samples, held out): mean relative error {speed.error_deployed:.1%}
for the deployed model, {speed.error_refit:.1%} refit; kept: the {speed.kept} one.
"""


def placer_card(log: Path, deployed: Path, best_iteration: int, untrained_h: float, best_h: float) -> str:
    return f"""# Harmony's placer, retrained against a refit speed model

Started from `{deployed}`; retrained in the world of the speed model refit to `{log}` (`../speed-model`), on that
cluster's jobs. Validation average JCT in that world: {untrained_h:.3f} h before, {best_h:.3f} h kept (iteration
{best_iteration}; -1 is the deployed placer unchanged).
"""
