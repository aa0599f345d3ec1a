"""`dl2 workloads`: list the named workloads, or describe one (statistics as in the traces' stats.json)."""

from __future__ import annotations

import argparse
import json
import sys

from dl2.cli.common import check_seed, console, load


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "workloads", help="list or describe workloads", description="List the named workloads, or describe one."
    )
    parser.add_argument("name", nargs="?", help="a workload name or file to describe (omit to list)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the trace mapping / generator")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from dl2.workload.describe import describe
    from dl2.workload.registry import describe_available

    if args.name is None:
        rows = describe_available()
        if args.json:
            json.dump(rows, sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            _print_rows("workloads", rows)
        return 0
    workloads = load(args.name, check_seed(args.seed))
    descriptions = [describe(w) for w in workloads]
    if args.json:
        json.dump(descriptions if len(descriptions) > 1 else descriptions[0], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for description in descriptions:
            _print_rows(
                str(description.get("name", args.name)),
                [{"statistic": k, "value": v} for k, v in description.items() if k != "name"],
            )
    return 0


def _print_rows(title: str, rows: list[dict[str, object]]) -> None:
    from rich.table import Table

    table = Table(title=title)
    if not rows:
        console().print(table)
        return
    for column in rows[0]:
        table.add_column(str(column))
    for row in rows:
        table.add_row(*(_format(value) for value in row.values()))
    console().print(table)


def _format(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}"
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)
