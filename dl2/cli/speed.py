"""`dl2 speed-models`: the realistic speed model's fit to the authors' measurements, per job type."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "speed-models",
        help="show the fitted speed model of each job type and its error",
        description="Fit the realistic, placement-aware speed model of every catalogue job type to the DL2 "
        "authors' measured table (their failed zero-speed runs treated as missing) and report the fit error.",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from dl2.workload.speed_fit import FEATURE_NAMES, ParametricSpeedModel

    model = ParametricSpeedModel()
    rows: list[dict[str, Any]] = [
        {
            "model": fit.model,
            "rows": fit.num_rows,
            "mape": fit.mape,
            "p90_ape": fit.p90_ape,
            "coefficients": dict(zip(FEATURE_NAMES, fit.coefficients, strict=True)),
            "best_config_ps_workers": _best(model, fit.model),
        }
        for fit in model.fits.values()
    ]
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    from rich.table import Table

    from dl2.cli.common import console

    table = Table(title="Realistic speed model: fit to the authors' measurements (relative error of throughput)")
    for column in ("model", "rows", "MAPE", "p90 error", "fastest (PS, workers) <= 32"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for row in rows:
        table.add_row(
            row["model"],
            str(row["rows"]),
            f"{100 * row['mape']:.1f}%",
            f"{100 * row['p90_ape']:.1f}%",
            str(row["best_config_ps_workers"]),
        )
    console().print(table)
    return 0


def _best(model: object, name: str) -> tuple[int, int]:
    candidates = [(ps, workers) for ps in range(1, 33) for workers in range(1, 33)]
    return max(candidates, key=lambda c: model.throughput(name, c[0], c[1]))  # type: ignore[attr-defined]
