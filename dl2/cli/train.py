"""`dl2 train-sl` (supervised warm-up, DL2 §4.2) and `dl2 train-rl` (online actor-critic RL, DL2 §4.3)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

from dl2.cli.common import UsageError, check_seed, write_json_atomic


def add_parsers(subparsers: argparse._SubParsersAction[Any]) -> None:
    sl = subparsers.add_parser(
        "train-sl",
        help="warm up a DL2 policy by imitating a heuristic",
        description="Record a teacher's decisions in the simulator and train the policy network to imitate them "
        "(cross-entropy). Writes a model folder: weights, config.json, MODEL_CARD.md, learning curve.",
    )
    sl.add_argument(
        "--teacher",
        default="optimus",
        help="heuristic to imitate (drf, fifo, srtf, optimus, tiresias, srpt-knee-fill, ...), or "
        "rollout:srpt-knee-fill (per slot, the variant of it whose simulated continuation ends best)",
    )
    _add_common(sl)
    sl.add_argument("--episodes", type=int, default=12, help="workloads the teacher is recorded on")
    sl.add_argument("--record-every", type=int, default=2, help="record every n-th slot")
    sl.add_argument("--epochs", type=int, default=10, help="passes over the demonstrations")
    sl.add_argument("--learning-rate", type=float, default=1e-3)
    sl.add_argument(
        "--label-smoothing",
        type=float,
        default=0.0,
        help="share of each target spread over the possible actions (keeps the teacher's unused actions "
        "reachable for RL; 0.1 suits a warm-up that RL follows)",
    )
    sl.add_argument("--dagger-rounds", type=int, default=2, help="DAgger rounds after behaviour cloning")
    sl.add_argument("--dagger-episodes", type=int, default=4, help="workloads per DAgger round")
    sl.add_argument("--dagger-max-slots", type=int, default=3000, help="cut a DAgger workload after this many slots")
    sl.add_argument("--workers", type=int, default=2, help="processes recording workloads in parallel")
    sl.add_argument(
        "--init",
        type=Path,
        default=None,
        help="model folder to start from (its window and network are kept); with --episodes 0 it learns from "
        "DAgger rounds only: it drives, the teacher labels",
    )
    sl.set_defaults(run=run_sl)

    rl = subparsers.add_parser(
        "train-rl",
        help="improve a DL2 policy with actor-critic RL",
        description="Online RL in the simulator (REINFORCE with a value baseline, entropy bonus, job-aware "
        "exploration and experience replay), from a warmed-up model (--init) or from scratch. The checkpoint "
        "with the best average JCT on the validation workloads is kept (--keep last: the policy after the last "
        "iteration, e.g. for ablations).",
    )
    rl.add_argument("--init", type=Path, default=None, help="model folder to start from (e.g. a train-sl output)")
    _add_common(rl)
    rl.add_argument("--iterations", type=int, default=100)
    rl.add_argument("--episodes-per-iteration", type=int, default=4)
    rl.add_argument("--workers", type=int, default=2, help="rollout worker processes (0: in this process)")
    rl.add_argument("--backend", choices=["local", "ray"], default="local", help="where rollout workers run")
    rl.add_argument("--reward", choices=["jct", "progress"], default="jct", help="'progress' is DL2's reward")
    rl.add_argument("--gamma", type=float, default=0.99, help="discount per slot")
    rl.add_argument("--myopic", action="store_true", help="each slot's own reward as return (DL2's code)")
    rl.add_argument("--no-value-baseline", action="store_true", help="ablation: batch-mean baseline")
    rl.add_argument("--group-size", type=int, default=1, help="episodes per training workload per iteration")
    rl.add_argument(
        "--sibling-baseline",
        action="store_true",
        help="advantage: return-to-go minus that of the other episodes on the same workload (--group-size > 1)",
    )
    rl.add_argument(
        "--credit",
        choices=["returns", "perturbation", "deviation"],
        default="returns",
        help="advantages from slot returns (DL2) or, in compat mode, exact: one slot sampled, the rest greedy "
        "(perturbation), or single decisions replaced by other actions (deviation: policy iteration)",
    )
    rl.add_argument(
        "--perturbation-probability",
        type=float,
        default=0.05,
        help="--credit perturbation or deviation: share of slots sampled",
    )
    rl.add_argument(
        "--alternatives", type=int, default=6, help="--credit deviation: other actions tried per deviated decision"
    )
    rl.add_argument(
        "--continuation",
        default="policy",
        help="--credit deviation: who finishes each compared run: 'policy' (the greedy policy, exact policy "
        "iteration) or a compat heuristic (e.g. drf: its cost-to-go, AggreVaTe, about 20x cheaper)",
    )
    rl.add_argument(
        "--temperature",
        type=float,
        default=1.0,
        help="--credit deviation: advantage scale of the reweighting, in units of their deviation",
    )
    rl.add_argument(
        "--kl-weight", type=float, default=1.0, help="--credit deviation: weight of the KL to the current policy"
    )
    rl.add_argument("--minibatch-size", type=int, default=1024, help="decisions per policy step")
    rl.add_argument("--no-exploration", action="store_true", help="ablation: no job-aware exploration")
    rl.add_argument("--no-replay", action="store_true", help="ablation: no experience replay")
    rl.add_argument("--learning-rate", type=float, default=3e-4)
    rl.add_argument("--entropy-weight", type=float, default=0.01)
    rl.add_argument("--clip", type=float, default=0.2, help="PPO-style ratio clip (0: plain REINFORCE)")
    rl.add_argument("--epochs", type=int, default=2, help="passes over each iteration's decisions")
    rl.add_argument("--validation-source", default=None, help="validation workloads (default: --source)")
    rl.add_argument("--validation-seeds", default="5000,5001,5002,5003")
    rl.add_argument("--validate-every", type=int, default=5)
    rl.add_argument("--episode-slots", type=int, default=3000, help="cut training episodes here (bootstrapped)")
    rl.add_argument("--value-warmup", type=int, default=2, help="iterations in which only the critic learns")
    rl.add_argument("--epsilon", type=float, default=0.1, help="initial rate of job-aware exploratory actions")
    rl.add_argument(
        "--keep",
        choices=["best", "last"],
        default="best",
        help="save the best-validated checkpoint (the starting policy competes) or the policy after training",
    )
    rl.set_defaults(run=run_rl)


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", choices=["compat", "realistic"], default="compat")
    parser.add_argument(
        "--source", default="authors-small", help="training workloads (authors-small, synthetic-philly@900, ...)"
    )
    parser.add_argument("--window", type=int, default=40, help="J: jobs the policy sees at once")
    parser.add_argument("--hidden", default="64,64", help="hidden layer widths")
    parser.add_argument(
        "--network",
        choices=["per-job", "per-job-local", "mlp"],
        default="per-job",
        help="'mlp' is DL2's shape; 'per-job-local' keeps the cluster out of the job encoder (fastest inference)",
    )
    parser.add_argument("--placer", default="load-balance", help="realistic-mode placer")
    parser.add_argument(
        "--packed",
        action="store_true",
        help="compat mode: the policy decides counts against the cluster's total capacity and the slot's tasks are "
        "then asked of the authors' placement in an order it packs (their environment asks each task as decided)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True, help="model folder to write")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing folder (kept as .previous)")


def _network(args: argparse.Namespace) -> Any:
    from dl2.rl.networks import NetworkConfig

    try:
        hidden = tuple(int(h) for h in args.hidden.split(",") if h.strip())
    except ValueError:
        raise UsageError(f"--hidden must be comma-separated integers, got '{args.hidden}'") from None
    if not hidden or min(hidden) < 1:
        raise UsageError(f"--hidden must name at least one positive width, got '{args.hidden}'")
    return NetworkConfig(hidden=hidden, kind=args.network)


def _check_out(args: argparse.Namespace) -> None:
    check_seed(args.seed)
    if args.out.exists() and not args.overwrite:
        raise UsageError(f"{args.out} exists; pass --overwrite to replace it (the old one is kept as .previous)")
    if args.window < 1:
        raise UsageError("--window must be at least 1")
    if args.packed and args.mode != "compat":
        raise UsageError("--packed is a compat-mode option (realistic mode places by --placer)")


def run_sl(args: argparse.Namespace) -> int:
    _check_out(args)
    from dl2.env.observation import ObservationConfig
    from dl2.rl.model_io import load_config, load_state
    from dl2.rl.networks import PolicyNetwork
    from dl2.rl.plots import plot_warm_up
    from dl2.rl.supervised import SupervisedConfig
    from dl2.rl.training import WarmUpConfig, policy_config, recorded_workloads, save_trained, warm_up

    if args.episodes < 0 or args.dagger_rounds < 0 or args.dagger_episodes < 0:
        raise UsageError("--episodes, --dagger-rounds and --dagger-episodes must not be negative")
    if args.dagger_max_slots < 1:
        raise UsageError("--dagger-max-slots must be at least 1")
    if not 0.0 <= args.label_smoothing < 1.0:
        raise UsageError("--label-smoothing must be in [0, 1)")
    if args.episodes == 0 and (args.init is None or args.dagger_rounds * args.dagger_episodes == 0):
        raise UsageError("--episodes 0 needs --init and at least one DAgger round with at least one workload")
    network = _network(args)
    observation = ObservationConfig(window=args.window, packed=args.packed)
    policy = None
    if args.init is not None:
        loaded, _ = load_config(args.init)
        if loaded.mode != args.mode:
            raise UsageError(f"{args.init} is a {loaded.mode}-mode model; this warm-up is in {args.mode} mode")
        observation, network = loaded.observation, loaded.network
        policy = PolicyNetwork(observation.shape, network)
        policy.load_state_dict(load_state(args.init))
    config = WarmUpConfig(
        teacher=args.teacher,
        source=args.source,
        mode=args.mode,
        episodes=args.episodes,
        record_every=args.record_every,
        dagger_rounds=args.dagger_rounds,
        dagger_episodes=args.dagger_episodes,
        dagger_max_slots=args.dagger_max_slots,
        observation=observation,
        placer=args.placer,
        workers=args.workers,
        supervised=SupervisedConfig(
            epochs=args.epochs,
            learning_rate=args.learning_rate,
            network=network,
            seed=args.seed,
            label_smoothing=args.label_smoothing,
        ),
    )
    started = time.perf_counter()
    print(
        f"recording {args.teacher} on {args.episodes} workloads of {args.source} ({args.mode} mode)...", file=sys.stderr
    )
    recording = tqdm(total=recorded_workloads(config), desc="recording", unit="workload", file=sys.stderr)
    trainings = (1 if args.episodes else 0) + args.dagger_rounds  # no first training without teacher runs
    bar = tqdm(total=args.epochs * trainings, desc="warm-up", unit="epoch", file=sys.stderr)

    def on_epoch(epoch: int, loss: float, accuracy: float) -> None:
        bar.set_postfix(loss=f"{loss:.3f}", held_out_accuracy=f"{accuracy:.3f}")
        bar.update()

    policy, history, facts = warm_up(config, on_epoch, recording.update, policy)
    recording.close()
    bar.close()
    seconds = time.perf_counter() - started
    metadata = {
        "kind": "warm-up",
        "init": None if args.init is None else str(args.init),
        "warm_up": _jsonable(config),
        "facts": facts,
        "seconds": seconds,
        "history": _jsonable(history),
    }
    card = _card(f"DL2 policy warmed up on {args.teacher}", metadata)
    save_trained(
        args.out,
        policy_config(config.observation, network, args.mode, args.placer),
        policy.state_dict(),
        None,
        card,
        metadata,
        args.overwrite,
    )
    plot_warm_up(history, args.out / "learning_curve.png", f"warm-up: imitating {args.teacher} ({args.source})")
    print(json.dumps({"model": str(args.out), **facts, "seconds": round(seconds, 1)}))
    return 0


def run_rl(args: argparse.Namespace) -> int:
    _check_out(args)
    import torch

    from dl2.env.env import EnvConfig
    from dl2.env.observation import ObservationConfig
    from dl2.rl.actor_critic import ReplayConfig, RLConfig
    from dl2.rl.exploration import ExplorationConfig
    from dl2.rl.model_io import load_config, load_state
    from dl2.rl.networks import PolicyNetwork, ValueNetwork
    from dl2.rl.plots import plot_rl
    from dl2.rl.training import fine_tune, policy_config, save_trained, sim_config
    from dl2.rl.workers import make_pool
    from dl2.schedulers.registry import COMPAT_SCHEDULERS

    policy = value = None
    observation = ObservationConfig(window=args.window, packed=args.packed)
    network = _network(args)
    inherited: dict[str, Any] = {}
    if args.init is not None:
        loaded, inherited = load_config(args.init)
        observation, network = loaded.observation, loaded.network
        policy = PolicyNetwork(observation.shape, network)
        policy.load_state_dict(load_state(args.init))
        if (args.init / "value.pt").is_file():
            value = ValueNetwork(observation.shape, network)
            value.load_state_dict(load_state(args.init, "value.pt"))
    if args.credit in ("perturbation", "deviation") and args.mode != "compat":
        raise UsageError(f"--credit {args.credit} needs --mode compat (a deterministic simulator)")
    if args.continuation != "policy" and args.continuation not in COMPAT_SCHEDULERS:
        raise UsageError(f"--continuation must be 'policy' or one of: {', '.join(COMPAT_SCHEDULERS)}")
    if args.alternatives < 1 or args.minibatch_size < 1:
        raise UsageError("--alternatives and --minibatch-size must be at least 1")
    if not (args.temperature > 0 and args.kl_weight >= 0):
        raise UsageError("--temperature must be positive and --kl-weight not negative")
    if not 0.0 < args.perturbation_probability <= 1.0:
        raise UsageError("--perturbation-probability must be in (0, 1]")
    if args.sibling_baseline and args.group_size < 2:
        raise UsageError("--sibling-baseline needs --group-size of at least 2 (episodes to compare on a workload)")
    if args.group_size < 1 or args.episodes_per_iteration % args.group_size:
        raise UsageError("--episodes-per-iteration must be a positive multiple of --group-size")
    try:
        seeds = tuple(check_seed(int(s)) for s in args.validation_seeds.split(",") if s.strip())
    except ValueError:
        raise UsageError(f"--validation-seeds must be integers, got '{args.validation_seeds}'") from None
    env = EnvConfig(
        observation=observation,
        sim=sim_config(args.mode),
        placer=args.placer,
        reward=args.reward,
        max_slots=args.episode_slots,
    )
    config = RLConfig(
        iterations=args.iterations,
        episodes_per_iteration=args.episodes_per_iteration,
        train_source=args.source,
        validation_source=args.validation_source or args.source,
        validation_seeds=seeds,
        validate_every=args.validate_every,
        learning_rate=args.learning_rate,
        entropy_weight=args.entropy_weight,
        gamma=args.gamma,
        myopic=args.myopic,
        value_baseline=not args.no_value_baseline,
        group_size=args.group_size,
        sibling_baseline=args.sibling_baseline,
        exploration=ExplorationConfig(enabled=not args.no_exploration, epsilon_start=args.epsilon),
        value_warmup_iterations=args.value_warmup,
        replay=ReplayConfig(enabled=not args.no_replay),
        clip=args.clip or None,
        epochs_per_iteration=args.epochs,
        network=network,
        seed=args.seed,
        credit=args.credit,
        perturbation_probability=args.perturbation_probability,
        alternatives=args.alternatives,
        continuation=args.continuation,
        temperature=args.temperature,
        kl_weight=args.kl_weight,
        minibatch_size=args.minibatch_size,
    )
    torch.manual_seed(args.seed)
    started = time.perf_counter()
    pool = make_pool(args.backend, args.workers)
    bar = tqdm(total=args.iterations, desc="RL", unit="iter", file=sys.stderr)
    unit_s = 1200.0 if args.mode == "compat" else 3600.0
    unit = "slots" if args.mode == "compat" else "h"

    def on_iteration(stats: Any) -> None:
        postfix = {"train_jct": f"{stats.train_jct_s / unit_s:.2f}"}
        if stats.validation_jct_s is not None:
            postfix["validation_jct"] = f"{stats.validation_jct_s / unit_s:.2f}"
        bar.set_postfix(postfix)
        bar.update()

    try:
        trainer, state = fine_tune(env, config, pool, policy, value, on_iteration)
    finally:
        bar.close()
        pool.close()
    seconds = time.perf_counter() - started
    metadata = {
        "kind": "rl",
        "initialised_from": str(args.init) if args.init else None,
        "initial_metadata": inherited,
        "rl": _jsonable(replace(config, network=network)),
        "env": _jsonable(env),
        "best_iteration": state.best_iteration,
        "best_validation_avg_jct_s": state.best_validation_jct_s,
        "saved": args.keep,
        "seconds": seconds,
        "history": [_jsonable(s) for s in state.history],
    }
    card = _card("DL2 policy trained with actor-critic RL", metadata)
    save_trained(
        args.out,
        policy_config(observation, network, args.mode, args.placer),
        state.best_policy if args.keep == "best" else trainer.policy.state_dict(),
        state.best_value if args.keep == "best" else trainer.value.state_dict(),
        card,
        metadata,
        args.overwrite,
    )
    plot_rl(state.history, args.out / "learning_curve.png", f"RL on {args.source} ({args.mode})", unit_s, unit)
    write_json_atomic(args.out / "history.json", metadata["history"])
    print(
        json.dumps(
            {
                "model": str(args.out),
                "best_iteration": state.best_iteration,
                f"best_validation_avg_jct_{unit}": state.best_validation_jct_s / unit_s,
                "seconds": round(seconds, 1),
            }
        )
    )
    return 0


def _jsonable(value: Any) -> Any:
    from dataclasses import asdict, is_dataclass

    if is_dataclass(value) and not isinstance(value, type):
        return _jsonable(asdict(value))
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float | int | str | bool) or value is None:
        return value
    return str(value)


def _card(title: str, metadata: dict[str, Any]) -> str:
    summary = {k: v for k, v in metadata.items() if k not in ("history", "initial_metadata")}
    facts = json.dumps(summary, indent=2, default=str)
    return f"# {title}\n\nWritten by `dl2`; `config.json` holds the same facts as JSON.\n\n```json\n{facts}\n```\n"
