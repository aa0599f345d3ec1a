"""How well one week of a mixed cluster's decision records calibrates each job type's speed on each accelerator type.

A Philly-like cluster of three GPU generations (`synthetic-philly`, seeds 9100-9102, the first `--jobs` jobs on the
first `--nodes` servers made K80, P100 and V100 by `with_generations`) is played under each truth (by default
`accelerator-affinity`, whose language models and CNNs gain from each type otherwise than the catalogue says, and
the drawn `seed-1`, whose every GPU model's speed on every type is off by a log-normal factor) with DRF deciding, as
a shadow-mode controller records it (`dl2.placement.samples.record_run`, as `benchmarks/truth_scenarios.py`'s
previous week). The records of the first `--days` simulated days are calibrated (`dl2.workload.calibration`, split
by the pods' demands as `truth_scenarios.py` calibrates), and for each (true job type, accelerator type) pair the
calibrated factor on the computation's speed there over the catalogue's (speedup / computation factor, which a
`CalibratedSpeedModel` plays on the cluster) is compared with the truth's (its per-type speedup over its computation
shift). Each job's factor is its calibration's (1 where its type was not kept: the catalogue); a pair's is the mean
over its records. Records: the steady records of the pair's jobs with every worker on that type (the only ones a
per-type factor is fitted to; `mixed` counts the steady records left out because their workers sat on several).

Reported per pair: records, the true factor, the calibrated one and its relative error, and the catalogue's (factor
1); then the median error over the pairs with at least `--min-records` records, against the bar of 10% (issue 52).

    .venv/bin/python benchmarks/accelerator_calibration.py [--truths accelerator-affinity,seed-1 --seeds 9100,9101,9102]

Prints a table and writes `benchmarks/results/accelerator_calibration.json`.
"""

from __future__ import annotations

import argparse
import multiprocessing
from collections import defaultdict
from typing import Any

import numpy as np
from common import environment, print_table, write_json
from truth_scenarios import mixed_philly

from dl2.core import ClusterSpec, JobAllocation, JobSpec
from dl2.placement.samples import record_run
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import SimConfig
from dl2.sim.run import catalogue_speed
from dl2.truth import realise, truth_named
from dl2.workload.accelerated_speed import on_accelerators
from dl2.workload.calibration import CalibratedSpeedModel, calibrate, steady_measurements, worker_accelerator
from dl2.workload.catalogue import CATALOGUE
from dl2.workload.interference import InterferenceModel
from dl2.workload.speed import SpeedModel
from dl2.workload.speed_fit import ShiftedSpeedModel

BAR = 0.10
"""Issue 52 §5: the median relative error of the per-(model, accelerator) speed over the pairs with enough records."""
DAY_S = 86400.0
GRID = [(w, p) for w in (1, 2, 4, 8) for p in (1, 2, 4, 8)]
"""(workers, parameter servers) at which a pair's speed is compared with the truth's (`benchmarks/calibration.py`'s)."""
COLUMNS = ["truth", "job type", "accelerator", "records per seed", "true", "calibrated", "error", "catalogue's error",
           "speed error", "catalogue's speed error"]  # fmt: skip
MEANS = ("true", "calibrated", "error", "catalogue_error", "speed_error", "catalogue_speed_error")
ERRORS = {
    "error": "factor error",
    "catalogue_error": "the catalogue's",
    "speed_error": "speed error",
    "catalogue_speed_error": "the catalogue's",
}


def computation_factor(speed: ShiftedSpeedModel, spec: JobSpec, accelerator: str) -> float:
    """How many times as fast `spec`'s computation runs on `accelerator` as the catalogue says there: its speedup
    there over its computation factor (`dl2.workload.accelerated_speed` plays c / speedup on the computation)."""
    _, factors = speed.job_factors(spec)
    compute = 1.0 if factors is None else factors[0]
    _, speedups = speed.accelerator_speedups(spec)  # type: ignore[attr-defined]
    return speedups.get(accelerator, 1.0) / compute


def type_grid(cluster: ClusterSpec, accelerator: str) -> list[JobAllocation]:
    """`GRID`'s allocations with every worker and parameter server on the cluster's servers of `accelerator`, in
    turn (a job alone there: no neighbours)."""
    nodes = [i for i, node in enumerate(cluster.nodes) if node.accelerator and node.accelerator.name == accelerator]
    return [
        JobAllocation(
            tuple(nodes[i % len(nodes)] for i in range(w)), tuple(nodes[(w + i) % len(nodes)] for i in range(p))
        )
        for w, p in GRID
    ]


def speed_error(model: SpeedModel, truth: SpeedModel, specs: list[JobSpec], grid: list[JobAllocation]) -> float:
    """Mean relative error of `model`'s speed against the truth's over `grid`, for each of `specs`."""
    return float(
        np.mean([abs(model.placed_throughput(s, a) / truth.placed_throughput(s, a) - 1.0) for s in specs for a in grid])
    )


def run_cell(task: tuple[str, int, int, int, float]) -> dict[str, Any]:
    """(truth, seed, jobs, nodes, days) -> the cell's pairs and what its calibration kept."""
    truth_name, seed, num_jobs, num_nodes, days = task
    cluster = realise(truth_named(truth_name), mixed_philly(seed, num_jobs, num_nodes))
    catalogue = catalogue_speed()
    config = cluster.config(SimConfig.realistic(seed=seed))
    records = record_run(
        cluster.workload, make_scheduler("drf", catalogue, False), config, cluster.speed, cluster.interference
    )
    week = [r for r in records if r.time_s < days * DAY_S]
    calibration = calibrate(week, catalogue, InterferenceModel(), by_demand=True)
    calibrated = CalibratedSpeedModel(catalogue, calibration)
    spec_of = {job.spec.job_id: job.spec for job in cluster.workload.jobs}
    pairs: dict[tuple[str, str], list[JobSpec]] = defaultdict(list)
    for m in steady_measurements(week):
        accelerator = worker_accelerator(m.record)
        spec = spec_of[m.record.job_id]
        # a new type's factors are on its base's profile, the calibration's on the label it was submitted under:
        # not the same quantity, so its pairs are left out
        if accelerator and m.record.worker_gpu > 0 and cluster.type_of(spec) in CATALOGUE:
            pairs[(cluster.type_of(spec), accelerator)].append(spec)
    cell: dict[str, Any] = {
        "truth": truth_name,
        "seed": seed,
        "records": len(week),
        "slots": len({r.time_s for r in week}),
        "mixed_type_records": calibration.mixed_type_records,
        "types_kept": sorted("/".join(str(p) for p in key) for key in calibration.types),
        "pairs": {},
    }
    typed = cluster.workload.cluster
    truth_speed, catalogue_speed_there = on_accelerators(cluster.speed, typed), on_accelerators(catalogue, typed)
    calibrated_speed = on_accelerators(calibrated, typed)
    for (kind, accelerator), specs in sorted(pairs.items()):
        true = float(np.mean([computation_factor(cluster.speed, s, accelerator) for s in specs]))
        fitted = float(np.mean([computation_factor(calibrated, s, accelerator) for s in specs]))
        jobs = list({s.job_id: s for s in specs}.values())
        grid = type_grid(typed, accelerator)
        cell["pairs"][f"{kind}@{accelerator}"] = {
            "type": kind,
            "accelerator": accelerator,
            "records": len(specs),
            "jobs": len(set(s.job_id for s in specs)),
            "true": true,
            "calibrated": fitted,
            "error": abs(fitted / true - 1.0),
            "catalogue_error": abs(1.0 / true - 1.0),
            "speed_error": speed_error(calibrated_speed, truth_speed, jobs, grid),
            "catalogue_speed_error": speed_error(catalogue_speed_there, truth_speed, jobs, grid),
        }
    return cell


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--truths", default="accelerator-affinity,seed-1", help="truths, comma-separated")
    parser.add_argument("--seeds", default="9100,9101,9102", help="workload and simulation seeds")
    parser.add_argument("--jobs", type=int, default=300, help="first N jobs of each workload")
    parser.add_argument("--nodes", type=int, default=24, help="first N servers, made three generations")
    parser.add_argument("--days", type=float, default=7.0, help="simulated days of records calibrated")
    parser.add_argument("--min-records", type=int, default=20, help="pairs counted in the median")
    parser.add_argument("--workers", type=int, default=1, help="processes")
    parser.add_argument("--out", default="accelerator_calibration.json", help="file name under benchmarks/results/")
    args = parser.parse_args()
    truths = args.truths.split(",")
    seeds = [int(seed) for seed in args.seeds.split(",")]
    tasks = [(truth, seed, args.jobs, args.nodes, args.days) for truth in truths for seed in seeds]
    if args.workers > 1:
        with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
            cells = pool.map(run_cell, tasks)
    else:
        cells = [run_cell(task) for task in tasks]
    rows = []
    summary: dict[str, Any] = {}
    for truth in [*truths, "all"]:
        mine = [cell for cell in cells if truth in ("all", cell["truth"])]
        by_pair: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for cell in mine:
            for name, pair in cell["pairs"].items():
                by_pair[name].append(pair)
        for entries in sorted(by_pair.values(), key=lambda pairs: (pairs[0]["type"], pairs[0]["accelerator"])):
            if truth == "all":
                break
            mean = {key: float(np.mean([p[key] for p in entries])) for key in MEANS}
            rows.append(
                [
                    truth,
                    entries[0]["type"],
                    entries[0]["accelerator"],
                    "/".join(str(p["records"]) for p in entries),
                    f"{mean['true']:.2f}",
                    f"{mean['calibrated']:.2f}",
                    f"{100 * mean['error']:.1f}%",
                    f"{100 * mean['catalogue_error']:.1f}%",
                    f"{100 * mean['speed_error']:.1f}%",
                    f"{100 * mean['catalogue_speed_error']:.1f}%",
                ]
            )
        counted = [p for cell in mine for p in cell["pairs"].values() if p["records"] >= args.min_records]
        summary[truth] = {
            "pairs_counted": len(counted),
            **{f"median_{key}": float(np.median([p[key] for p in counted])) if counted else None for key in ERRORS},
            "mixed_type_records": sum(cell["mixed_type_records"] for cell in mine),
            "steady_typed_records": sum(p["records"] for cell in mine for p in cell["pairs"].values()),
        }
    print_table(
        f"computation speed on each accelerator type over the catalogue's (true, calibrated, their error and the "
        f"catalogue's) and the speed's error over {len(GRID)} allocations on that type, calibrated and catalogue: "
        f"{args.days:g} simulated days of records (DRF deciding; synthetic-philly seeds {args.seeds}, {args.jobs} "
        f"jobs on {args.nodes} servers of K80/P100/V100); means over the seeds",
        COLUMNS,
        rows,
    )
    for truth, entry in summary.items():
        medians = ", ".join(f"{name} {100 * (entry[f'median_{key}'] or 0):.1f}%" for key, name in ERRORS.items())
        print(
            f"{truth}: medians over the {entry['pairs_counted']} (pair, seed) with >= {args.min_records} records: "
            f"{medians} (bar {100 * BAR:.0f}%); {entry['mixed_type_records']} steady records on several types "
            f"left out, {entry['steady_typed_records']} on one"
        )
    results = {"environment": environment(), "arguments": vars(args), "bar": BAR, "summary": summary, "cells": cells}
    print(f"wrote {write_json(args.out, results)}")


if __name__ == "__main__":
    main()
