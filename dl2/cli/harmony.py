"""`dl2 train-speed-model` and `dl2 train-placer`: Harmony's speed-prediction model and its learned placer."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from dl2.cli.common import UsageError, check_seed
from dl2.io import print_json
from dl2.paths import REPO_ROOT

SPEED_SOURCE = "synthetic-philly@1500"


def add_parsers(subparsers: argparse._SubParsersAction[Any]) -> None:
    speed = subparsers.add_parser(
        "train-speed-model",
        help="train Harmony's speed-prediction model on logged placements",
        description="Log realistic-mode runs (workload seeds x allocation policies x placers; the interference stays "
        "inside the simulator, the log holds placements and observed progress), train the speed model on them "
        "and measure it and a linear interference model on held-out workloads. Writes a model folder.",
    )
    speed.add_argument(
        "--source", default=SPEED_SOURCE, help="workloads to log (dl2.rl.workload_source; comma-separated for several)"
    )
    speed.add_argument("--seeds", default="100,101,102,103", help="training workload seeds (comma-separated)")
    speed.add_argument("--held-out-seeds", default="200,201", help="held-out workload seeds (never trained on)")
    speed.add_argument(
        "--schedulers", default="drf,optimus-fitted,optimus,tiresias", help="allocation policies of the logged runs"
    )
    speed.add_argument(
        "--placers",
        default="load-balance,binpack,tetris,mixed",
        help="placers of the logged runs ('mixed': random mix)",
    )
    speed.add_argument("--log", type=Path, action="append", default=[], help="also train on this decision log")
    speed.add_argument("--log-cluster", default="philly", help="workload whose cluster the --log records come from")
    speed.add_argument("--every", type=int, default=2, help="sample every n-th slot of a run")
    speed.add_argument("--epochs", type=int, default=12)
    speed.add_argument("--batch-size", type=int, default=512)
    speed.add_argument("--learning-rate", type=float, default=2e-3)
    speed.add_argument("--encoder", default="64,64", help="hidden widths of the per-server encoder")
    speed.add_argument("--head", default="128,64", help="hidden widths of the head")
    speed.add_argument("--seed", type=int, default=0)
    speed.add_argument("--out", type=Path, required=True, help="model folder to write")
    speed.add_argument("--overwrite", action="store_true", help="replace an existing folder (kept as .previous)")
    speed.set_defaults(run=run_speed)

    placer = subparsers.add_parser(
        "train-placer",
        help="train Harmony's placer by actor-critic RL against the speed model",
        description="Actor-critic RL of the placement policy in the speed model's world (or, with --world "
        "simulator, in the simulator itself: the ablation), with experience replay and job-aware exploration "
        "that mixes in load balancing and bin packing. The best policy on validation workloads is kept.",
    )
    placer.add_argument(
        "--speed-model", type=Path, default=None, help="speed-model folder (required unless --world simulator)"
    )
    placer.add_argument("--world", choices=["predicted", "simulator"], default="predicted")
    placer.add_argument("--source", default="synthetic-philly@600", help="training and validation workloads")
    placer.add_argument("--schedulers", default="drf,optimus-fitted", help="allocation policies to learn under")
    placer.add_argument("--iterations", type=int, default=40)
    placer.add_argument("--validation-seeds", default="21000,21001")
    placer.add_argument("--validate-every", type=int, default=4)
    placer.add_argument("--no-skip", action="store_true", help="always place every task the allocation asks for")
    placer.add_argument("--hidden", default="64,32", help="hidden widths of the scorer")
    placer.add_argument("--epsilon", type=float, default=0.3, help="initial exploration (annealed to 0.02)")
    placer.add_argument("--no-replay", action="store_true", help="ablation: no experience replay")
    placer.add_argument("--learning-rate", type=float, default=3e-3, help="the actor's (Adam)")
    placer.add_argument("--temperature", type=float, default=0.005, help="soft actor-critic's alpha (entropy bonus)")
    placer.add_argument("--seed", type=int, default=0)
    placer.add_argument("--out", type=Path, required=True, help="model folder to write")
    placer.add_argument("--overwrite", action="store_true", help="replace an existing folder (kept as .previous)")
    placer.set_defaults(run=run_placer)


def run_speed(args: argparse.Namespace) -> int:
    from dl2.placement.linear import LinearInterferenceModel
    from dl2.placement.predictor import PredictorTraining, train_predictor
    from dl2.placement.samples import LoggedRun, SpeedSamples, collect, samples_from_records
    from dl2.placement.speed_model import WEIGHTS, SpeedModelConfig
    from dl2.rl.model_io import write_model_dir
    from dl2.sim.decision_log import read_log

    _check_out(args)
    seeds, held_out = _ints(args.seeds, "--seeds"), _ints(args.held_out_seeds, "--held-out-seeds")
    if set(seeds) & set(held_out):
        raise UsageError("--seeds and --held-out-seeds overlap")
    schedulers, placers = _names(args.schedulers, "--schedulers"), _names(args.placers, "--placers")
    started = time.perf_counter()
    sources = _names(args.source, "--source")
    runs = [LoggedRun(w, seed, s, p) for w in sources for seed in seeds for s in schedulers for p in placers]
    test_runs = [LoggedRun(w, seed, s, p) for w in sources for seed in held_out for s in schedulers for p in placers]
    bar = tqdm(total=len(runs) + len(test_runs), desc="logging", unit="run", file=sys.stderr)
    train = collect(runs, args.every, lambda run: bar.update())
    for path in args.log:
        from dl2.workload.registry import load_workloads

        cluster = load_workloads(args.log_cluster)[0].cluster
        train = SpeedSamples.concatenate([train, samples_from_records(read_log(path), cluster, -1, "log")])
    test = collect(test_runs, args.every, lambda run: bar.update())
    bar.close()
    network = SpeedModelConfig(_widths(args.encoder, "--encoder"), _widths(args.head, "--head"))
    training = PredictorTraining(args.epochs, args.batch_size, args.learning_rate, seed=args.seed, network=network)
    bar = tqdm(total=args.epochs, desc="speed model", unit="epoch", file=sys.stderr)
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
            "sources": sources,
            "seeds": seeds,
            "held_out_seeds": held_out,
            "schedulers": schedulers,
            "placers": placers,
            "every": args.every,
            "logs": [str(p) for p in args.log],
            "train_samples": len(train),
            "held_out_samples": len(test),
            "logged_slots": train.slots + test.slots,
        },
        "linear_coefficients": linear.coefficients.tolist(),
        "training": {
            "epochs": args.epochs,
            "batch_size": args.batch_size,
            "learning_rate": args.learning_rate,
            "seed": args.seed,
        },
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
    from dataclasses import asdict

    from dl2.placement.episodes import World
    from dl2.placement.policy import WEIGHTS, PlacerConfig
    from dl2.placement.speed_model import NumpySpeedModel
    from dl2.placement.training import PlacerTrainer, PlacerTraining
    from dl2.placement.world import PredictedSpeeds
    from dl2.rl.model_io import write_model_dir
    from dl2.schedulers.registry import SCHEDULERS
    from dl2.sim.config import Mode
    from dl2.sim.run import interference_model, speed_model

    _check_out(args)
    if args.world == "predicted" and args.speed_model is None:
        raise UsageError("--world predicted needs --speed-model (a folder written by dl2 train-speed-model)")
    schedulers = _names(args.schedulers, "--schedulers")
    unknown = [name for name in schedulers if name not in SCHEDULERS]
    if unknown:
        raise UsageError(f"unknown scheduler '{unknown[0]}'; known: {', '.join(SCHEDULERS)}")
    if args.iterations < 1 or args.validate_every < 1:
        raise UsageError("--iterations and --validate-every must be at least 1")
    source = PredictedSpeeds(NumpySpeedModel.from_dir(args.speed_model)) if args.world == "predicted" else None
    world = World(speed_model(Mode.REALISTIC), interference_model(), source)
    training = PlacerTraining(
        iterations=args.iterations,
        source=args.source,
        validation_seeds=tuple(_ints(args.validation_seeds, "--validation-seeds")),
        schedulers=tuple(schedulers),
        validate_every=args.validate_every,
        epsilon_start=args.epsilon,
        learning_rate=args.learning_rate,
        temperature=args.temperature,
        replay_capacity=0 if args.no_replay else PlacerTraining().replay_capacity,
        network=PlacerConfig(_widths(args.hidden, "--hidden"), skip=not args.no_skip),
        seed=args.seed,
    )
    started = time.perf_counter()
    bar = tqdm(total=args.iterations, desc="placer", unit="iter", file=sys.stderr)
    history: list[dict[str, Any]] = []

    def on_iteration(stats: Any) -> None:
        history.append({**asdict(stats), "elapsed_s": round(time.perf_counter() - started, 1)})
        bar.update()
        if stats.validation_jct_s is not None:
            bar.set_postfix(validation_h=f"{stats.validation_jct_s / 3600:.3f}")

    result = PlacerTrainer(training, world).train(on_iteration)
    bar.close()
    seconds = time.perf_counter() - started
    metadata = {
        "training": {**asdict(training), "world": args.world, "speed_model": str(args.speed_model)},
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


def placer_card(args: argparse.Namespace, metadata: dict[str, Any]) -> str:
    best = metadata["best_validation_avg_jct_s"] / 3600
    return f"""# {args.out.name}: Harmony's placer

Written by `dl2 train-placer`; `config.json` holds the same facts as JSON. Trained in the {args.world} world on
`{args.source}` under {args.schedulers}; best validation average JCT {best:.3f} h at iteration
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
    check_seed(args.seed)
    if args.out.exists() and not args.overwrite:
        raise UsageError(f"{args.out} exists; pass --overwrite to replace it (the old one is kept as .previous)")


def _ints(text: str, flag: str) -> list[int]:
    try:
        values = [check_seed(int(part)) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"{flag} must be comma-separated integers, got '{text}'") from None
    if not values:
        raise UsageError(f"{flag} names nothing")
    return values


def _names(text: str, flag: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise UsageError(f"{flag} names nothing")
    return names


def _widths(text: str, flag: str) -> tuple[int, ...]:
    try:
        widths = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UsageError(f"{flag} must be comma-separated integers, got '{text}'") from None
    if not widths or min(widths) < 1:
        raise UsageError(f"{flag} must name at least one positive width, got '{text}'")
    return widths


def _git_commit() -> str | None:
    done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=REPO_ROOT, check=False)
    return done.stdout.strip() or None
