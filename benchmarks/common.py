"""Helpers shared by the benchmark scripts: one-core pinning, a rich table and atomic JSON output."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def pin_to_one_core() -> int:
    """Run on a single core (the speed bars are per core); returns the core used."""
    core = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    return core


def environment() -> dict[str, Any]:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "git_commit": commit.stdout.strip() or None,
    }


def write_json(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / name
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    temporary.replace(path)
    return path


def print_table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for index, column in enumerate(columns):
        table.add_column(column, justify="left" if index == 0 else "right")
    for row in rows:
        table.add_row(*row)
    Console(width=200).print(table)


def report(
    name: str, title: str, columns: list[str], table: list[list[str]], rows: dict[str, Any], **settings: Any
) -> Path:
    """Print a benchmark's table and write `benchmarks/results/<name>`: its `settings` (what the command line set),
    its `rows` (the summary a row, with its runs) and the environment it ran in."""
    print_table(title, columns, table)
    return write_json(name, {**settings, "rows": rows, "environment": environment()})


def dl2(*arguments: str) -> str:
    """Run the `dl2` command line with this interpreter from the project root; its stdout, or an error with the
    end of its stderr."""
    root = Path(__file__).resolve().parent.parent
    command = [sys.executable, "-m", "dl2.cli.main", *arguments]
    done = subprocess.run(command, capture_output=True, text=True, cwd=root, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"dl2 {' '.join(arguments)} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def project_path(path: Path) -> str:
    """`path` relative to the project root when it lies inside it (results files then read the same anywhere)."""
    root = Path(__file__).resolve().parent.parent
    path = path.resolve()
    return str(path.relative_to(root) if path.is_relative_to(root) else path)
