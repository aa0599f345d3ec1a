"""What packed requests give each heuristic (compatibility mode): the same decisions, asked as decided or packed.

A DL2 policy with `ObservationConfig.packed` decides its counts against the cluster's total capacity and the slot's
tasks are then asked of the authors' least-loaded placement in the packed order (`dl2.env.decision`). So that the
policy's figures can be read fairly, this runs the heuristics through the same `SlotDecision` both ways:

- as asked: every request goes to the least-loaded server as it is made, the authors' environment (the same
  JCTs as `dl2 compare`, which runs the heuristics' own mechanism);
- packed: every request is checked against the cluster's total capacity, and the slot is placed packed.

On the validation workloads (`authors-small` seeds 5000-5009) and the authors' 10 small test workloads. Nothing
here is chosen: it reports.

    .venv/bin/python benchmarks/packed_requests.py [--workers 2]

Prints a table and writes `benchmarks/results/packed_requests.json` (about 5 minutes on two cores).
"""

from __future__ import annotations

import argparse
import multiprocessing
from typing import Any

import numpy as np
from common import environment, print_table, write_json

from dl2.env.observation import ObservationConfig
from dl2.rl.demonstrations import record
from dl2.schedulers.load_balance import LoadBalancePlacer
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import Mode, SimConfig
from dl2.sim.run import speed_model
from dl2.workload.source import workload

SCHEDULERS = ("drf", "optimus", "srpt-knee-ladder", "speedup-hull-marginal", "speedup-hull")
WORKLOADS = {"validation": ("authors-small", list(range(5000, 5010))), "test": ("dl2-official-small", list(range(10)))}
WINDOW = 1_000
"""Every job in one window: the heuristics see the whole slot, as when they run on their own."""
NOT_RECORDED = 10**9
"""`record` keeps demonstrations of every n-th slot; only its replayed JCT is used here."""


def average_jct_slots(task: tuple[str, str, int, bool]) -> float:
    name, source, seed, packed = task
    work = workload(source, seed)
    teacher = make_scheduler(name, speed_model(Mode.COMPAT), True)
    observation = ObservationConfig(window=WINDOW, packed=packed)
    _, jct_s = record(work, teacher, SimConfig.compat(), observation, LoadBalancePlacer(), NOT_RECORDED)
    return jct_s / work.slot_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    tasks = [
        (name, source, seed, packed)
        for name in SCHEDULERS
        for source, seeds in WORKLOADS.values()
        for packed in (False, True)
        for seed in seeds
    ]
    with multiprocessing.get_context("fork").Pool(args.workers) as pool:
        values = dict(zip(tasks, pool.map(average_jct_slots, tasks, chunksize=1), strict=True))
    results: dict[str, dict[str, Any]] = {}
    for name in SCHEDULERS:
        results[name] = {}
        for split, (source, seeds) in WORKLOADS.items():
            for packed in (False, True):
                per_workload = [values[(name, source, seed, packed)] for seed in seeds]
                results[name][f"{split}, {'packed' if packed else 'as asked'}"] = {
                    "avg_jct_slots": float(np.mean(per_workload)),
                    "per_workload": per_workload,
                }
    columns = [f"{split}, {how}" for split in WORKLOADS for how in ("as asked", "packed")]
    drf = results["drf"]
    rows = [[name, *(f"{results[name][c]['avg_jct_slots']:.2f}" for c in columns)] for name in SCHEDULERS]
    rows.append(
        [
            "DRF ratio of speedup-hull-marginal",
            *(f"{results['speedup-hull-marginal'][c]['avg_jct_slots'] / drf[c]['avg_jct_slots']:.3f}" for c in columns),
        ]
    )
    print_table("Compatibility mode, average JCT (slots): requests as asked and packed", ["scheduler", *columns], rows)
    path = write_json(
        "packed_requests.json",
        {"workloads": {k: {"source": s, "seeds": v} for k, (s, v) in WORKLOADS.items()}, "results": results}
        | {"environment": environment()},
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
