"""How faithful a calibrated twin is, split into its two parts: the workload rebuilt from the decision records
and the speeds calibrated from them.

For a truth and a seed, the cluster's previous week (seed + 500, DRF deciding, as in shadow mode) is logged; the
twin is the world its records calibrate (`dl2.sim.calibrated`) and the workloads its records give
(`records:LOG`). Each scheduler then runs four workloads, each both under the truth and in the twin's world:

- the previous week as it was submitted;
- the previous week rebuilt from its records (`dl2.workload.observed.observed_workload`);
- the twin's first training workload (a resample of the rebuilt week);
- the next week (seed), the one a policy chosen in the twin then meets.

Same workload, truth against twin: the calibration's error. Same world, one workload against another: how the
workloads differ. Truths whose workload itself changes (`dense-arrivals`) are not compared here: the truth
rewrites the arrivals that the twin takes from the records.

    .venv/bin/python benchmarks/twin_fidelity.py [--truths speed-shift,catalogue] [--seeds 9100,9101]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from calibrated_twin import TWIN_SEED, heuristic, previous_week_log
from common import environment, print_table, write_json
from truth_scenarios import CHAMPION, philly_like, previous_week

from dl2.core import Workload
from dl2.core.log_format import read_log
from dl2.resolve import scheduler_builder
from dl2.sim.calibrated import calibrated_world
from dl2.sim.config import Mode, SimConfig
from dl2.sim.metrics import summarize
from dl2.sim.simulator import simulate
from dl2.truth import realise, truth_named
from dl2.workload.observed import observed_workload
from dl2.workload.source import workload as source_workload


def load(workload: Workload) -> dict[str, float]:
    """What makes a week heavy: its total epochs and the span of its arrivals."""
    arrivals = [job.spec.arrival_s for job in workload.jobs]
    return {
        "epochs_total": float(sum(job.true_epochs for job in workload.jobs)),
        "arrival_span_h": (max(arrivals) - min(arrivals)) / 3600,
        "requested_workers_mean": float(np.mean([job.spec.requested_workers for job in workload.jobs])),
    }


SCHEDULERS = {"champion": "champion dl2-philly", "optimus": "optimus", "speedup-hull": "speedup-hull"}
"""What `--schedulers` may name, and the rows' names for them."""


def cell(
    truth: str, seed: int, num_jobs: int, num_nodes: int, folder: Path, names: tuple[str, ...] = ("champion", "optimus")
) -> dict[str, Any]:
    log = previous_week_log(truth, seed, num_jobs, num_nodes, folder)
    world, _ = calibrated_world(log)
    previous, _ = previous_week(truth, seed, num_jobs, num_nodes)
    workloads = {
        "previous week": (previous, seed + 500),
        "previous week from its records": (observed_workload(read_log(log), previous.cluster), seed + 500),
        "a twin training workload": (source_workload(f"records:{log}", TWIN_SEED), TWIN_SEED),
        "next week": (philly_like(seed, num_jobs, num_nodes), seed),
    }
    schedulers = {
        SCHEDULERS[name]: scheduler_builder(CHAMPION, None, Mode.REALISTIC) if name == "champion" else heuristic(name)
        for name in names
    }
    rows = []
    for name, build in schedulers.items():
        for label, (workload, sim_seed) in workloads.items():
            real = realise(truth_named(truth), workload)
            config = real.config(SimConfig.realistic(seed=sim_seed))
            truth_h = summarize(simulate(real.workload, build(world.speed, False), config, real.speed,
                                         real.interference)).avg_jct_s / 3600  # fmt: skip
            twin_h = summarize(simulate(workload, build(world.speed, False), SimConfig.realistic(seed=sim_seed),
                                        world.speed, world.interference)).avg_jct_s / 3600  # fmt: skip
            rows.append({"scheduler": name, "workload": label, "truth_h": truth_h, "twin_h": twin_h, **load(workload)})
    return {"truth": truth, "seed": seed, "rows": rows}


def paired_bias(cell: dict[str, Any], scheduler: str) -> list[dict[str, Any]]:
    """Per workload of `cell`: `scheduler`'s average JCT relative to the champion's, under the truth and in the twin,
    and the twin's bias (its relative difference less the truth's): what a gate that compares the two in the twin
    gets wrong on that workload."""
    champion = {r["workload"]: r for r in cell["rows"] if r["scheduler"] == SCHEDULERS["champion"]}
    rows = []
    for row in (r for r in cell["rows"] if r["scheduler"] == scheduler):
        base = champion[row["workload"]]
        truth, twin = row["truth_h"] / base["truth_h"] - 1, row["twin_h"] / base["twin_h"] - 1
        rows.append({"truth": cell["truth"], "seed": cell["seed"], "scheduler": scheduler, "workload": row["workload"],
                     "truth_vs_champion": truth, "twin_vs_champion": twin, "bias": twin - truth})  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--truths", default="speed-shift,catalogue", help="scenarios, comma-separated")
    parser.add_argument("--seeds", default="9100,9101", help="seeds of the next week (the previous is seed + 500)")
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--nodes", type=int, default=24)
    parser.add_argument(
        "--schedulers",
        default="champion,optimus",
        help=f"comma-separated, of {', '.join(SCHEDULERS)}; with the champion and another, the table of the twin's "
        "paired comparison against the truth's follows",
    )
    parser.add_argument("--out", default="twin_fidelity.json", help="file name under benchmarks/results/")
    args = parser.parse_args()
    names = tuple(args.schedulers.split(","))
    unknown = [name for name in names if name not in SCHEDULERS]
    if unknown:
        parser.error(f"--schedulers: unknown {', '.join(unknown)} (expected some of {', '.join(SCHEDULERS)})")
    cells = []
    with tempfile.TemporaryDirectory(prefix="dl2-twin-") as scratch:
        for truth in args.truths.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                cells.append(cell(truth, seed, args.jobs, args.nodes, Path(scratch), names))
                print(f"{truth} {seed} done", file=sys.stderr, flush=True)
    print_table(
        "the twin's fidelity: average JCT under the truth and in the calibrated twin, per workload",
        ["truth", "seed", "scheduler", "workload", "epochs (M)", "truth (h)", "twin (h)", "twin / truth"],
        [[c["truth"], str(c["seed"]), r["scheduler"], r["workload"], f"{r['epochs_total'] / 1e6:.2f}",
          f"{r['truth_h']:.2f}", f"{r['twin_h']:.2f}", f"{r['twin_h'] / r['truth_h']:.3f}"]
         for c in cells for r in c["rows"]],
    )  # fmt: skip
    others = [SCHEDULERS[name] for name in names if name != "champion"] if "champion" in names else []
    paired = [row for c in cells for other in others for row in paired_bias(c, other)]
    if paired:
        print_table(
            "the twin's paired comparison against the truth's: each scheduler against the champion, same workload",
            ["truth", "seed", "scheduler", "workload", "truth: vs champion", "twin: vs champion", "twin's bias"],
            [[p["truth"], str(p["seed"]), p["scheduler"], p["workload"], f"{p['truth_vs_champion']:+.1%}",
              f"{p['twin_vs_champion']:+.1%}", f"{p['bias']:+.1%}"] for p in paired],
        )  # fmt: skip
    results = {"environment": environment(), "arguments": vars(args), "cells": cells, "paired": paired}
    path = write_json(args.out, results)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
