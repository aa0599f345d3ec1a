"""`dl2 compare`: schedulers x seeds on a workload; mean JCT with a 95% confidence interval, a table, JSON and a PNG."""

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
    check_out_folder,
    check_seed,
    console,
    load,
    sim_config,
)
from dl2.cli.plots import plot_comparison
from dl2.core.limits import MAX_SEEDS
from dl2.io import write_json_atomic
from dl2.resolve import scheduler_builder
from dl2.sim.config import Mode
from dl2.sim.metrics import mean_ci95
from dl2.sim.run import GridRun, run_grid

DEFAULT_SCHEDULERS = {
    Mode.COMPAT: "drf,fifo,srtf-fraction,optimus",
    Mode.REALISTIC: "drf,fifo,srtf,optimus,optimus-fitted,tiresias",
}


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="compare schedulers over seeds on a workload",
        description="Run every scheduler for every seed on the workload(s); print mean JCT with a 95% confidence "
        "interval over (seed, workload) runs, and write compare.json and compare.png to --out.",
    )
    add_workload_options(parser)
    parser.add_argument("--schedulers", default=None, help="comma-separated names (default depends on --mode)")
    add_sim_options(parser)
    parser.add_argument("--seeds", default="0", help="comma-separated seeds, or N for 0..N-1 (default 0)")
    parser.add_argument(
        "--out", type=Path, default=None, help="output folder (default results/compare-<workload>-<mode>)"
    )
    parser.add_argument("--json", action="store_true", help="print the summary JSON on stdout instead of a table")
    parser.set_defaults(run=run)


def parse_seeds(text: str) -> list[int]:
    """`N` (more than one) for 0..N-1, or seeds separated by commas; at most `MAX_SEEDS` of them."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise UsageError("--seeds names no seed")
    if not all(part.isdigit() and len(part) <= 19 for part in parts):
        raise UsageError(f"--seeds must be whole numbers separated by commas, or a count, got '{text:.80}'")
    if len(parts) == 1 and "," not in text and int(parts[0]) > 1:
        count = int(parts[0])
        if count > MAX_SEEDS:
            raise UsageError(f"--seeds {count}: at most {MAX_SEEDS:,} seeds")
        return list(range(count))
    if len(parts) > MAX_SEEDS:
        raise UsageError(f"--seeds names {len(parts):,} seeds, at most {MAX_SEEDS:,}")
    return [check_seed(int(part)) for part in parts]


def run(args: argparse.Namespace) -> int:
    mode = Mode(args.mode)
    names = [n.strip() for n in (args.schedulers or DEFAULT_SCHEDULERS[mode]).split(",") if n.strip()]
    if not names:
        raise UsageError("--schedulers names no scheduler")
    builders = {name: scheduler_builder(name, args.placer, mode) for name in names}
    seeds = parse_seeds(args.seeds)
    config = sim_config(args, seeds[0])
    out = args.out or Path("results") / f"compare-{Path(args.workload).stem}-{mode.value}"
    check_out_folder(out)
    workloads_by_seed = {seed: load(args.workload, seed) for seed in seeds}
    total = len(names) * sum(len(w) for w in workloads_by_seed.values())
    runs: list[GridRun] = []
    with tqdm(total=total, desc="compare", unit="run", file=sys.stderr, disable=args.json) as bar:
        for seed in seeds:
            for run_ in run_grid(workloads_by_seed[seed], builders, config, [seed], on_done=lambda _: bar.update()):
                runs.append(run_)
    summary = summarize_runs(runs, names, mode, args.workload)
    write_json_atomic(out / "compare.json", summary)
    unit_s, unit = (config.slot_s or runs[0].result.slot_s, "slots") if mode is Mode.COMPAT else (3600.0, "h")
    plot_comparison(runs, out / "compare.png", f"{args.workload} ({mode.value} mode)", unit_s, unit)
    if args.json:
        import json

        json.dump(summary, sys.stdout, sort_keys=True)
        sys.stdout.write("\n")
    else:
        print_summary(summary, mode)
        print(f"wrote {out / 'compare.json'} and {out / 'compare.png'}")
    return 0


def summarize_runs(runs: list[GridRun], names: list[str], mode: Mode, workload: str) -> dict[str, Any]:
    rows = []
    baseline = None
    for name in names:
        own = [run.metrics for run in runs if run.scheduler == name]
        mean, half = mean_ci95([m.avg_jct_s for m in own])
        row: dict[str, Any] = {
            "scheduler": name,
            "runs": len(own),
            "avg_jct_s": mean,
            "avg_jct_ci95_s": half,
            "p99_jct_s": mean_ci95([m.p99_jct_s for m in own])[0],
            "makespan_s": mean_ci95([m.makespan_s for m in own])[0],
            "avg_queueing_s": mean_ci95([m.avg_queueing_s for m in own])[0],
            "avg_gpu_utilisation": mean_ci95([m.avg_gpu_utilisation for m in own])[0],
            "rescales": mean_ci95([float(m.total_rescales) for m in own])[0],
            "avg_ftf_rho": mean_ci95([m.avg_ftf_rho for m in own])[0],
            "wall_s": sum(m.wall_s for m in own),
        }
        if mode is Mode.COMPAT:
            row["avg_jct_slots"] = mean / own[0].slot_s
            row["avg_jct_ci95_slots"] = half / own[0].slot_s
        baseline = baseline or mean
        row["jct_vs_first"] = mean / baseline
        rows.append(row)
    return {
        "workload": workload,
        "mode": mode.value,
        "seeds": sorted({run.seed for run in runs}),
        "schedulers": rows,
        "runs": [
            {"scheduler": r.scheduler, "seed": r.seed, **r.metrics.to_json_dict(mode is Mode.COMPAT)} for r in runs
        ],
    }


def print_summary(summary: dict[str, Any], mode: Mode) -> None:
    from rich.table import Table

    rows = summary["schedulers"]
    table = Table(title=f"{summary['workload']} ({summary['mode']} mode), seeds {summary['seeds']}")
    columns = [
        "scheduler",
        "runs",
        "avg JCT",
        "95% CI",
        "p99 JCT",
        "makespan",
        "queueing",
        "GPU util",
        "rescales",
        "FTF rho",
        f"vs {rows[0]['scheduler']}",
    ]
    for column in columns:
        table.add_column(column, justify="left" if column == "scheduler" else "right")
    for row in rows:
        if mode is Mode.COMPAT:  # the authors report slots
            slot = row["avg_jct_s"] / row["avg_jct_slots"] if row["avg_jct_slots"] else 1.0
            unit, scale = "slots", slot
        else:
            unit, scale = "h", 3600.0
        table.add_row(
            row["scheduler"],
            str(row["runs"]),
            f"{row['avg_jct_s'] / scale:.2f} {unit}",
            f"±{row['avg_jct_ci95_s'] / scale:.2f}",
            f"{row['p99_jct_s'] / scale:.1f} {unit}",
            f"{row['makespan_s'] / scale:.1f} {unit}",
            f"{row['avg_queueing_s'] / 60:.1f} min",
            f"{row['avg_gpu_utilisation']:.2f}",
            f"{row['rescales']:.0f}",
            f"{row['avg_ftf_rho']:.2f}",
            f"{row['jct_vs_first']:.3f}",
        )
    console().print(table)
