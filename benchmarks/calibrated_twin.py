"""Fine-tuning the champion in a cluster's calibrated twin: does it pay on a cluster unlike the catalogue?

Per truth (`dl2.truth`; `catalogue` is the no-shift control) and seed, on Philly-like workloads as in
`benchmarks/truth_scenarios.py` (`synthetic-philly`, the first `--jobs` jobs on the first `--nodes` servers):

1. the cluster's previous week (the workload of seed + 500 under the truth) runs with DRF deciding, as a
   shadow-mode controller records it; its decision log is written as `dl2 serve` writes one;
2. candidates learn in the twin that log calibrates (`dl2.sim.calibrated`), on that cluster's own jobs
   (`records:LOG`), as `--candidates` says:
   - `rl`: the champion `models/dl2-philly` fine-tuned by RL (`--iterations` x `--episodes`, DL2's credit),
     validated there: `dl2 train-rl --calibrate-from LOG --source records:LOG`;
   - `rewarm`: the champion re-warmed by imitation (DAgger) of the heuristic that does best in the twin among
     Optimus and `speedup-hull` reading the calibrated speeds: `dl2 train-sl --calibrate-from LOG --init
     models/dl2-philly --teacher <it>`;
   the twin's choice is the candidate whose JCT on `--twin-workloads` of the twin's workloads (the previous
   week's jobs, resampled) is lowest against the champion's on the same workloads, paired, among those whose 95%
   interval of the mean relative difference lies below zero; otherwise the champion;
3. this week (the workload of the seed) is played under the truth by: the champion, each candidate, the twin's
   choice, the heuristics a deployment has (DRF, Optimus and `speedup-hull` on the catalogue, `optimus-fitted`,
   and the best of Optimus and `speedup-hull` reading the calibrated speeds), and the heuristics reading the truth
   (the best of Optimus and `speedup-hull` handed the truth, which no deployment has; not a ceiling).

Also reported: the twin's prediction (each candidate's validation in the twin against the champion's) next to the
outcome under the truth.

    .venv/bin/python benchmarks/calibrated_twin.py [--truths speed-shift,catalogue --seeds 9100 --iterations 10]

Prints a table and writes `benchmarks/results/calibrated_twin.json`.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from common import environment, print_table, write_json
from truth_scenarios import CHAMPION, SPEED_HEURISTICS, TRUTH_HEURISTICS_ROW, philly_like, previous_week

from dl2.core.log_format import CLUSTER_FILE, cluster_to_json
from dl2.env.config import EnvConfig
from dl2.resolve import scheduler_builder
from dl2.rl import in_twin
from dl2.rl.config import RLConfig, TwinLearningConfig
from dl2.rl.in_twin import learn_in_twin, paired_difference
from dl2.rl.training import fine_tune, load_trained, policy_config, save_trained
from dl2.rl.workers import make_pool
from dl2.schedulers.registry import make_scheduler
from dl2.sim.calibrated import calibrated_world
from dl2.sim.config import Mode, SimConfig
from dl2.sim.decision_log import write_segment
from dl2.sim.metrics import summarize
from dl2.sim.run import SchedulerBuilder, World
from dl2.sim.simulator import simulate
from dl2.truth import realise, truth_named
from dl2.truth.run import run_on
from dl2.workload.calibration import Calibration

BASELINES = ("drf", "optimus", "speedup-hull", "optimus-fitted")
TWIN_SEED = 1_000
"""The first of the twin's workloads (`records:LOG` draws), as the RL candidate validates on."""


def previous_week_log(truth: str, seed: int, num_jobs: int, num_nodes: int, folder: Path) -> Path:
    """The decision log of the cluster's previous week (`truth_scenarios.previous_week`), as `dl2 serve` writes
    one."""
    workload, records = previous_week(truth, seed, num_jobs, num_nodes)
    log = folder / f"{truth}-{seed}"
    write_segment(log, records, 0)
    (log / CLUSTER_FILE).write_text(json.dumps(cluster_to_json(workload.cluster)))
    return log


def fine_tune_in_twin(
    log: Path, world: World, calibration: Calibration, args: argparse.Namespace, out: Path, origin: str = CHAMPION
) -> dict[str, Any]:
    """RL from the policy at `origin` (the champion) in `world` (the twin `log` calibrates); the best-validated
    policy saved at `out`."""
    start = load_trained(Path(origin))
    source = f"records:{log}"
    env = EnvConfig(
        observation=start.config.observation,
        placer=start.config.placer,
        sim=SimConfig.realistic(),
        reward="jct",
        max_slots=args.episode_slots,
    )
    config = RLConfig(
        iterations=args.iterations,
        episodes_per_iteration=args.episodes,
        train_source=source,
        validation_source=source,
        validation_seeds=tuple(range(TWIN_SEED, TWIN_SEED + args.validation_episodes)),
        validate_every=args.validate_every,
        validation_max_slots=args.episode_slots,
        network=start.config.network,
        learning_rate=args.learning_rate,
        value_warmup_iterations=args.value_warmup,
        seed=0,
    )
    torch.manual_seed(0)
    pool = make_pool("local", args.workers)
    started = time.perf_counter()
    try:
        trainer, state = fine_tune(env, config, pool, start.policy, start.value, world=world)
    finally:
        pool.close()
    folder = policy_config(env.observation, config.network, "realistic", env.placer)
    description = f"{Path(origin).name} fine-tuned in a calibrated twin"
    save_trained(out, folder, state.best_policy, state.best_value, description, {"calibrated_from": str(log)},
                 overwrite=True)  # fmt: skip
    return {
        "seconds": time.perf_counter() - started,
        "best_iteration": state.best_iteration,
        "twin_validation_h": state.best_validation_jct_s / 3600,
        "twin_champion_validation_h": trainer.initial_validation_jct_s / 3600,  # before any update
        "types_kept": len(calibration.types),
        "interference_scale": calibration.interference_scale,
    }


def twin_jct_h(log: Path, world: World, build: SchedulerBuilder, speed_read: Any, index: int) -> float:
    """Average JCT (h) on the twin's workload `index` (from 0) of `build`'s scheduler handed `speed_read`."""
    return in_twin.twin_jct_h(log, world, build(speed_read, False), TWIN_SEED + index)


def twin_jcts_h(log: Path, world: World, build: SchedulerBuilder, speed_read: Any, workloads: int) -> list[float]:
    """Average JCT (h) on each of the twin's first `workloads` workloads of `build`'s scheduler handed
    `speed_read`."""
    return [twin_jct_h(log, world, build, speed_read, index) for index in range(workloads)]


def rewarm_in_twin(
    log: Path, world: World, calibration: Calibration, args: argparse.Namespace, out: Path, origin: str = CHAMPION
) -> dict[str, Any]:
    """The policy at `origin` (the champion) re-warmed in the twin on the heuristic that does best there reading
    the calibrated speeds (`dl2.rl.in_twin.learn_in_twin`, as the `online` stage does it)."""
    config = TwinLearningConfig(
        workloads=args.twin_workloads,
        episodes=args.rewarm_episodes,
        dagger_rounds=args.rewarm_dagger_rounds,
        epochs=args.rewarm_epochs,
        seed=TWIN_SEED,
    )
    placers = getattr(args, "twin_placers", None)  # this benchmark has no flag: the library's default
    if placers is not None:
        config = replace(config, placers=tuple(name for name in placers.split(",") if name))
    lookahead = getattr(args, "twin_lookahead", "")  # nor this one
    config = replace(config, lookahead=tuple(name for name in lookahead.split(",") if name))
    title = f"{Path(origin).name} re-warmed in a calibrated twin"
    return learn_in_twin(log, load_trained(Path(origin)), config, args.workers, out, title).record()


def heuristic(name: str) -> SchedulerBuilder:
    return lambda speed, compat: make_scheduler(name, speed, compat)


def play(
    truth: str,
    seed: int,
    num_jobs: int,
    num_nodes: int,
    scheduler: str,
    oracle: bool = False,
    placer: str | None = None,
) -> float:
    """Average JCT (h) of `scheduler` (placing with `placer`; None: its own default) under the truth; `oracle`:
    handed the truth's speeds and the jobs' true types (`dl2.truth.run.run_on`)."""
    cluster = realise(truth_named(truth), philly_like(seed, num_jobs, num_nodes))
    build = scheduler_builder(scheduler, placer, Mode.REALISTIC)
    result = run_on(cluster, build, SimConfig.realistic(seed=seed), oracle)
    return summarize(result).avg_jct_s / 3600


def play_calibrated(truth: str, seed: int, num_jobs: int, num_nodes: int, name: str, world: World) -> float:
    """A heuristic reading the calibrated speeds, played under the truth."""
    cluster = realise(truth_named(truth), philly_like(seed, num_jobs, num_nodes))
    config = cluster.config(SimConfig.realistic(seed=seed))
    result = simulate(cluster.workload, make_scheduler(name, world.speed, False), config, cluster.speed,
                      cluster.interference)  # fmt: skip
    return summarize(result).avg_jct_s / 3600


CANDIDATES = {"rl": "fine-tuned by RL in the twin", "rewarm": "re-warmed in the twin"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--truths", default="speed-shift,new-types,catalogue", help="scenarios, comma-separated")
    parser.add_argument("--seeds", default="9100", help="workload and simulation seeds")
    parser.add_argument("--jobs", type=int, default=150, help="first N jobs of each week")
    parser.add_argument("--nodes", type=int, default=12, help="first N servers of the cluster")
    parser.add_argument("--iterations", type=int, default=10, help="RL iterations in the twin")
    parser.add_argument("--episodes", type=int, default=2, help="training episodes per iteration")
    parser.add_argument("--validation-episodes", type=int, default=2, help="twin workloads validated on")
    parser.add_argument("--validate-every", type=int, default=2)
    parser.add_argument("--episode-slots", type=int, default=3_000)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--value-warmup", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2, help="rollout processes")
    parser.add_argument("--candidates", default="rl,rewarm", help="what learns in the twin: rl, rewarm")
    parser.add_argument("--twin-workloads", type=int, default=8, help="the twin's workloads each policy is run on")
    parser.add_argument("--rewarm-episodes", type=int, default=6, help="rewarm: workloads the teacher is recorded on")
    parser.add_argument("--rewarm-dagger-rounds", type=int, default=1)
    parser.add_argument("--rewarm-epochs", type=int, default=6)
    parser.add_argument("--out", default="calibrated_twin.json", help="file name under benchmarks/results/")
    args = parser.parse_args()
    seeds = [int(seed) for seed in args.seeds.split(",")]
    results: dict[str, Any] = {"environment": environment(), "arguments": vars(args), "cells": []}
    table, predictions = [], []
    with tempfile.TemporaryDirectory(prefix="dl2-twin-") as scratch:
        folder = Path(scratch)
        for truth in args.truths.split(","):
            for seed in seeds:
                log = previous_week_log(truth, seed, args.jobs, args.nodes, folder)
                world, calibration = calibrated_world(log)  # once: each candidate learns in the same twin
                champion_build = scheduler_builder(CHAMPION, None, Mode.REALISTIC)
                in_twin = {
                    "champion dl2-philly": twin_jcts_h(log, world, champion_build, world.speed, args.twin_workloads)
                }
                learned: dict[str, Any] = {}
                played: dict[str, str] = {"champion dl2-philly": CHAMPION}
                for candidate in args.candidates.split(","):
                    label, out = CANDIDATES[candidate], folder / f"{candidate}-{truth}-{seed}"
                    learn = fine_tune_in_twin if candidate == "rl" else rewarm_in_twin
                    learned[candidate] = learn(log, world, calibration, args, out)
                    in_twin[label] = twin_jcts_h(log, world, scheduler_builder(str(out), None, Mode.REALISTIC),
                                                 world.speed, args.twin_workloads)  # fmt: skip
                    played[label] = str(out)
                predicted = {
                    label: paired_difference(hours, in_twin["champion dl2-philly"])
                    for label, hours in in_twin.items()
                    if label != "champion dl2-philly"
                }
                better = [label for label, difference in predicted.items() if difference["high"] < 0]
                choice = min(better, key=lambda label: predicted[label]["mean"], default="champion dl2-philly")
                rows = {label: play(truth, seed, args.jobs, args.nodes, model) for label, model in played.items()}
                rows["the twin's choice"] = rows[choice]
                rows |= {name: play(truth, seed, args.jobs, args.nodes, name) for name in BASELINES}
                rows["best heuristic on the calibrated speeds"] = min(
                    play_calibrated(truth, seed, args.jobs, args.nodes, name, world) for name in SPEED_HEURISTICS
                )
                rows[TRUTH_HEURISTICS_ROW] = min(
                    play(truth, seed, args.jobs, args.nodes, name, True) for name in SPEED_HEURISTICS
                )
                learned |= {"twin_validation_h": in_twin, "twin_prediction": predicted, "twin_choice": choice}
                for label, difference in predicted.items():
                    outcome = rows[label] / rows["champion dl2-philly"] - 1
                    predictions.append([truth, str(seed), label, f"{difference['mean']:+.1%}",
                                        f"[{difference['low']:+.1%}, {difference['high']:+.1%}]",
                                        f"{outcome:+.1%}"])  # fmt: skip
                champion = rows["champion dl2-philly"]
                cell = {"truth": truth, "seed": seed, "learning": learned, "avg_jct_h": rows}
                results["cells"].append(cell)
                for label, hours in rows.items():
                    table.append([truth, str(seed), label, f"{hours:.3f}", f"{hours / champion - 1:+.1%}",
                                  f"{hours / rows[TRUTH_HEURISTICS_ROW] - 1:+.1%}"])  # fmt: skip
                print(f"{truth} seed {seed}: {json.dumps(learned)}", flush=True)
                print(json.dumps({"truth": truth, "seed": seed, "avg_jct_h": rows}), flush=True)
                write_json(args.out, results)  # each cell as it ends: a long run keeps what it measured
    print_table(
        f"average JCT (h) under the truth, synthetic-philly's first {args.jobs} jobs on {args.nodes} servers",
        ["truth", "seed", "scheduler", "avg JCT (h)", "vs champion", f"vs {TRUTH_HEURISTICS_ROW}"],
        table,
    )
    print_table(
        f"the twin's prediction ({args.twin_workloads} paired workloads) against the outcome under the truth",
        ["truth", "seed", "candidate", "twin: vs champion", "95% interval", "truth: vs champion"],
        predictions,
    )
    print(f"wrote {write_json(args.out, results)}")


if __name__ == "__main__":
    main()
