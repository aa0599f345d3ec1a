"""`dl2 train-sl` (supervised warm-up, DL2 §4.2) and `dl2 train-rl` (online actor-critic RL, DL2 §4.3).

Their settings are the library's configurations (`dl2.rl.config.WARMUP_KEYS`, `RL_KEYS`, `dl2.env.config.ENV_KEYS`):
every flag's default, description and check come from the one definition params.yaml's sections read too.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from dl2.cli.common import UsageError, check_range
from dl2.config import Keys
from dl2.core.limits import MAX_PROCESSES
from dl2.env.config import ENV_KEYS
from dl2.rl.config import RL_KEYS, WARMUP_KEYS
from dl2.rl.model_io import PolicyConfig

MODE_KEYS = Keys(PolicyConfig, {"mode": "mode"})
"""`--mode` of train-rl: the simulator mode the policy is trained for (the warm-up has its own, `WARMUP_KEYS`)."""
BACKENDS = ("local", "ray")


def add_parsers(subparsers: argparse._SubParsersAction[Any]) -> None:
    sl = subparsers.add_parser(
        "train-sl",
        help="warm up a DL2 policy by imitating a heuristic",
        description="Record a teacher's decisions in the simulator and train the policy network to imitate them "
        "(cross-entropy), with DAgger rounds. Writes a model folder: weights, config.json, MODEL_CARD.md, "
        "learning curve.",
    )
    WARMUP_KEYS.add_arguments(sl)
    sl.add_argument(
        "--init",
        type=Path,
        default=None,
        help="model folder to start from (its window and network are kept); with --episodes 0 it learns from "
        "DAgger rounds only: it drives, the teacher labels",
    )
    _add_calibrate_from(sl, "record the teacher (reading the calibrated speeds) and the DAgger rounds")
    _add_output(sl)
    sl.set_defaults(run=run_sl)

    rl = subparsers.add_parser(
        "train-rl",
        help="improve a DL2 policy with actor-critic RL",
        description="Online RL in the simulator (REINFORCE with a value baseline, entropy bonus, job-aware "
        "exploration and experience replay, or exact credit in compatibility mode), from a warmed-up model "
        "(--init) or from scratch. The checkpoint with the best average JCT on the validation workloads is kept "
        "(--keep last: the policy after the last iteration, e.g. for ablations).",
    )
    rl.add_argument("--init", type=Path, default=None, help="model folder to start from (e.g. a train-sl output)")
    MODE_KEYS.add_arguments(rl, fill=("mode",))
    RL_KEYS.add_arguments(rl)
    ENV_KEYS.add_arguments(rl)
    rl.add_argument("--workers", type=int, default=2, help="rollout worker processes (0: in this process)")
    rl.add_argument("--backend", choices=BACKENDS, default="local", help="where rollout workers run")
    rl.add_argument(
        "--ray-address",
        default=None,
        help="--backend ray: an existing Ray cluster (e.g. ray://head:10001, or 'auto'); default: a local instance",
    )
    _add_calibrate_from(rl, "train and validate")
    rl.add_argument(
        "--keep",
        choices=["best", "last"],
        default="best",
        help="save the best-validated checkpoint (the starting policy competes) or the policy after training",
    )
    _add_output(rl)
    rl.set_defaults(run=run_rl)


def _add_calibrate_from(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--calibrate-from",
        type=Path,
        default=None,
        metavar="LOG",
        help=f"realistic mode: {what} in the twin a cluster's decision log calibrates (its speeds and "
        "interference, `dl2.sim.calibrated`); --source records:LOG uses that cluster's own jobs",
    )


def calibrated(log: Path | None, mode: str) -> tuple[Any, dict[str, Any]]:
    """(the world `log` calibrates, what a model folder records of it); (None, {}) without a log."""
    if log is None:
        return None, {}
    if mode != "realistic":
        raise UsageError("--calibrate-from calibrates the realistic mode's speeds: add --mode realistic")
    from dl2.sim.calibrated import calibrated_world, calibration_summary

    world, calibration = calibrated_world(log)
    return world, {"calibrated_from": str(log), "calibration": calibration_summary(calibration)}


def _add_output(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, help="model folder to write")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing folder (kept as .previous)")


def _check_out(args: argparse.Namespace) -> None:
    if args.out.exists() and not args.overwrite:
        raise UsageError(f"{args.out} exists; pass --overwrite to replace it (the old one is kept as .previous)")


# -- train-sl --------------------------------------------------------------------------------------------------


def warm_up_config(args: argparse.Namespace) -> Any:
    """The warm-up's configuration from the flags; with --init, the model's window and network."""
    from dl2.rl.model_io import load_config

    config = WARMUP_KEYS.build_from_args(args)
    if args.init is None:
        if config.episodes == 0:
            raise UsageError("--episodes 0 needs --init (a model to continue with DAgger rounds)")
        return config
    loaded, _ = load_config(args.init)
    if loaded.mode != config.mode:
        raise UsageError(f"{args.init} is a {loaded.mode}-mode model; this warm-up is in {config.mode} mode")
    if config.episodes == 0 and config.dagger_rounds * config.dagger_episodes == 0:
        raise UsageError("--episodes 0 needs at least one DAgger round with at least one workload")
    supervised = replace(config.supervised, network=loaded.network)
    return replace(config, observation=loaded.observation, supervised=supervised)


def run_sl(args: argparse.Namespace) -> int:
    _check_out(args)
    config = warm_up_config(args)
    from dl2.rl.plots import plot_warm_up
    from dl2.rl.training import load_trained, policy_config, save_trained, warm_up_metadata, warm_up_with_progress

    world, calibration = calibrated(args.calibrate_from, config.mode)
    policy = load_trained(args.init).policy if args.init is not None else None
    where = "a calibrated twin" if world is not None else f"{config.mode} mode"
    print(f"recording {config.teacher} on {config.episodes} workloads of {config.source} ({where})...",
          file=sys.stderr)  # fmt: skip
    started = time.perf_counter()
    policy, history, facts = warm_up_with_progress(config, policy, world=world)
    seconds = time.perf_counter() - started
    init = None if args.init is None else str(args.init)
    metadata = warm_up_metadata(config, history, facts, seconds, init=init, **calibration)
    network = config.supervised.network
    policy_cfg = policy_config(config.observation, network, config.mode, config.placer)
    title = f"DL2 policy warmed up on {config.teacher}"
    save_trained(args.out, policy_cfg, policy.state_dict(), None, title, metadata, args.overwrite)
    plot_warm_up(history, args.out / "learning_curve.png", f"warm-up: imitating {config.teacher} ({config.source})")
    print(json.dumps({"model": str(args.out), **facts, "seconds": round(seconds, 1)}))
    return 0


# -- train-rl --------------------------------------------------------------------------------------------------


def rl_configs(args: argparse.Namespace, loaded: PolicyConfig | None) -> tuple[Any, Any]:
    """(EnvConfig, RLConfig) from the flags; a model to continue brings its window, packing and network."""
    from dl2.env.config import EnvConfig
    from dl2.rl.config import check_training
    from dl2.rl.model_io import continuing
    from dl2.sim.config import SimConfig

    mode = args.mode
    base = EnvConfig(sim=SimConfig.for_mode(mode))
    env = ENV_KEYS.build(ENV_KEYS.from_args(args), base=base, spelling=lambda key: key.flag)
    rl = RL_KEYS.build(RL_KEYS.from_args(args), spelling=lambda key: key.flag)
    if loaded is not None:
        env, rl = continuing(loaded, env, rl, str(args.init))
    if env.observation.packed and mode != "compat":
        raise UsageError("--packed is a compat-mode option (realistic mode places by --placer)")
    check_training(mode, rl, key="--credit")
    check_range("--workers", args.workers, 0, MAX_PROCESSES)
    return env, rl


def run_rl(args: argparse.Namespace) -> int:
    _check_out(args)
    from dl2.rl.model_io import load_config

    loaded = load_config(args.init)[0] if args.init is not None else None
    env, config = rl_configs(args, loaded)
    import torch

    from dl2.io import write_json_atomic
    from dl2.rl.plots import plot_rl
    from dl2.rl.training import load_trained, policy_config, rl_metadata, rl_with_progress, save_trained
    from dl2.rl.workers import make_pool
    from dl2.sim.metrics import report_unit

    world, calibration = calibrated(args.calibrate_from, args.mode)
    start = load_trained(args.init) if args.init is not None else None
    torch.manual_seed(config.seed)
    started = time.perf_counter()
    pool = make_pool(args.backend, args.workers, args.ray_address)
    try:
        trainer, state = rl_with_progress(env, config, pool, start, world=world)
    finally:
        pool.close()
    seconds = time.perf_counter() - started
    inherited = start.metadata if start is not None else {}
    init = str(args.init) if args.init else None
    metadata = rl_metadata(config, env, state, seconds, initialised_from=init, initial_metadata=inherited,
                           saved=args.keep, **calibration)  # fmt: skip
    best = args.keep == "best"
    policy = state.best_policy if best else trainer.policy.state_dict()
    value = state.best_value if best else trainer.value.state_dict()
    mode = args.mode
    folder = policy_config(env.observation, config.network, mode, env.placer)
    save_trained(args.out, folder, policy, value, "DL2 policy trained with actor-critic RL", metadata, args.overwrite)
    scale, unit_name = report_unit(mode)
    plot_rl(state.history, args.out / "learning_curve.png", f"RL on {config.train_source} ({mode})", scale, unit_name)
    write_json_atomic(args.out / "history.json", metadata["history"])
    summary = {
        "model": str(args.out),
        "best_iteration": state.best_iteration,
        f"best_validation_avg_jct_{unit_name}": state.best_validation_jct_s / scale,
        "seconds": round(seconds, 1),
    }
    print(json.dumps(summary))
    return 0
