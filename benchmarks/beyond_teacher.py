"""Does RL take a warm-up past its teacher? The teacher, its warmed-up student and that student after RL, on the
same workloads (compatibility mode, the authors' contended setting).

The teacher runs twice through the same `SlotDecision` the policy drives (`packed_requests.average_jct_slots`):
as asked (each request to the least-loaded server as it is made: the authors' environment, the same JCTs as
`dl2 compare`) and packed (what a student with `--packed` gets, so that packing is not mistaken for learning).
Validation: `authors-small` seeds 5000-5009 (the first five chose the RL checkpoint); test: the authors' 10
small workloads, never used for training or selection. A policy that starves a job on a workload scores inf.

    .venv/bin/python benchmarks/beyond_teacher.py [--teacher drf] [--models models/dl2-compat-drf,...] [--workers 2]

Prints a table and writes `benchmarks/results/beyond_teacher.json` (about 4 minutes on two cores).
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
from pathlib import Path
from typing import Any

import numpy as np
from common import environment, print_table, write_json
from packed_requests import WORKLOADS, average_jct_slots

from dl2.rl.learned import LearnedScheduler
from dl2.sim.config import Mode, SimConfig
from dl2.sim.run import speed_model
from dl2.sim.simulator import SimulationError, simulate
from dl2.workload.source import workload

DEFAULT_MODELS = "models/dl2-compat-drf,models/dl2-compat-drf-rl"


def avg_jct_slots(task: tuple[str, str, bool | None, str, int]) -> float:
    """`packed` None: `target` is a model folder; otherwise a teacher, asked as decided or packed."""
    _, target, packed, source, seed = task
    if packed is not None:
        return average_jct_slots((target, source, seed, packed))
    work = workload(source, seed)
    try:
        result = simulate(work, LearnedScheduler.from_dir(Path(target)), SimConfig.compat(), speed_model(Mode.COMPAT))
    except SimulationError:  # a job starved: the run cannot end
        return math.inf
    return float(np.mean([job.jct_s for job in result.jobs])) / work.slot_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", default="drf")
    parser.add_argument("--models", default=DEFAULT_MODELS, help="comma-separated model folders")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    rows: list[tuple[str, str, bool | None]] = [
        (f"{args.teacher}, as asked", args.teacher, False),
        (f"{args.teacher}, packed", args.teacher, True),
        *((Path(model).name, model, None) for model in args.models.split(",") if model),
    ]
    tasks = [
        (row, target, packed, source, seed)
        for row, target, packed in rows
        for source, seeds in WORKLOADS.values()
        for seed in seeds
    ]
    with multiprocessing.get_context("fork").Pool(args.workers) as pool:
        values = pool.map(avg_jct_slots, tasks, chunksize=1)
    results: dict[str, dict[str, Any]] = {}
    for row, *_ in rows:
        for split, (source, _) in WORKLOADS.items():
            per_workload = [v for t, v in zip(tasks, values, strict=True) if t[0] == row and t[3] == source]
            results.setdefault(row, {})[split] = {
                "avg_jct_slots": float(np.mean(per_workload)),
                "per_workload": per_workload,
            }
    packed_test = results[f"{args.teacher}, packed"]["test"]["avg_jct_slots"]
    header = ["policy", *(f"{split} (slots)" for split in WORKLOADS), "test vs teacher packed"]
    table = [
        [
            row,
            *(f"{results[row][split]['avg_jct_slots']:.2f}" for split in WORKLOADS),
            f"{results[row]['test']['avg_jct_slots'] / packed_test:.3f}",
        ]
        for row in results
    ]
    print_table(f"Beyond the teacher ({args.teacher}), average JCT, compatibility mode", header, table)
    path = write_json(
        "beyond_teacher.json",
        {
            "teacher": args.teacher,
            "workloads": {k: {"source": s, "seeds": v} for k, (s, v) in WORKLOADS.items()},
            "results": results,
        }
        | {"environment": environment()},
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
