"""`dl2 train-speed-model`, `dl2 train-placer` and `dl2 refit-harmony`: Harmony's speed-prediction model and its
learned placer, trained on the catalogue's world or refit to a cluster's decision log."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from dl2.cli.common import UsageError
from dl2.io import print_json, to_json
from dl2.paths import REPO_ROOT

SPEED_SOURCE = "synthetic-philly@1500"
DEPLOYED_SPEED = REPO_ROOT / "models" / "harmony-speed-philly"
DEPLOYED_PLACER = REPO_ROOT / "models" / "harmony-placer-philly"


def add_parsers(subparsers: argparse._SubParsersAction[Any]) -> None:
    from dl2.placement.config import PLACER_KEYS, SPEED_KEYS

    speed = subparsers.add_parser(
        "train-speed-model",
        help="train Harmony's speed-prediction model on logged placements",
        description="Log realistic-mode runs (workload seeds x allocation policies x placers; the interference stays "
        "inside the simulator, the log holds placements and observed progress), train the speed model on them "
        "and measure it and a linear interference model on held-out workloads. Writes a model folder. Settings: "
        "dl2.placement.config.SpeedModelRun.",
    )
    SPEED_KEYS.add_arguments(speed)
    speed.add_argument("--log", type=Path, action="append", default=[], help="also train on this decision log")
    speed.add_argument("--log-cluster", default="philly", help="workload whose cluster the --log records come from")
    speed.add_argument("--out", type=Path, required=True, help="model folder to write")
    speed.add_argument("--overwrite", action="store_true", help="replace an existing folder (kept as .previous)")
    speed.set_defaults(run=run_speed)

    placer = subparsers.add_parser(
        "train-placer",
        help="train Harmony's placer by actor-critic RL against the speed model",
        description="Actor-critic RL of the placement policy in the speed model's world (or, with --world "
        "simulator, in the simulator itself: the ablation), with experience replay and job-aware exploration "
        "that mixes in load balancing and bin packing. The best policy on validation workloads is kept. Settings: "
        "dl2.placement.config.PlacerTraining.",
    )
    placer.add_argument(
        "--speed-model", type=Path, default=None, help="speed-model folder (required unless --world simulator)"
    )
    placer.add_argument("--world", choices=["predicted", "simulator"], default="predicted")
    PLACER_KEYS.add_arguments(placer)
    placer.add_argument("--out", type=Path, required=True, help="model folder to write")
    placer.add_argument("--overwrite", action="store_true", help="replace an existing folder (kept as .previous)")
    placer.set_defaults(run=run_placer)

    refit = subparsers.add_parser(
        "refit-harmony",
        help="refit Harmony's speed model to a cluster's decision log and retrain its placer against it",
        description="Fine-tune the speed model on the steady samples of a decision log (the last slots held out: "
        "the deployed and refit models' errors there decide which is kept), then retrain the placer from the "
        "deployed one in the kept model's world on the log's own jobs, under Optimus and speedup-hull reading the "
        "speeds the log calibrates; the best placer on validation is kept (the deployed one if no iteration beats "
        "it). Writes OUT/speed-model and OUT/placer. Settings: dl2.placement.refit.HarmonyRefitConfig.",
    )
    refit.add_argument("--log", type=Path, required=True, help="decision log: a folder of segments, cluster.json")
    refit.add_argument("--speed-model", type=Path, default=DEPLOYED_SPEED, help="the deployed speed-model folder")
    refit.add_argument("--placer", type=Path, default=DEPLOYED_PLACER, help="the deployed placer folder")
    refit.add_argument("--epochs", type=int, default=None, help="speed model: passes over the log's samples")
    refit.add_argument("--iterations", type=int, default=None, help="placer: RL episodes in the refit world")
    refit.add_argument("--validation-seeds", default=None, help="placer: validation workloads, comma-separated")
    refit.add_argument("--seed", type=int, default=0, help="seeds both trainings")
    refit.add_argument("--out", type=Path, required=True, help="folder to write speed-model/ and placer/ under")
    refit.add_argument("--overwrite", action="store_true", help="replace an existing folder")
    refit.set_defaults(run=run_refit)


def run_speed(args: argparse.Namespace) -> int:
    from dl2.core.log_format import read_log
    from dl2.nn.state_io import write_model_dir
    from dl2.placement.config import SPEED_KEYS, SpeedModelRun
    from dl2.placement.linear import LinearInterferenceModel
    from dl2.placement.predictor import train_predictor
    from dl2.placement.samples import LoggedRun, SpeedSamples, collect, samples_from_records
    from dl2.placement.speed_model import WEIGHTS

    run_config: SpeedModelRun = _build(SPEED_KEYS, args)
    data, training = run_config.data, run_config.training
    _check_out(args)
    started = time.perf_counter()
    runs = [
        LoggedRun(w, s, a, p) for w in data.sources for s in data.seeds for a in data.schedulers for p in data.placers
    ]
    test_runs = [
        LoggedRun(w, s, a, p)
        for w in data.sources
        for s in data.held_out_seeds
        for a in data.schedulers
        for p in data.placers
    ]
    bar = tqdm(total=len(runs) + len(test_runs), desc="logging", unit="run", file=sys.stderr)
    train = collect(runs, data.every, lambda run: bar.update())
    for path in args.log:
        from dl2.workload.registry import load_workloads

        cluster = load_workloads(args.log_cluster)[0].cluster
        train = SpeedSamples.concatenate([train, samples_from_records(read_log(path, cluster), cluster, -1, "log")])
    test = collect(test_runs, data.every, lambda run: bar.update())
    bar.close()
    bar = tqdm(total=training.epochs, desc="speed model", unit="epoch", file=sys.stderr)
    result = train_predictor(train, training, lambda epoch, loss: bar.update())
    bar.close()
    linear = LinearInterferenceModel.fit(train.encoded, train.log_throughput)
    errors = error_table(
        test,
        {"network": result.numpy_model().log_throughput, "linear": linear.log_throughput},
        [run.placer for run in test_runs],
        [run.scheduler for run in test_runs],
    )
    seconds = time.perf_counter() - started
    metadata = {
        "data": {
            **to_json(data),
            "logs": [str(p) for p in args.log],
            "train_samples": len(train),
            "held_out_samples": len(test),
            "logged_slots": train.slots + test.slots,
        },
        "linear_coefficients": linear.coefficients.tolist(),
        "training": to_json(training),
        "train_loss": result.train_loss,
        "held_out_errors": errors,
        "seconds": round(seconds, 1),
        "git_commit": _git_commit(),
    }
    document = {"kind": "speed-model", **result.config.to_json_dict(), "metadata": metadata}
    card = speed_card(args, metadata)
    write_model_dir(args.out, {WEIGHTS: result.state}, document, card, overwrite=args.overwrite)
    print_json({"out": str(args.out), "held_out_mean_relative_error": errors["all"], "seconds": round(seconds, 1)})
    return 0


def error_table(
    samples: Any, models: dict[str, Callable[[Any], Any]], placers: list[str], schedulers: list[str]
) -> dict[str, Any]:
    """Mean relative error of each model (a function of encoded jobs to log throughput) on `samples`, in all,
    per placer and per allocation policy of the run a sample comes from (`placers[g]`, `schedulers[g]` for
    group g)."""
    import numpy as np

    from dl2.placement.samples import relative_errors

    errors = {name: relative_errors(model(samples.encoded), samples.log_throughput) for name, model in models.items()}

    def summary(mask: Any) -> dict[str, float]:
        return {name: float(values[mask].mean()) for name, values in errors.items()} | {"samples": int(mask.sum())}

    table: dict[str, Any] = {"all": summary(np.ones(len(samples), dtype=bool))}
    group_placer = np.array(placers)[samples.group]
    group_scheduler = np.array(schedulers)[samples.group]
    table["by_placer"] = {p: summary(group_placer == p) for p in dict.fromkeys(placers)}
    table["by_scheduler"] = {s: summary(group_scheduler == s) for s in dict.fromkeys(schedulers)}
    return table


def run_placer(args: argparse.Namespace) -> int:
    from dl2.nn.state_io import write_model_dir
    from dl2.placement.config import PLACER_KEYS, PlacerTraining
    from dl2.placement.episodes import World
    from dl2.placement.policy import WEIGHTS
    from dl2.placement.speed_model import NumpySpeedModel
    from dl2.placement.training import PlacerTrainer
    from dl2.placement.world import PredictedSpeeds
    from dl2.sim.config import Mode
    from dl2.sim.run import interference_model, speed_model

    training: PlacerTraining = _build(PLACER_KEYS, args)
    _check_out(args)
    if args.world == "predicted" and args.speed_model is None:
        raise UsageError("--world predicted needs --speed-model (a folder written by dl2 train-speed-model)")
    source = PredictedSpeeds(NumpySpeedModel.from_dir(args.speed_model)) if args.world == "predicted" else None
    world = World(speed_model(Mode.REALISTIC), interference_model(), source)
    started = time.perf_counter()
    bar = tqdm(total=training.imitation_iterations + training.iterations, desc="placer", unit="iter", file=sys.stderr)
    history: list[dict[str, Any]] = []

    def on_iteration(stats: Any) -> None:
        history.append({**to_json(stats), "elapsed_s": round(time.perf_counter() - started, 1)})
        bar.update()
        if stats.validation_jct_s is not None:
            bar.set_postfix(validation_h=f"{stats.validation_jct_s / 3600:.3f}")

    result = PlacerTrainer(training, world).train(on_iteration)
    bar.close()
    seconds = time.perf_counter() - started
    metadata = {
        "training": {**to_json(training), "world": args.world, "speed_model": str(args.speed_model)},
        "history": history,
        "best_iteration": result.best_iteration,
        "best_validation_avg_jct_s": result.best_validation_jct_s,
        "untrained_validation_runs_s": result.untrained_validation_runs_s,
        "slots": sum(entry["slots"] for entry in history),
        "seconds": round(seconds, 1),
        "git_commit": _git_commit(),
    }
    document = {"kind": "placer", **training.network.to_json_dict(), "metadata": metadata}
    weights = {WEIGHTS: result.best_policy, "critic.pt": result.best_critic}
    write_model_dir(args.out, weights, document, placer_card(args, metadata), overwrite=args.overwrite)
    print_json(
        {
            "out": str(args.out),
            "best_iteration": result.best_iteration,
            "best_validation_avg_jct_h": result.best_validation_jct_s / 3600,
            "slots": metadata["slots"],
            "seconds": round(seconds, 1),
        }
    )
    return 0


def run_refit(args: argparse.Namespace) -> int:
    import shutil
    from dataclasses import replace

    from dl2.config import ConfigError
    from dl2.core.log_format import read_cluster_log
    from dl2.placement.refit import HarmonyRefitConfig, refit_harmony
    from dl2.sim.calibrated import calibrated_world

    _check_out(args)
    try:
        config = HarmonyRefitConfig()
        speed = replace(config.speed, seed=args.seed, **({"epochs": args.epochs} if args.epochs is not None else {}))
        placer_changes: dict[str, Any] = {"seed": args.seed}
        if args.iterations is not None:
            placer_changes["iterations"] = args.iterations
        if args.validation_seeds is not None:
            placer_changes["validation_seeds"] = tuple(int(s) for s in args.validation_seeds.split(","))
        config = replace(config, speed=speed, placer=replace(config.placer, **placer_changes))
    except (ConfigError, ValueError) as error:
        raise UsageError(str(error)) from None
    read_cluster_log(args.log)  # a bad record is refused before any output or progress bar (refit reads it again)
    world, _ = calibrated_world(args.log)
    bar = tqdm(total=config.placer.iterations, desc="placer", unit="iter", file=sys.stderr)
    staging = args.out.with_name(f".{args.out.name}.refit")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        result = refit_harmony(args.log, args.speed_model, args.placer, staging, world.speed, config,
                               lambda stats: bar.update())  # fmt: skip
        bar.close()
        if args.out.exists():
            shutil.rmtree(args.out)
        staging.rename(args.out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    record = result.record()
    record["placer"], record["speed_model"] = str(args.out / "placer"), str(args.out / "speed-model")
    print_json(record)
    return 0


def placer_card(args: argparse.Namespace, metadata: dict[str, Any]) -> str:
    best = metadata["best_validation_avg_jct_s"] / 3600
    source, schedulers = metadata["training"]["source"], ", ".join(metadata["training"]["schedulers"])
    return f"""# {args.out.name}: Harmony's placer

Written by `dl2 train-placer`; `config.json` holds the same facts as JSON. Trained in the {args.world} world on
`{source}` under {schedulers}; best validation average JCT {best:.3f} h at iteration
{metadata["best_iteration"]} ({metadata["seconds"]:.0f} s, {metadata["slots"]:,} slots simulated).
"""


def speed_card(args: argparse.Namespace, metadata: dict[str, Any]) -> str:
    errors = metadata["held_out_errors"]
    rows = [f"| all | {errors['all']['network']:.1%} | {errors['all']['linear']:.1%} | {errors['all']['samples']:,} |"]
    for key in ("by_placer", "by_scheduler"):
        for name, entry in errors[key].items():
            rows.append(f"| {name} | {entry['network']:.1%} | {entry['linear']:.1%} | {entry['samples']:,} |")
    table = "\n".join(rows)
    return f"""# {args.out.name}: Harmony's speed-prediction model

Written by `dl2 train-speed-model`; `config.json` holds the same facts as JSON.

Held-out mean relative error (workload seeds {metadata["data"]["held_out_seeds"]}):

| held-out samples | network | linear interference model | samples |
|---|---|---|---|
{table}
"""


def _check_out(args: argparse.Namespace) -> None:
    if args.out.exists() and not args.overwrite:
        raise UsageError(f"{args.out} exists; pass --overwrite to replace it (the old one is kept as .previous)")


def _build(keys: Any, args: argparse.Namespace) -> Any:
    """The command's configuration from its flags; a bad value is a usage error naming the flag."""
    from dl2.config import ConfigError

    try:
        return keys.build_from_args(args)
    except ConfigError as error:
        raise UsageError(str(error)) from None


def _git_commit() -> str | None:
    done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=REPO_ROOT, check=False)
    return done.stdout.strip() or None
