"""A sweep of J (DL2 §6.4): the warm-up of dl2-compat-small retrained with different windows of jobs, each
evaluated on the authors' 10 small test workloads (compatibility mode).

With more than J active jobs a slot is decided in batches of J (the authors' contended setting has 30-45 active
jobs), so a small J sees less of the queue at once. Every model is trained with the command in
`models/dl2-compat-small/MODEL_CARD.md`, only `--window` changes; the J = 40 row is that shipped model unless
`--retrain-shipped` is given. Prints a table and writes `benchmarks/results/window_sweep.json`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from common import environment, print_table, write_json

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "models" / "dl2-compat-small"
SHIPPED_WINDOW = 40
TRAIN = [
    "train-sl", "--teacher", "srpt-knee-fill", "--mode", "compat", "--source", "authors-small", "--episodes", "8",
    "--record-every", "2", "--dagger-rounds", "2", "--dagger-episodes", "4", "--hidden", "64,64",
    "--network", "per-job-local", "--epochs", "6", "--seed", "0",
]  # fmt: skip


def dl2(*arguments: str) -> str:
    command = [sys.executable, "-m", "dl2.cli.main", *arguments]
    return subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT).stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", default="10,20,40", help="values of J")
    parser.add_argument("--retrain-shipped", action="store_true", help="retrain J = 40 too")
    args = parser.parse_args()
    windows = [int(w) for w in args.windows.split(",")]
    with tempfile.TemporaryDirectory() as scratch:
        models: dict[int, Path] = {}
        for window in windows:
            if window == SHIPPED_WINDOW and not args.retrain_shipped:
                models[window] = SHIPPED
                continue
            models[window] = Path(scratch) / f"window-{window}"
            print(f"training J = {window}...", file=sys.stderr)
            dl2(*TRAIN, "--window", str(window), "--out", str(models[window]))
        model_flags = [flag for window in windows for flag in ("--model", str(models[window]))]
        report = json.loads(
            dl2("evaluate", *model_flags, "--workload", "dl2-official-small", "--mode", "compat",
                "--baselines", "drf,optimus", "--json")
        )  # fmt: skip
        accuracy = {
            window: json.loads((models[window] / "config.json").read_text())["metadata"]["facts"]["held_out_accuracy"]
            for window in windows
        }
    rows, records = [], []
    by_name = report["schedulers"]
    drf, optimus = by_name["drf"]["avg_jct_slots"], by_name["optimus"]["avg_jct_slots"]
    for window in windows:
        entry = by_name[f"{models[window].name} (greedy)"]
        jct = entry["avg_jct_slots"]
        records.append({"window": window, "avg_jct_slots": jct, "held_out_accuracy": accuracy[window]})
        rows.append([str(window), f"{accuracy[window]:.3f}", f"{jct:.2f}", f"{jct / drf:.3f}", f"{jct / optimus:.3f}"])
    rows.append(["drf", "", f"{drf:.2f}", "1.000", f"{drf / optimus:.3f}"])
    rows.append(["optimus", "", f"{optimus:.2f}", f"{optimus / drf:.3f}", "1.000"])
    print_table(
        "A sweep of J: dl2-compat-small's warm-up, authors' 10 small test workloads (compat)",
        ["J", "held-out accuracy", "avg JCT (slots)", "vs DRF", "vs Optimus"],
        rows,
    )
    payload = {"environment": environment(), "runs": records, "drf": drf, "optimus": optimus}
    print(f"wrote {write_json('window_sweep.json', payload)}")


if __name__ == "__main__":
    main()
