"""Harmony refit from a cluster's records: does refitting its speed model and retraining its placer pay on a cluster
unlike the catalogue?

Per truth (`dl2.truth`; `catalogue` is the no-shift control) and seed, on the cells of
`benchmarks/loop_scenarios.py` (`synthetic-philly`'s first `--jobs` jobs on its first `--nodes` servers):

1. the cluster's week (the workload of seed + 500 under the truth) runs with the champion `models/dl2-philly`
   active, explored as the loop explores (`--explore`), and its first seven days of decision records are the log;
2. `dl2.placement.refit.refit_harmony`: Harmony's speed model (`models/harmony-speed-philly`) is fine-tuned on the
   log's earlier slots and compared with the deployed one on its later slots; the placer
   (`models/harmony-placer-philly`) is retrained in the kept model's world on the log's jobs, under Optimus and
   `speedup-hull` reading the speeds the log calibrates;
3. this week (the workload of the seed) is played under the truth by Optimus and `speedup-hull` reading the
   catalogue, placing with `isolate-strict` (the heuristic placement the twin most often chooses), the deployed
   Harmony placer, the retrained one (the best on validation: the deployed one unless an iteration beat it) and
   the deployed placer after the retraining's first RL iteration (what the RL does to it, before validation
   chooses); each with the share of the asked-for tasks the placer left unplaced.

    .venv/bin/python benchmarks/harmony_refit.py [--truths interference-2x,catalogue --seeds 9100]

Prints the tables and writes `benchmarks/results/harmony_refit.json`.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import environment, print_table, write_json
from loop_scenarios import week_records
from truth_scenarios import CHAMPION, philly_like

from dl2.core.log_format import CLUSTER_FILE, cluster_to_json
from dl2.placement.policy import HarmonyPlacer
from dl2.placement.refit import HarmonyRefitConfig, placer_trainer, refit_harmony
from dl2.schedulers.exploring import ExplorationScope
from dl2.schedulers.placement import Placer
from dl2.schedulers.registry import PLACERS, make_scheduler
from dl2.schedulers.tally import TallyingPlacer
from dl2.sim.calibrated import calibrated_world
from dl2.sim.config import SimConfig
from dl2.sim.decision_log import write_segment
from dl2.sim.metrics import summarize
from dl2.truth import realise, truth_named
from dl2.truth.run import run_on

ROOT = Path(__file__).resolve().parent.parent
DEPLOYED_SPEED = ROOT / "models" / "harmony-speed-philly"
DEPLOYED_PLACER = ROOT / "models" / "harmony-placer-philly"
ALLOCATIONS = ("optimus", "speedup-hull")
ISOLATED = "isolate-strict"


def played(truth: str, seed: int, args: argparse.Namespace, allocation: str, placer: Placer) -> tuple[float, float]:
    """Average JCT (h) of `allocation` (reading the catalogue) placing with `placer` under the truth, and the share
    of the tasks it asked for that the placer left unplaced."""
    cluster = realise(truth_named(truth), philly_like(seed, args.jobs, args.nodes))
    tally = TallyingPlacer(placer)
    result = run_on(cluster, lambda speed, compat: make_scheduler(allocation, speed, compat, tally),
                    SimConfig.realistic(seed=seed))  # fmt: skip
    tally.close()
    return summarize(result).avg_jct_s / 3600, tally.share_left


def run_cell(truth: str, seed: int, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    scope = ExplorationScope(args.explore, 0.5) if args.explore > 0 else None
    records, cluster = week_records(truth, seed, 0, CHAMPION, args.jobs, args.nodes, 0.0, scope)
    log = folder / f"{truth}-{seed}"
    log.mkdir(parents=True)
    (log / CLUSTER_FILE).write_text(json.dumps(cluster_to_json(cluster.workload.cluster)))
    write_segment(log, records, 0)
    world, _ = calibrated_world(log)
    config = HarmonyRefitConfig()
    refit = refit_harmony(log, DEPLOYED_SPEED, DEPLOYED_PLACER, folder / f"harmony-{truth}-{seed}", world.speed)
    # what the retraining's first RL iteration makes of the deployed placer, before validation chooses
    trainer = placer_trainer(log, DEPLOYED_PLACER, refit.speed.model.numpy_model(), world.speed, config)
    trainer.iteration(0)
    placements: dict[str, Callable[[], Placer]] = {
        ISOLATED: PLACERS[ISOLATED],
        "harmony (deployed)": lambda: HarmonyPlacer.from_dir(DEPLOYED_PLACER),
        "harmony (refit, kept)": lambda: HarmonyPlacer.from_dir(refit.placer_dir),
        "harmony (one RL iteration)": lambda: trainer.placer(greedy=True),
    }
    rows: dict[str, float] = {}
    left: dict[str, float] = {}
    for name in ALLOCATIONS:
        for label, make in placements.items():
            rows[f"{name}, {label}"], left[f"{name}, {label}"] = played(truth, seed, args, name, make())
    cell = {"truth": truth, "seed": seed, "records": len(records), "refit": refit.record(), "avg_jct_h": rows,
            "share_left_unplaced": left}  # fmt: skip
    print(json.dumps(cell), flush=True)
    return cell


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--truths", default="interference-2x,catalogue", help="scenarios or seed-N, comma-separated")
    parser.add_argument("--seeds", default="9100", help="workload and simulation seeds")
    parser.add_argument("--jobs", type=int, default=150, help="first N jobs of each week")
    parser.add_argument("--nodes", type=int, default=12, help="first N servers of the cluster")
    parser.add_argument("--explore", type=float, default=0.2, help="canary exploration while the week is logged")
    parser.add_argument("--out", default="harmony_refit.json", help="file name under benchmarks/results/")
    args = parser.parse_args()
    cells = []
    with tempfile.TemporaryDirectory(prefix="dl2-harmony-refit-") as scratch:
        for truth in args.truths.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                cells.append(run_cell(truth, seed, args, Path(scratch)))
                write_json(args.out, {"arguments": vars(args), "environment": environment(), "cells": cells})
    report(cells)


def report(cells: list[dict[str, Any]]) -> None:
    print_table(
        "Harmony's speed model refit to the records (mean relative error on held-out slots) and its placer retrained",
        ["truth", "seed", "samples (train / held out)", "speed error: deployed", "refit", "kept",
         "placer validation (h): before", "after"],
        [[c["truth"], str(c["seed"]), f"{c['refit']['speed_train_samples']} / {c['refit']['speed_held_out_samples']}",
          f"{c['refit']['speed_error_deployed']:.1%}", f"{c['refit']['speed_error_refit']:.1%}",
          c["refit"]["speed_model_kept"], f"{c['refit']['placer_untrained_validation_h']:.3f}",
          f"{c['refit']['placer_validation_h']:.3f}"] for c in cells],
    )  # fmt: skip
    rows = list(cells[0]["avg_jct_h"])
    print_table(
        "Harmony's speed model refit to the records (mean relative error on held-out slots) and its placer retrained",
        ["truth", "seed", *rows],
        [[c["truth"], str(c["seed"]), *(f"{c['avg_jct_h'][r]:.3f}" for r in rows)] for c in cells],
    )


if __name__ == "__main__":
    main()
