"""How well a cluster's decision records calibrate its job types' speeds, as the records grow.

Each scenario's truth (`dl2.truth`) is played on Philly-like jobs (`synthetic-philly` seed 9100, the first
`--jobs` jobs on `--nodes` servers) with DRF deciding, the incumbent whose decisions a shadow-mode controller
applies; its decision log is what the cluster would have recorded. The calibration (`dl2.workload.calibration`,
split by the pods' demands, so that new types under catalogue labels get their own) is fitted on the records of
the first N slots. Reported per true job type: the mean relative error of its speed over the allocations a
scheduler weighs (1-8 workers, 1-8 parameter servers, across servers), against the truth's, for the catalogue and
for each calibration; and the fitted interference scale against the truth's.

    .venv/bin/python benchmarks/calibration.py [--slots 50,100,200,400,0]

Prints a table and writes `benchmarks/results/calibration.json`.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import replace
from typing import Any

import numpy as np
from common import environment, print_table, write_json

from dl2.core import JobAllocation
from dl2.placement.samples import record_run
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import SimConfig
from dl2.sim.run import catalogue_speed
from dl2.truth import realise, truth_named
from dl2.workload.calibration import CalibratedSpeedModel, calibrate
from dl2.workload.interference import InterferenceModel
from dl2.workload.synthetic import PRESETS, generate
from testbed.twin.workloads import first_jobs, first_nodes

GRID = [(w, p) for w in (1, 2, 4, 8) for p in (1, 2, 4, 8)]


def grid_error(model: Any, truth: Any, specs: list[Any]) -> float:
    errors = []
    for spec in specs:
        for workers, ps in GRID:
            allocation = JobAllocation(tuple(range(workers)), tuple(range(workers, workers + ps)))
            true = truth.placed_throughput(spec, allocation)
            errors.append(abs(model.placed_throughput(spec, allocation) / true - 1.0))
    return float(np.mean(errors))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--truths", default="speed-shift,new-types,interference-2x,seed-1,seed-2")
    parser.add_argument("--slots", default="50,100,200,400,0", help="records of the first N slots (0: all)")
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--nodes", type=int, default=24)
    parser.add_argument("--seed", type=int, default=9100)
    parser.add_argument("--out", default="calibration.json", help="file name under benchmarks/results/")
    args = parser.parse_args()
    sizes = [int(n) for n in args.slots.split(",")]
    workload = generate(replace(PRESETS["synthetic-philly"], num_jobs=args.jobs), args.seed, "synthetic-philly")
    workload = first_nodes(first_jobs(workload, args.jobs), args.nodes)
    catalogue, profiled = catalogue_speed(), InterferenceModel()
    results: dict[str, Any] = {"environment": environment(), "arguments": vars(args), "truths": {}}
    rows = []
    for name in args.truths.split(","):
        cluster = realise(truth_named(name), workload)
        config = cluster.config(SimConfig.realistic(seed=args.seed))
        records = record_run(
            cluster.workload, make_scheduler("drf", catalogue, False), config, cluster.speed, cluster.interference
        )
        times = sorted({r.time_s for r in records})
        by_type: dict[str, list[Any]] = defaultdict(list)
        for job in cluster.workload.jobs:
            by_type[cluster.type_of(job.spec)].append(job.spec)
        entry: dict[str, Any] = {"slots": len(times), "records": len(records), "types": {}, "interference": {}}
        calibrations = {}
        for size in sizes:
            cut = times[size] if 0 < size < len(times) else float("inf")
            seen = [r for r in records if r.time_s < cut]
            calibrations[size] = calibrate(seen, catalogue, profiled, by_demand=True)
            entry["interference"][str(size or len(times))] = calibrations[size].interference_scale
        for kind, specs in sorted(by_type.items()):
            errors = {"catalogue": grid_error(catalogue, cluster.speed, specs)}
            for size, calibration in calibrations.items():
                model = CalibratedSpeedModel(catalogue, calibration)
                errors[str(size or len(times))] = grid_error(model, cluster.speed, specs)
            entry["types"][kind] = {"jobs": len(specs), "new": kind not in catalogue.fits, "error": errors}
            rows.append([name, kind + (" (new)" if kind not in catalogue.fits else ""), str(len(specs)),
                         *(f"{100 * v:.1f}%" for v in errors.values())])  # fmt: skip
        truth = cluster.truth
        rows.append([name, "interference scale", f"truth {truth.interference_scale:g}", "1",
                     *(f"{v:.2f}" for v in entry["interference"].values())])  # fmt: skip
        results["truths"][name] = entry
    print_table(
        f"speed error against the truth over {len(GRID)} allocations: catalogue, then calibrated from the records "
        f"of the first N slots (DRF deciding, synthetic-philly seed {args.seed}, {args.jobs} jobs, {args.nodes} "
        "servers)",
        ["truth", "job type", "jobs", "catalogue", *(f"{n or 'all'} slots" for n in sizes)],
        rows,
    )
    print(f"wrote {write_json(args.out, results)}")


if __name__ == "__main__":
    main()
