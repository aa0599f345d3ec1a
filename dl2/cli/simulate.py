"""`dl2 simulate`: one scheduler on one workload (or on every workload of a file), as a table or as JSON."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
from tqdm import tqdm

from dl2.cli.common import (
    UsageError,
    add_sim_options,
    add_truth_option,
    add_workload_options,
    check_seed,
    console,
    load,
    sim_config,
)
from dl2.io import print_json
from dl2.resolve import scheduler_builder
from dl2.sim.config import Mode
from dl2.sim.metrics import RunMetrics, summarize
from dl2.sim.run import run_one

HEADLINE = (
    "avg_jct_s",
    "median_jct_s",
    "p95_jct_s",
    "p99_jct_s",
    "makespan_s",
    "avg_queueing_s",
    "avg_gpu_utilisation",
    "total_rescales",
    "avg_ftf_rho",
)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="run one scheduler on a workload",
        description="Run one scheduler on a workload and report JCT statistics. A file holding several workloads "
        "(as the DL2 reference files do) reports their mean and a per-workload list.",
    )
    add_workload_options(parser)
    parser.add_argument(
        "--scheduler",
        "-s",
        required=True,
        help="scheduler name (drf, fifo, srtf, optimus, optimus-fitted, tiresias, ...), a model folder, or "
        "lookahead:A+B (each slot, whichever of A and B a simulation of the active jobs says ends sooner), or "
        "lookahead-fitted:A+B (the same over heuristics, in a world each job's own progress corrects)",
    )
    add_sim_options(parser)
    add_truth_option(parser)
    parser.add_argument(
        "--oracle",
        action="store_true",
        help="with --truth: hand the scheduler the truth's speeds and the jobs' true types, which a deployment, "
        "reading only the catalogue, cannot know (labelled 'reading the truth'; the same scheduler, not a ceiling)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the workload mapping and of the simulation")
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    config = sim_config(args, args.seed)
    build = scheduler_builder(args.scheduler, args.placer, Mode(args.mode))
    workloads = load(args.workload, check_seed(args.seed))
    compat = config.mode is Mode.COMPAT
    metrics: list[RunMetrics] = []
    progress = tqdm(
        workloads,
        desc=f"{args.scheduler} on {args.workload}",
        unit="workload",
        disable=args.json or len(workloads) == 1,
        file=sys.stderr,
    )
    if args.oracle and args.truth is None:
        raise UsageError("--oracle reads a truth: name one with --truth")
    if args.truth is not None and compat:
        raise UsageError("--truth is played in realistic mode (compatibility mode is the authors' catalogue)")
    for workload in progress:
        if args.truth is None:
            metrics.append(summarize(run_one(workload, build, config)))
        else:
            from dl2.truth import realise
            from dl2.truth.run import run_on

            metrics.append(summarize(run_on(realise(args.truth, workload), build, config, oracle=args.oracle)))
    report = aggregate(metrics, compat)
    if args.truth is not None:
        report["truth"] = args.truth.name
        report["oracle"] = args.oracle
    if args.json:
        print_json(report)
    else:
        scheduler = f"{args.scheduler} (reading the truth)" if args.oracle else args.scheduler
        workload = args.workload if args.truth is None else f"{args.workload} under the truth {args.truth.name}"
        print_table(report, scheduler, workload, config.mode)
    return 0


def aggregate(metrics: list[RunMetrics], compat: bool) -> dict[str, Any]:
    """One run's metrics, or the mean over several workloads plus `per_workload`."""
    if len(metrics) == 1:
        return metrics[0].to_json_dict(compat)
    per_workload = [m.to_json_dict(compat) for m in metrics]
    report: dict[str, Any] = {}
    for key, value in per_workload[0].items():
        if isinstance(value, int | float) and not isinstance(value, bool) and key not in ("seed",):
            report[key] = float(np.mean([entry[key] for entry in per_workload]))
        else:
            report[key] = value
    report["num_jobs"] = sum(m.num_jobs for m in metrics)
    report["workload"] = metrics[0].workload.rsplit("/", 1)[0]
    report["num_workloads"] = len(metrics)
    report["per_workload"] = per_workload
    return report


def print_table(report: dict[str, Any], scheduler: str, workload: str, mode: Mode) -> None:
    from rich.table import Table

    title = f"{scheduler} on {workload} ({mode.value} mode"
    title += f", mean of {report['num_workloads']} workloads)" if "per_workload" in report else ")"
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key in ("num_jobs", *HEADLINE, "avg_jct_slots", "makespan_slots", "wall_s"):
        if key in report:
            value = report[key]
            table.add_row(key, f"{value:,.3f}" if isinstance(value, float) else str(value))
    console().print(table)
