"""Before promotion: a challenger evaluated off-policy from the cluster's logs and in the calibrated twin, against
what it does once promoted.

Per truth (`dl2.truth`; `catalogue` is the control) and seed, on Philly-like workloads as in
`benchmarks/loop_scenarios.py`: the cluster's previous week (the workload of seed + 500 under the truth) runs with
the champion `models/dl2-philly` in charge and canary exploration on (`dl2.schedulers.exploring`: the jobs of the
scope have their worker count moved by one with probability `--epsilon`, the propensity of each decision logged).
From that log, each challenger is compared with the champion three ways:

- off-policy, doubly robust (`dl2.rl.off_policy`): the relative difference of its mean per-slot reward (progress
  over declared epochs, summed over jobs) on the logged slots, with a 95% interval; positive is better;
- in the twin the log calibrates: its average JCT paired with the champion's on `--twin-workloads` of the twin's
  workloads, as the gate compares them; negative is better;
- the outcome: its average JCT under the truth on this week (the workload of the seed, never logged), against the
  champion's; negative is better.

The challengers are the heuristics a deployment has and `speedup-hull` reading the calibrated speeds (the loop's
re-warming teacher): challengers whose outcomes differ, in either direction, by a few to a hundred percent. Also
measured: what exploration costs the cluster (the exploring champion's average JCT on this week against the
champion's).

    .venv/bin/python benchmarks/off_policy.py [--truths speed-shift,catalogue --seeds 9100]

Prints the tables and writes `benchmarks/results/off_policy.json`.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from multiprocessing import Pool
from pathlib import Path
from typing import Any

import numpy as np
from common import environment, print_table, write_json
from truth_scenarios import CHAMPION, philly_like

from dl2.core import Scheduler
from dl2.core.log_format import CLUSTER_FILE, cluster_to_json, read_log
from dl2.placement.samples import record_run
from dl2.resolve import scheduler_builder
from dl2.rl.in_twin import paired_difference, twin_jct_h
from dl2.rl.off_policy import REWARDS, off_policy_difference
from dl2.schedulers.exploring import ExplorationScope, ExploringScheduler
from dl2.schedulers.registry import make_scheduler
from dl2.sim.calibrated import calibrated_world
from dl2.sim.config import Mode, SimConfig
from dl2.sim.decision_log import write_segment
from dl2.sim.metrics import summarize
from dl2.sim.run import World, catalogue_speed
from dl2.sim.simulator import simulate
from dl2.truth import SCENARIOS, realise, truth_named

TWIN_SEED = 1_000
CALIBRATED = "@calibrated"
"""A challenger name's suffix: the heuristic reads the speeds the log calibrates."""


def build(name: str, world: World) -> Scheduler:
    if name == "champion":
        return scheduler_builder(CHAMPION, None, Mode.REALISTIC)(catalogue_speed(), False)
    if name.endswith(CALIBRATED):
        return make_scheduler(name.removesuffix(CALIBRATED), world.speed, False)
    return make_scheduler(name, catalogue_speed(), False)


def jct_under_truth(truth: str, seed: int, args: argparse.Namespace, scheduler: Scheduler) -> float:
    cluster = realise(truth_named(truth), philly_like(seed, args.jobs, args.nodes))
    config = cluster.config(SimConfig.realistic(seed=seed))
    result = simulate(cluster.workload, scheduler, config, cluster.speed, cluster.interference)
    return summarize(result).avg_jct_s / 3600


def run_cell(task: tuple[str, int, argparse.Namespace]) -> dict[str, Any]:
    """One (truth, seed): the explored log, then each challenger's three comparisons with the champion."""
    truth, seed, args = task
    scope = ExplorationScope(args.epsilon, args.fraction)
    with tempfile.TemporaryDirectory(prefix="dl2-off-policy-") as folder:
        log = Path(folder) / f"{truth}-{seed}"
        previous = realise(truth_named(truth), philly_like(seed + 500, args.jobs, args.nodes))
        config = previous.config(SimConfig.realistic(seed=seed + 500))
        explorer = ExploringScheduler(build("champion", World.catalogue(Mode.REALISTIC)), scope, seed=seed)
        records = record_run(previous.workload, explorer, config, previous.speed, previous.interference)
        write_segment(log, records, 0)
        (log / CLUSTER_FILE).write_text(json.dumps(cluster_to_json(previous.workload.cluster)))
        world, _ = calibrated_world(log)
        records = read_log(log)  # as the lifecycle reads them back
        champion_h = jct_under_truth(truth, seed, args, build("champion", world))
        explored_h = jct_under_truth(
            truth, seed, args, ExploringScheduler(build("champion", world), scope, seed=seed + 1)
        )
        champion_twin = [
            twin_jct_h(log, world, build("champion", world), TWIN_SEED + i) for i in range(args.twin_workloads)
        ]
        challengers = {}
        for name in args.challengers.split(","):
            estimate = off_policy_difference(
                records, previous.workload.cluster, build(name, world), build("champion", world), world.speed,
                reward=args.reward,
            )  # fmt: skip
            twin = [twin_jct_h(log, world, build(name, world), TWIN_SEED + i) for i in range(args.twin_workloads)]
            outcome_h = jct_under_truth(truth, seed, args, build(name, world))
            challengers[name] = {
                "off_policy": {
                    "difference": estimate.difference,
                    "low": estimate.low,
                    "high": estimate.high,
                    "direct_difference": estimate.direct_difference,
                    "matched": estimate.matched,
                },
                "twin": paired_difference(twin, champion_twin),
                "outcome_vs_champion": outcome_h / champion_h - 1,
                "avg_jct_h": outcome_h,
            }
        cell = {
            "truth": truth,
            "seed": seed,
            "records": len(records),
            "explored_records": sum(r.applied_propensity < 1 for r in records),
            "slots": estimate.slots,
            "champion_h": champion_h,
            "exploring_champion_h": explored_h,
            "challengers": challengers,
        }
    print(f"{truth} seed {seed}: {json.dumps(cell, default=float)}", flush=True)
    return cell


def agreement(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Over every (cell, challenger) whose outcome differs from the champion's by more than 1%: how often each
    prediction's sign agrees with the outcome's, how often its interval excludes zero on the outcome's side or
    the wrong one, and the rank correlation of prediction with outcome."""
    off, twin, outcome = [], [], []
    for cell in cells:
        for entry in cell["challengers"].values():
            off.append(entry["off_policy"])
            twin.append(entry["twin"])
            outcome.append(entry["outcome_vs_champion"])
    decided = [i for i, value in enumerate(outcome) if abs(value) > 0.01]

    def summary(predictions: list[dict[str, float]], key: str, better_if_positive: bool) -> dict[str, Any]:
        """`key`: the prediction's point estimate; `better_if_positive`: its sign when the challenger is faster."""
        sign = 1.0 if better_if_positive else -1.0
        point = [sign * p[key] for p in predictions]  # positive: says the challenger is faster
        agreed = [np.sign(point[i]) == np.sign(-outcome[i]) for i in decided]
        right = wrong = 0
        for i in decided:
            low, high = sign * predictions[i]["low"], sign * predictions[i]["high"]
            if min(low, high) > 0:  # says the challenger is better
                right += outcome[i] < 0
                wrong += outcome[i] > 0
            elif max(low, high) < 0:  # says it is worse
                right += outcome[i] > 0
                wrong += outcome[i] < 0
        ranks = np.argsort(np.argsort(point)), np.argsort(np.argsort([-o for o in outcome]))
        return {
            "sign_agreed": float(np.mean(agreed)) if agreed else float("nan"),
            "interval_decided_right": int(right),
            "interval_decided_wrong": int(wrong),
            "spearman": float(np.corrcoef(*ranks)[0, 1]) if len(point) > 2 else float("nan"),
        }

    return {
        "comparisons": len(outcome),
        "outcome_beyond_1pct": len(decided),
        "off_policy": summary(off, "difference", True),
        "twin": summary(twin, "mean", False),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--truths", default=",".join(SCENARIOS), help="scenarios, comma-separated")
    parser.add_argument("--seeds", default="9100,9101,9102", help="workload and simulation seeds")
    parser.add_argument("--jobs", type=int, default=150, help="first N jobs of each week")
    parser.add_argument("--nodes", type=int, default=12, help="first N servers of the cluster")
    parser.add_argument("--epsilon", type=float, default=0.2, help="probability a job of the scope is moved")
    parser.add_argument("--fraction", type=float, default=0.5, help="share of the jobs in the exploration scope")
    parser.add_argument(
        "--challengers",
        default=f"speedup-hull,optimus,tiresias,drf,speedup-hull{CALIBRATED}",
        help=f"heuristics compared with the champion ({CALIBRATED}: reading the calibrated speeds)",
    )
    parser.add_argument("--reward", choices=REWARDS, default="progress", help="the off-policy estimate's reward")
    parser.add_argument("--twin-workloads", type=int, default=4, help="twin workloads the twin's comparison pairs")
    parser.add_argument("--workers", type=int, default=2, help="processes")
    parser.add_argument("--out", default="off_policy.json", help="file name under benchmarks/results/")
    args = parser.parse_args()
    tasks = [(truth, int(seed), args) for seed in args.seeds.split(",") for truth in args.truths.split(",")]
    with Pool(args.workers) as pool:
        cells = pool.map(run_cell, tasks, chunksize=1)
    summary = agreement(cells)
    rows = []
    for cell in cells:
        for name, entry in cell["challengers"].items():
            off, twin = entry["off_policy"], entry["twin"]
            rows.append([
                cell["truth"],
                str(cell["seed"]),
                name,
                f"{off['difference']:+.1%} [{off['low']:+.1%}, {off['high']:+.1%}]",
                f"{off['direct_difference']:+.1%}",
                f"{off['matched']:.0%}",
                f"{twin['mean']:+.1%} [{twin['low']:+.1%}, {twin['high']:+.1%}]",
                f"{entry['outcome_vs_champion']:+.1%}",
            ])  # fmt: skip
    print_table(
        "challenger against the champion: off-policy from the explored log, in the twin, and under the truth",
        ["truth", "seed", "challenger", "off-policy DR: progress", "direct method", "matched", "twin: JCT",
         "truth: JCT"],
        rows,
    )  # fmt: skip
    print_table(
        "what exploration costs: the champion with and without it, this week under the truth",
        ["truth", "seed", "champion", "exploring champion", "cost"],
        [[c["truth"], str(c["seed"]), f"{c['champion_h']:.3f} h", f"{c['exploring_champion_h']:.3f} h",
          f"{c['exploring_champion_h'] / c['champion_h'] - 1:+.1%}"] for c in cells],
    )  # fmt: skip
    print_table(
        f"predictions against outcomes ({summary['outcome_beyond_1pct']} of {summary['comparisons']} outcomes "
        "beyond 1%)",
        ["prediction", "sign agreed", "interval decided, right", "interval decided, wrong", "rank correlation"],
        [[name, f"{s['sign_agreed']:.0%}", str(s["interval_decided_right"]), str(s["interval_decided_wrong"]),
          f"{s['spearman']:+.2f}"] for name, s in (("off-policy DR", summary["off_policy"]),
                                                   ("twin", summary["twin"]))],
    )  # fmt: skip
    path = write_json(args.out, {"environment": environment(), "args": vars(args), "cells": cells,
                                 "agreement": summary})  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
