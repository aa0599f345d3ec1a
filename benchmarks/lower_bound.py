"""A lower bound on average JCT: every job alone on the cluster from its first decision point, at its fastest
feasible allocation and placement (`dl2.sim.lower_bound`), realistic mode.

The simulator's own speed function is evaluated over every feasible number of workers and PS and, up to the
symmetry of interchangeable servers, every placement; interference, noise and the other jobs are left out, so no
scheduler and placer can beat it. `tests/unit/sim/test_lower_bound.py` checks it against single-job runs of the
simulator.
The placement benchmarks report their results as multiples of it.

    .venv/bin/python benchmarks/lower_bound.py [--seeds 0,1,2,3,4]

Prints a table and writes `benchmarks/results/lower_bound.json` (about a minute).
"""

from __future__ import annotations

import argparse

import numpy as np
from common import environment, print_table, write_json

from dl2.sim.config import SimConfig
from dl2.sim.lower_bound import average_bound_s
from dl2.sim.run import speed_model
from dl2.workload.registry import load_workloads

WORKLOADS = ("philly", "synthetic-philly")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3,4", help="workload seeds (the job-to-model mapping of a trace)")
    parser.add_argument("--test-seed-offset", type=int, default=9000, help="synthetic workloads use offset + seed")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    rows, results = [], {}
    for name in WORKLOADS:
        values = []
        for seed in seeds:
            workload_seed = seed if name == "philly" else args.test_seed_offset + seed
            config = SimConfig.realistic(seed)
            bound = average_bound_s(load_workloads(name, workload_seed)[0], config, speed_model(config.mode))
            values.append(bound)
            results[f"{name}/{workload_seed}"] = bound
        mean = float(np.mean(values))
        rows.append([name, ",".join(str(s) for s in seeds), f"{mean / 3600:.3f} h", f"{min(values) / 3600:.3f}"])
    print_table("Lower bound on average JCT (realistic mode)", ["workload", "seeds", "mean", "lowest"], rows)
    write_json("lower_bound.json", {"environment": environment(), "avg_jct_s": results})


if __name__ == "__main__":
    main()
