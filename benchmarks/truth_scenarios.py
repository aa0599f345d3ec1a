"""Clusters whose truth departs from the catalogue: how far each scheduler that reads the catalogue falls from the
same heuristics reading the truth, before any learning from feedback.

Each scenario (`dl2.truth`: `catalogue` is the no-shift control) is played on Philly-like workloads
(`synthetic-philly`, seeds 9100-9102, the first `--jobs` jobs on the first `--nodes` servers; none of them was
used to train a shipped model), realistic mode, the simulation seeded like the workload. Rows:

- the champion `models/dl2-philly` (the shipped DL2 policy; it reads the catalogue through its state);
- the heuristics a deployment can run: DRF, Tiresias (the jobs' asked sizes), Optimus and `speedup-hull` on the
  catalogue's speeds, and `optimus-fitted` (its own online fit of each job's observed progress);
- `calibrated`: the best of Optimus and `speedup-hull` reading the speeds calibrated from the decision records of
  the cluster's previous week (`dl2.workload.calibration`; the workload of seed + 500 under the same truth, DRF
  deciding as in shadow mode), which a deployment can have;
- `heuristics reading the truth`: the best of Optimus and `speedup-hull` handed the truth's speeds and the jobs'
  true types, which no deployment has. Not a ceiling: heuristics that know the speeds still decide as heuristics
  (`benchmarks/loop_scenarios.py`'s learned policy beats them in most of its cells).

Reported: mean average JCT over the seeds with a 95% confidence interval (Student t), and each row against the
heuristics reading the truth. What the closed loop learns from the cluster's records is to be measured against
these rows.

    .venv/bin/python benchmarks/truth_scenarios.py [--jobs 300 --nodes 24 --seeds 9100,9101,9102]

Prints a table and writes `benchmarks/results/truth_scenarios.json`.
"""

from __future__ import annotations

import argparse
import multiprocessing
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from common import environment, print_table, write_json

from dl2.core import DecisionRecord, Scheduler, Workload
from dl2.placement.samples import record_run
from dl2.resolve import scheduler_builder
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import Mode, SimConfig
from dl2.sim.metrics import mean_ci95, summarize
from dl2.sim.run import catalogue_speed
from dl2.truth import SCENARIOS, realise, truth_named
from dl2.truth.run import run_on
from dl2.workload.accelerators import with_generations
from dl2.workload.calibration import CalibratedSpeedModel, calibrate
from dl2.workload.interference import InterferenceModel
from dl2.workload.synthetic import PRESETS, generate
from testbed.twin.workloads import first_jobs, first_nodes

ROOT = Path(__file__).resolve().parent.parent
CHAMPION = str(ROOT / "models" / "dl2-philly")
HEURISTICS = ("drf", "tiresias", "optimus", "speedup-hull", "optimus-fitted")
SPEED_HEURISTICS = ("optimus", "speedup-hull")
"""The heuristics that decide from a speed model: their best, handed the calibrated speeds or the truth's, is the
calibrated row and the row of the heuristics reading the truth."""
TRUTH_HEURISTICS_ROW = "heuristics reading the truth"
"""The best of SPEED_HEURISTICS handed the truth's speeds and the jobs' true types (`dl2.truth.run.run_on`'s
`oracle`): what no deployment can know, given to heuristics; not an optimum, nor a ceiling for a learned policy."""


def philly_like(seed: int, num_jobs: int, num_nodes: int) -> Workload:
    workload = generate(replace(PRESETS["synthetic-philly"], num_jobs=max(num_jobs, 1)), seed, "synthetic-philly")
    return first_nodes(first_jobs(workload, num_jobs), num_nodes)


def mixed_philly(seed: int, num_jobs: int, num_nodes: int) -> Workload:
    """`philly_like`, its servers made three generations (K80, P100, V100: `with_generations`)."""
    workload = philly_like(seed, num_jobs, num_nodes)
    return replace(workload, cluster=with_generations(workload.cluster), name=f"{workload.name}+generations")


WorkloadOf = Callable[[int, int, int], Workload]
"""(seed, jobs, servers) -> a workload: `philly_like` or `mixed_philly`."""


def week_records(
    truth_name: str, seed: int, num_jobs: int, num_nodes: int, workload_of: WorkloadOf, scheduler: Scheduler
) -> tuple[Workload, list[DecisionRecord]]:
    """The workload of `seed` under the truth as it was submitted, and its decision records with `scheduler`
    deciding (every record an observation of the truth, as a controller logs them)."""
    week = realise(truth_named(truth_name), workload_of(seed, num_jobs, num_nodes))
    config = week.config(SimConfig.realistic(seed=seed))
    return week.workload, record_run(week.workload, scheduler, config, week.speed, week.interference)


def as_one_log(weeks: Sequence[list[DecisionRecord]]) -> list[DecisionRecord]:
    """Several weeks' records as one cluster's log, as a controller that ran through them wrote it: each later week
    starts a day after the one before ends (its times and arrivals shifted), its job ids its own (`week<k>/<id>`:
    every week's workload numbers its jobs from 0)."""
    merged = list(weeks[0])
    start = max(record.time_s for record in merged) + 86_400.0
    for k, records in enumerate(weeks[1:], start=1):
        merged += [
            replace(r, time_s=r.time_s + start, arrival_s=r.arrival_s + start, job_id=f"week{k}/{r.job_id}")
            for r in records
        ]
        start += max(record.time_s for record in records) + 86_400.0
    return merged


def previous_week(
    truth_name: str, seed: int, num_jobs: int, num_nodes: int, workload_of: WorkloadOf = philly_like
) -> tuple[Workload, list[DecisionRecord]]:
    """The cluster's previous week (the workload of seed + 500 under the same truth) as it was submitted, and its
    decision records with DRF deciding, as a shadow-mode controller records them."""
    drf = make_scheduler("drf", catalogue_speed(), False)
    return week_records(truth_name, seed + 500, num_jobs, num_nodes, workload_of, drf)


@cache
def calibrated_speed(
    truth_name: str, seed: int, num_jobs: int, num_nodes: int, workload_of: WorkloadOf = philly_like
) -> CalibratedSpeedModel:
    """The speeds calibrated (per type, and per accelerator type on a mixed cluster) from the records of the
    cluster's previous week."""
    _, records = previous_week(truth_name, seed, num_jobs, num_nodes, workload_of)
    return CalibratedSpeedModel(catalogue_speed(), calibrate(records, catalogue_speed(), InterferenceModel(), True))


def run_cell(task: tuple[str, int, int, int, str, str]) -> tuple[str, int, str, str, float]:
    """(truth, seed, jobs, nodes, scheduler, reads) -> its average JCT in hours; `reads` is what the scheduler's
    speeds come from: the catalogue, the truth (what no deployment has) or the calibration."""
    truth_name, seed, num_jobs, num_nodes, scheduler, reads = task
    cluster = realise(truth_named(truth_name), philly_like(seed, num_jobs, num_nodes))
    build = scheduler_builder(scheduler, None, Mode.REALISTIC)
    if reads == "calibrated":
        speed = calibrated_speed(truth_name, seed, num_jobs, num_nodes)
        build = lambda _speed, compat: make_scheduler(scheduler, speed, compat)  # noqa: E731
    result = run_on(cluster, build, SimConfig.realistic(seed=seed), oracle=reads == "truth")
    return truth_name, seed, scheduler, reads, summarize(result).avg_jct_s / 3600


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--truths", default=",".join(SCENARIOS), help="scenarios or seed-N, comma-separated")
    parser.add_argument("--seeds", default="9100,9101,9102", help="workload and simulation seeds")
    parser.add_argument("--jobs", type=int, default=300, help="first N jobs of each workload")
    parser.add_argument("--nodes", type=int, default=24, help="first N servers of the cluster")
    parser.add_argument("--workers", type=int, default=2, help="processes")
    parser.add_argument("--out", default="truth_scenarios.json", help="file name under benchmarks/results/")
    args = parser.parse_args()
    truths = args.truths.split(",")
    seeds = [int(seed) for seed in args.seeds.split(",")]
    rows = [
        (CHAMPION, "catalogue"),
        *((name, "catalogue") for name in HEURISTICS),
        *((name, "calibrated") for name in SPEED_HEURISTICS),
        *((name, "truth") for name in SPEED_HEURISTICS),
    ]
    tasks = [(t, s, args.jobs, args.nodes, name, reads) for t in truths for s in seeds for name, reads in rows]
    with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
        cells = pool.map(run_cell, tasks, chunksize=1)
    jct = {(t, s, name, reads): hours for t, s, name, reads, hours in cells}
    results: dict[str, Any] = {"environment": environment(), "arguments": vars(args), "scenarios": {}}
    table = []
    for truth in truths:
        on_truth = np.array([min(jct[(truth, s, name, "truth")] for name in SPEED_HEURISTICS) for s in seeds])
        calibrated = np.array([min(jct[(truth, s, name, "calibrated")] for name in SPEED_HEURISTICS) for s in seeds])
        entries: dict[str, Any] = {}
        labelled = [("champion dl2-philly", CHAMPION), *((name, name) for name in HEURISTICS)]
        for label, name in labelled:
            values = np.array([jct[(truth, s, name, "catalogue")] for s in seeds])
            entries[label] = _summary(values, on_truth)
        entries["calibrated (best of optimus, speedup-hull on the records' speeds)"] = _summary(calibrated, on_truth)
        entries[f"{TRUTH_HEURISTICS_ROW} (best of optimus, speedup-hull)"] = _summary(on_truth, on_truth)
        results["scenarios"][truth] = entries
        for label, entry in entries.items():
            table.append(
                [truth, label, f"{entry['mean_h']:.3f} ± {entry['ci95_h']:.3f}", f"{entry['vs_truth_heuristics']:+.1%}"]
            )
    print_table(
        f"average JCT (h) on synthetic-philly's first {args.jobs} jobs on {args.nodes} servers, seeds {args.seeds}",
        ["truth", "scheduler", "avg JCT (h), 95% CI", f"vs {TRUTH_HEURISTICS_ROW}"],
        table,
    )
    print(f"wrote {write_json(args.out, results)}")


def _summary(values: np.ndarray, on_truth: np.ndarray) -> dict[str, Any]:
    mean, half = mean_ci95(list(values))
    return {
        "per_seed_h": [round(float(v), 4) for v in values],
        "mean_h": mean,
        "ci95_h": half,
        "vs_truth_heuristics": float(np.mean(values / on_truth) - 1.0),
    }


if __name__ == "__main__":
    main()
