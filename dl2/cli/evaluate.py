"""`dl2 evaluate`: trained policies (greedy and sampled decisions) against heuristics on the same workloads."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm

from dl2.cli.common import (
    UsageError,
    add_sim_options,
    add_workload_options,
    console,
    load,
    sim_config,
)
from dl2.io import print_json, write_json_atomic
from dl2.resolve import scheduler_builder
from dl2.sim.config import Mode
from dl2.sim.metrics import mean_ci95
from dl2.sim.run import GridRun, SchedulerBuilder, run_grid


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "evaluate",
        help="evaluate trained policies against heuristics",
        description="Run each model (greedy decisions, and sampled ones with --sampled) and each baseline on the "
        "workloads for every seed; print average JCT with 95% confidence intervals and ratios to the baselines.",
    )
    parser.add_argument("--model", type=Path, action="append", required=True, help="model folder (repeatable)")
    add_workload_options(parser)
    parser.add_argument("--baselines", default="drf,optimus", help="comma-separated heuristic names")
    add_sim_options(parser)
    parser.add_argument("--seeds", default="0", help="comma-separated seeds")
    parser.add_argument("--sampled", action="store_true", help="also evaluate sampled (not argmax) decisions")
    parser.add_argument("--out", type=Path, default=None, help="write evaluation.json here")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from dl2.cli.compare import parse_seeds
    from dl2.rl.model_io import load_config

    mode = Mode(args.mode)
    seeds = parse_seeds(args.seeds)
    if args.out is not None and args.out.is_dir():
        raise UsageError(f"--out {args.out} is a folder; name the JSON file to write")
    builders: dict[str, SchedulerBuilder] = {}
    for model in args.model:
        load_config(model)  # a missing folder, or one without config.json, is named as such
        builders[f"{model.name} (greedy)"] = scheduler_builder(str(model), args.placer, mode, greedy=True)
        if args.sampled:
            builders[f"{model.name} (sampled)"] = scheduler_builder(
                str(model), args.placer, mode, greedy=False, seed=seeds[0]
            )
    baselines = [name.strip() for name in args.baselines.split(",") if name.strip()]
    for name in baselines:
        builders[name] = scheduler_builder(name, args.placer, mode)
    config = sim_config(args, seeds[0])
    runs: list[GridRun] = []
    workloads = {seed: load(args.workload, seed) for seed in seeds}
    total = len(builders) * sum(len(w) for w in workloads.values())
    with tqdm(total=total, desc="evaluate", unit="run", file=sys.stderr, disable=args.json) as bar:
        for seed in seeds:
            runs += run_grid(workloads[seed], builders, config, [seed], on_done=lambda _: bar.update())
    report = summarize(runs, list(builders), baselines, mode, args.workload)
    if args.out is not None:
        write_json_atomic(args.out, report)
    if args.json:
        print_json(report)
    else:
        print_report(report, mode)
    return 0


def summarize(runs: list[GridRun], names: list[str], baselines: list[str], mode: Mode, workload: str) -> dict[str, Any]:
    rows: dict[str, dict[str, Any]] = {}
    for name in names:
        own = [run.metrics for run in runs if run.scheduler == name]
        mean, half = mean_ci95([m.avg_jct_s for m in own])
        rows[name] = {
            "avg_jct_s": mean,
            "avg_jct_ci95_s": half,
            "p99_jct_s": mean_ci95([m.p99_jct_s for m in own])[0],
            "runs": len(own),
        }
        if mode is Mode.COMPAT:
            rows[name]["avg_jct_slots"] = mean / own[0].slot_s
    for row in rows.values():
        for baseline in baselines:
            row[f"vs_{baseline}"] = row["avg_jct_s"] / rows[baseline]["avg_jct_s"]
        if baselines:
            row["vs_best_baseline"] = row["avg_jct_s"] / min(rows[b]["avg_jct_s"] for b in baselines)
    return {"workload": workload, "mode": mode.value, "baselines": baselines, "schedulers": rows}


def print_report(report: dict[str, Any], mode: Mode) -> None:
    from rich.table import Table

    baselines = report["baselines"]
    table = Table(title=f"{report['workload']} ({report['mode']} mode)")
    for column in ["scheduler", "runs", "avg JCT", "95% CI", *(f"vs {b}" for b in baselines), "vs best baseline"]:
        table.add_column(column, justify="left" if column == "scheduler" else "right")
    for name, row in report["schedulers"].items():
        if mode is Mode.COMPAT:
            jct, ci = (
                f"{row['avg_jct_slots']:.2f} slots",
                f"±{row['avg_jct_ci95_s'] / row['avg_jct_s'] * row['avg_jct_slots']:.2f}",
            )
        else:
            jct, ci = f"{row['avg_jct_s'] / 3600:.3f} h", f"±{row['avg_jct_ci95_s'] / 3600:.3f}"
        ratios = [f"{row[f'vs_{b}']:.3f}" for b in baselines]
        table.add_row(name, str(row["runs"]), jct, ci, *ratios, f"{row.get('vs_best_baseline', float('nan')):.3f}")
    console().print(table)
