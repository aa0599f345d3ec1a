"""Lookahead in a world each job's own progress corrects (`dl2.rl.fitted_lookahead`) against the catalogue's world.

Per cell (a truth, an arrival density and a seed: `synthetic-philly`'s first `--jobs` jobs on its first `--nodes`
servers, as `benchmarks/lookahead.py` plays them), every scheduler places with `isolate-strict` and is played
under the truth (realistic mode, seeded like the workload):

- Optimus and `speedup-hull` reading the catalogue (the best of them is the best heuristic alone);
- Optimus alone reading the catalogue corrected per job (`dl2.workload.job_fit`): what the fit does without a
  lookahead;
- `lookahead:optimus+speedup-hull` in the catalogue's world (nothing learned from the cluster);
- the same lookahead in the catalogue's world corrected per job, which its candidates and continuations read per
  job: the learned part and its ablation, the same in every other respect;
- Optimus, and the same lookahead, reading the truth (its speeds per job, its interference): what no deployment
  has; not a ceiling.

Truths: `scaling-knee` (40% of the jobs stop gaining past one worker) and `catalogue`, the control, each at the
workload's arrivals and twice as dense (`--densities`).

    .venv/bin/python benchmarks/per_job_fit.py [--truths scaling-knee,catalogue --seeds 9100,9101,9102]

Prints a table and writes `benchmarks/results/per_job_fit.json`.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from dataclasses import replace
from typing import Any

import numpy as np
from common import environment, print_table, write_json
from truth_scenarios import philly_like

from dl2.core import Scheduler
from dl2.resolve import scheduler_builder
from dl2.rl.fitted_lookahead import FittedLookahead, job_aware_scheduler, make_fitted_lookahead
from dl2.rl.lookahead import make_lookahead
from dl2.sim.config import Mode, SimConfig
from dl2.sim.metrics import summarize
from dl2.sim.run import World, interference_model
from dl2.truth.realise import TrueCluster, realise
from dl2.truth.run import run_on
from dl2.truth.scenarios import truth_named
from dl2.workload.job_fit import JobFittedSpeedModel
from dl2.workload.speed import SpeedModel

PLACER = "isolate-strict"
LOOKAHEAD = "lookahead:optimus+speedup-hull"
HEURISTICS = ("optimus", "speedup-hull")
CATALOGUE_ROW = "lookahead, catalogue"
FITTED_ROW = "lookahead, fitted per job"
TRUTH_ROW = "lookahead reading the truth"
OPTIMUS_FITTED_ROW = "optimus, fitted per job"
OPTIMUS_TRUTH_ROW = "optimus reading the truth"


def hours(cluster: TrueCluster, build: Any, seed: int, oracle: bool = False) -> float:
    """Average JCT (h) under the truth (`dl2.truth.run.run_on`: `build` is handed the catalogue's speeds, or with
    `oracle` the truth's)."""
    return summarize(run_on(cluster, build, SimConfig.realistic(seed=seed), oracle)).avg_jct_s / 3600


def builders(cluster: TrueCluster) -> dict[str, tuple[Any, bool]]:
    """Row -> (a builder of its scheduler from the speeds it is handed, whether it is handed the truth's)."""

    def catalogue_lookahead(speed: SpeedModel, compat: bool) -> Scheduler:
        world = World(speed, interference_model())
        build = lambda name: scheduler_builder(name, PLACER, Mode.REALISTIC)(speed, compat)  # noqa: E731
        return make_lookahead(LOOKAHEAD, build, world, SimConfig.realistic())

    def fitted_lookahead(speed: SpeedModel, compat: bool) -> Scheduler:
        return make_fitted_lookahead(LOOKAHEAD, World(speed, interference_model()), SimConfig.realistic(), PLACER)

    def fitted_optimus(speed: SpeedModel, compat: bool) -> Scheduler:
        # a lookahead of one candidate never looks ahead: Optimus reading the fit, fitted every slot
        fit = JobFittedSpeedModel(speed, interference_model())
        optimus = job_aware_scheduler("optimus", fit, PLACER)
        return FittedLookahead(fit, [optimus], optimus, interference_model(), SimConfig.realistic())

    def truth_lookahead(speed: SpeedModel, compat: bool) -> Scheduler:
        # the truth's speed answers per job (`TrueSpeedModel.job_key`), so its candidates read the knees
        world = World(speed, cluster.interference)
        build = lambda name: job_aware_scheduler(name, speed, PLACER)  # type: ignore[arg-type]  # noqa: E731
        return make_lookahead(LOOKAHEAD, build, world, SimConfig.realistic())

    rows: dict[str, tuple[Any, bool]] = {
        name: (scheduler_builder(name, PLACER, Mode.REALISTIC), False) for name in HEURISTICS
    }
    rows[OPTIMUS_FITTED_ROW] = (fitted_optimus, False)
    rows[CATALOGUE_ROW] = (catalogue_lookahead, False)
    rows[FITTED_ROW] = (fitted_lookahead, False)
    rows[OPTIMUS_TRUTH_ROW] = (lambda speed, compat: job_aware_scheduler("optimus", speed, PLACER), True)
    rows[TRUTH_ROW] = (truth_lookahead, True)
    return rows


def run_cell(task: tuple[str, float, int, int, int]) -> dict[str, Any]:
    truth_name, density, seed, num_jobs, num_nodes = task
    truth = replace(truth_named(truth_name), arrival_density=density)
    cluster = realise(truth, philly_like(seed, num_jobs, num_nodes))
    row: dict[str, float] = {}
    seconds: dict[str, float] = {}
    for label, (build, oracle) in builders(cluster).items():
        started = time.perf_counter()
        row[label] = hours(cluster, build, seed, oracle)
        seconds[label] = time.perf_counter() - started
    return {
        "truth": truth_name, "density": density, "seed": seed, "knee_jobs": len(cluster.knee_of),
        "avg_jct_h": row, "seconds": seconds,
    }  # fmt: skip


def best_heuristic(row: dict[str, float]) -> tuple[str, float]:
    name = min(HEURISTICS, key=row.__getitem__)
    return name, row[name]


def summarise(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Per truth and density, the mean over seeds of the fitted world against the catalogue's world (and the rest)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for cell in cells:
        groups.setdefault(f"{cell['truth']} x{cell['density']:g}", []).append(cell)
    summary = {}
    for key, group in groups.items():
        fitted_vs_catalogue = [c["avg_jct_h"][FITTED_ROW] / c["avg_jct_h"][CATALOGUE_ROW] - 1 for c in group]
        fitted_vs_best = [c["avg_jct_h"][FITTED_ROW] / best_heuristic(c["avg_jct_h"])[1] - 1 for c in group]
        truth_vs_catalogue = [c["avg_jct_h"][TRUTH_ROW] / c["avg_jct_h"][CATALOGUE_ROW] - 1 for c in group]
        summary[key] = {
            "seeds": [c["seed"] for c in group],
            "fitted_vs_catalogue_world": {"mean": float(np.mean(fitted_vs_catalogue)), "per_seed": fitted_vs_catalogue},
            "fitted_vs_best_heuristic": {"mean": float(np.mean(fitted_vs_best)), "per_seed": fitted_vs_best},
            "truth_vs_catalogue_world": {"mean": float(np.mean(truth_vs_catalogue)), "per_seed": truth_vs_catalogue},
        }
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--truths", default="scaling-knee,catalogue", help="scenarios, comma-separated")
    parser.add_argument("--densities", default="1,2", help="arrival densities, comma-separated (1: the workload's)")
    parser.add_argument("--seeds", default="9100,9101,9102", help="workload and simulation seeds")
    parser.add_argument("--jobs", type=int, default=150, help="first N jobs of each workload")
    parser.add_argument("--nodes", type=int, default=12, help="first N servers of the cluster")
    parser.add_argument("--processes", type=int, default=2, help="cells run in parallel")
    parser.add_argument("--out", default="per_job_fit.json", help="file name under benchmarks/results/")
    args = parser.parse_args()
    tasks = [
        (truth, float(density), int(seed), args.jobs, args.nodes)
        for truth in args.truths.split(",")
        for density in args.densities.split(",")
        for seed in args.seeds.split(",")
    ]
    with multiprocessing.get_context("fork").Pool(args.processes) as pool:
        cells = pool.map(run_cell, tasks, chunksize=1)
    rows = []
    for cell in cells:
        row = cell["avg_jct_h"]
        name, best = best_heuristic(row)
        rows.append([
            cell["truth"], f"{cell['density']:g}x", str(cell["seed"]), f"{best:.3f} ({name})",
            f"{row[OPTIMUS_FITTED_ROW]:.3f}", f"{row[CATALOGUE_ROW]:.3f}", f"{row[FITTED_ROW]:.3f}",
            f"{row[FITTED_ROW] / row[CATALOGUE_ROW] - 1:+.1%}", f"{row[FITTED_ROW] / best - 1:+.1%}",
            f"{row[OPTIMUS_TRUTH_ROW]:.3f}", f"{row[TRUTH_ROW]:.3f}",
        ])  # fmt: skip
    print_table(
        f"average JCT (h) under the truth, synthetic-philly's first {args.jobs} jobs on {args.nodes} servers, "
        f"every scheduler placing with {PLACER}",
        ["truth", "arrivals", "seed", "best heuristic", OPTIMUS_FITTED_ROW, CATALOGUE_ROW, FITTED_ROW,
         "fitted vs catalogue world", "fitted vs best heuristic", OPTIMUS_TRUTH_ROW, TRUTH_ROW],
        rows,
    )  # fmt: skip
    summary = summarise(cells)
    for key, entry in summary.items():
        print(
            f"{key}: fitted world vs catalogue world {entry['fitted_vs_catalogue_world']['mean']:+.1%} "
            f"(vs best heuristic {entry['fitted_vs_best_heuristic']['mean']:+.1%}; "
            f"truth vs catalogue world {entry['truth_vs_catalogue_world']['mean']:+.1%})"
        )
    path = write_json(args.out, {"arguments": vars(args), "environment": environment(), "cells": cells,
                                 "summary": summary})  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
