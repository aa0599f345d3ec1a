"""Harmony's placer against load balancing, Tetris, bin packing and isolation, with the allocation policy held fixed.

Realistic mode with interference, in the true simulator; every (allocation policy, placer) pair runs on the same
workloads and seeds: the Philly week (`philly`, seeds 0-4 draw the job-to-model mapping and the noise) or
full-size synthetic workloads with its statistics (`synthetic-philly`, seeds 9000-9004). Neither was used to
train or select the speed model or the placer (they saw `synthetic-philly@600` and `@1500` at other seeds).
Reported per allocation policy: mean average JCT with a 95% confidence interval over the seeds (Student t),
the mean as a multiple of the lower bound (`benchmarks/lower_bound.py`, per seed), Harmony's JCT relative to
each heuristic's (paired by seed), and the share of the tasks the allocation policy asked for that each placer
left unplaced (`dl2.schedulers.tally`; only 0% holds the allocation exactly).

    .venv/bin/python benchmarks/harmony_placement.py --workload philly [--workers 2]
    .venv/bin/python benchmarks/harmony_placement.py --workload synthetic-philly

Prints a table and writes `benchmarks/results/harmony_placement_<workload>.json`.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time
from pathlib import Path
from typing import Any

import numpy as np
from common import environment, print_table, project_path, write_json
from scipy import stats

from dl2.core import Scheduler
from dl2.resolve import placer_factory
from dl2.rl.learned import LearnedScheduler
from dl2.rl.model_io import is_model_dir
from dl2.schedulers.placement import Placer
from dl2.schedulers.registry import make_scheduler
from dl2.schedulers.tally import TallyingPlacer
from dl2.sim.config import SimConfig
from dl2.sim.lower_bound import BestLayoutSimulation, average_bound_s
from dl2.sim.metrics import summarize
from dl2.sim.run import interference_model, speed_model
from dl2.sim.simulator import Simulation, drive
from dl2.workload.registry import load_workloads

ALLOCATION = ("drf", "optimus-fitted", "models/dl2-philly")
HEURISTICS = ("load-balance", "tetris", "binpack", "isolate", "isolate-strict")
SEEDS = {"philly": (0, 1, 2, 3, 4), "synthetic-philly": (9000, 9001, 9002, 9003, 9004)}


def cached_run(task: tuple[str, int, str, str, str]) -> dict[str, Any]:
    """`run`, its result kept under the cache folder (if any) by task: a heuristic's runs serve every placer."""
    *key, cache = task
    path = Path(cache) / ("-".join(str(part).replace("/", "_") for part in key) + ".json") if cache else None
    if path is not None and path.is_file():
        result: dict[str, Any] = json.loads(path.read_text())
        return result
    result = run((key[0], int(key[1]), key[2], key[3]))
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result))
    return result


def run(task: tuple[str, int, str, str]) -> dict[str, Any]:
    name, seed, scheduler, placer_name = task
    make_placer = placer_factory(placer_name)
    assert make_placer is not None
    return run_with(name, seed, scheduler, make_placer())


def run_with(name: str, seed: int, scheduler: str, placer: Placer, best_layout: bool = False) -> dict[str, Any]:
    """Average JCT of workload `name` at `seed` under allocation policy `scheduler` placing with `placer`, and the
    share of the tasks the policy asked for that were not placed (`TallyingPlacer`, the same count for all).
    `best_layout`: every job runs at the best layout of the tasks it was placed, without interference
    (`BestLayoutSimulation`: what no placement of them can beat)."""
    started = time.perf_counter()
    tally = TallyingPlacer(placer)
    config = SimConfig.realistic(seed)
    speed = speed_model(config.mode)
    if is_model_dir(scheduler):
        policy: Scheduler = LearnedScheduler.from_dir(scheduler, placer=tally)
    else:
        policy = make_scheduler(scheduler, speed, False, tally)
    workload = load_workloads(name, seed)[0]
    simulation = (
        BestLayoutSimulation(workload, config, speed)
        if best_layout
        else Simulation(workload, config, speed, interference_model())
    )
    metrics = summarize(drive(simulation, policy))
    tally.close()
    return {
        "avg_jct_s": metrics.avg_jct_s,
        "wall_s": time.perf_counter() - started,
        "left_unplaced": tally.share_left,
        "tasks_asked": tally.asked,
    }


def bound(task: tuple[str, int]) -> float:
    name, seed = task
    config = SimConfig.realistic(seed)
    return average_bound_s(load_workloads(name, seed)[0], config, speed_model(config.mode))


def interval(values: np.ndarray) -> float:
    """Half-width of the 95% confidence interval of the mean (Student t; 0 for one value)."""
    if len(values) < 2:
        return 0.0
    return float(stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=sorted(SEEDS), default="philly")
    parser.add_argument("--placer", default="models/harmony-placer", help="the Harmony placer folder")
    parser.add_argument("--schedulers", default=",".join(ALLOCATION))
    parser.add_argument("--heuristics", default=",".join(HEURISTICS), help="the placers to compare with")
    parser.add_argument("--seeds", default=None, help="comma-separated (default: the workload's five test seeds)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cache", default="", help="keep each run's result in this folder and reuse it")
    parser.add_argument("--only-heuristics", action="store_true", help="run the heuristics only (fills the cache)")
    parser.add_argument("--out", default="", help="JSON file name (default: harmony_placement_<workload>.json)")
    args = parser.parse_args()
    if not args.only_heuristics:
        placer_factory(args.placer)  # fail now on a broken folder
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else list(SEEDS[args.workload])
    schedulers = args.schedulers.split(",")
    heuristics = args.heuristics.split(",")
    placers = [*heuristics, args.placer]
    tasks = [(args.workload, seed, s, p) for s in schedulers for p in placers for seed in seeds]
    if args.only_heuristics:
        tasks = [task for task in tasks if task[3] in heuristics]
    with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
        bounds = dict(zip(seeds, pool.map(bound, [(args.workload, seed) for seed in seeds]), strict=True))
        outcomes = pool.map(cached_run, [(*task, args.cache) for task in tasks], chunksize=1)
    results = dict(zip(tasks, outcomes, strict=True))
    if args.only_heuristics:
        return
    rows, report = [], {}
    lower = np.array([bounds[seed] for seed in seeds])
    for scheduler in schedulers:
        jct = {
            p: np.array([results[(args.workload, seed, scheduler, p)]["avg_jct_s"] for seed in seeds]) for p in placers
        }
        harmony = jct[args.placer]
        entry: dict[str, Any] = {}
        for placer in placers:
            values = jct[placer]
            entry[placer] = {
                "avg_jct_s": values.tolist(),
                "mean_h": float(values.mean() / 3600),
                "ci95_h": interval(values / 3600),
                "x_lower_bound": float((values / lower).mean()),
                "harmony_relative": float((harmony / values).mean()),
                "wall_s": [results[(args.workload, seed, scheduler, placer)]["wall_s"] for seed in seeds],
                "tasks_left_unplaced": [
                    results[(args.workload, seed, scheduler, placer)]["left_unplaced"] for seed in seeds
                ],
            }
            rows.append(
                [
                    scheduler,
                    placer,
                    f"{values.mean() / 3600:.3f} h",
                    f"±{interval(values / 3600):.3f}",
                    f"{(values / lower).mean():.2f}",
                    f"{(harmony / values).mean():.3f}",
                    f"{np.mean(entry[placer]['tasks_left_unplaced']):.1%}",
                ]
            )
        report[scheduler] = entry
    title = f"{args.workload} (realistic mode, seeds {seeds}): average JCT by placer, allocation policy fixed"
    columns = ["allocation", "placer", "avg JCT", "95% CI", "x lower bound", "harmony / this", "tasks left"]
    print_table(title, columns, rows)
    name = args.out or f"harmony_placement_{args.workload.replace('-', '_')}.json"
    write_json(
        name,
        {
            "environment": environment(),
            "workload": args.workload,
            "seeds": seeds,
            "placer": project_path_or_name(args.placer),
            "lower_bound_s": lower.tolist(),
            "results": report,
        },
    )


def project_path_or_name(name: str) -> str:
    return project_path(Path(name)) if Path(name).exists() else name


if __name__ == "__main__":
    main()
