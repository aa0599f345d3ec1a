"""Which teacher wins changes from week to week: Optimus against `speedup-hull`, both placing with `isolate-strict`.

The closed loop (`benchmarks/loop_scenarios.py`) re-warms its challenger on whichever of the two heuristics does
better in the twin of last week's records, then plays a week it never saw. This measures how often last week's
winner is this week's: per truth, both heuristics (reading the catalogue, as a deployment does) on the weeks of
`synthetic-philly` (the first `--jobs` jobs on the first `--nodes` servers, as the loop benchmark) under the
truth, and their ratio.

    .venv/bin/python benchmarks/teacher_by_week.py [--truths catalogue --seeds 9100,9101,...]

Prints the table and writes `benchmarks/results/teacher_by_week.json`.
"""

from __future__ import annotations

import argparse

from calibrated_twin import play
from common import environment, print_table, write_json

TEACHERS = ("optimus", "speedup-hull")
PLACER = "isolate-strict"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--truths", default="catalogue,speed-shift", help="scenarios, comma-separated")
    parser.add_argument("--seeds", default="9100,9101,9102,9600,9601,9602,9603,9604", help="weeks (workload seeds)")
    parser.add_argument("--jobs", type=int, default=150, help="first N jobs of each week")
    parser.add_argument("--nodes", type=int, default=12, help="first N servers of the cluster")
    args = parser.parse_args()
    rows, cells = [], []
    for truth in args.truths.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            hours = {name: play(truth, seed, args.jobs, args.nodes, name, placer=PLACER) for name in TEACHERS}
            ratio = hours["speedup-hull"] / hours["optimus"]
            cells.append({"truth": truth, "seed": seed, "avg_jct_h": hours, "hull_over_optimus": ratio})
            rows.append([truth, str(seed), f"{hours['optimus']:.3f}", f"{hours['speedup-hull']:.3f}", f"{ratio:.3f}"])
    print_table(
        f"average JCT (h) under the truth, placing with {PLACER}",
        ["truth", "week (seed)", "optimus", "speedup-hull", "speedup-hull / optimus"],
        rows,
    )
    path = write_json("teacher_by_week.json", {"arguments": vars(args), "environment": environment(), "cells": cells})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
