"""Error of Harmony's speed model and of the linear interference model on held-out placements.

Both models were fitted on the same logged samples (`dl2 train-speed-model`; the linear coefficients are kept in
the model's config.json). Held out here, never trained on:

- synthetic workloads at the training size and source, other seeds (`--synthetic-seeds`), under every allocation
  policy and placer of the training logs;
- the Philly week (seed 0, 352 servers: a cluster 4-10x the training ones), under DRF and Optimus (fitted) with
  load balancing, Tetris and bin packing;
- placements made by Harmony's learned placer (`--placer`), on the Philly week: the states it steers the cluster
  into, which no heuristic's log holds.

The error of a sample is |predicted - observed| / observed, the observed speed being the progress the simulator
reported over a whole slot at one placement (5% speed noise included: a perfect model would show ~2.5%).

    .venv/bin/python benchmarks/speed_model_error.py [--model models/harmony-speed] [--placer models/harmony-placer]

Prints a table and writes `benchmarks/results/speed_model_error.json`.
"""

from __future__ import annotations

import argparse
import multiprocessing
from pathlib import Path
from typing import Any

import numpy as np
from common import environment, print_table, project_path, write_json

from dl2.placement.linear import LinearInterferenceModel
from dl2.placement.samples import LoggedRun, SpeedSamples, log_samples, relative_errors
from dl2.placement.speed_model import NumpySpeedModel

EVERY = 3


def samples_of(run: LoggedRun) -> SpeedSamples:
    return log_samples(run, 0, EVERY)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("models/harmony-speed"))
    parser.add_argument("--placer", default="models/harmony-placer", help="a Harmony placer folder ('' to skip)")
    parser.add_argument("--synthetic-seeds", default="300")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    import json

    document = json.loads((args.model / "config.json").read_text())
    data = document["metadata"]["data"]
    network = NumpySpeedModel.from_dir(args.model)
    linear = LinearInterferenceModel.from_list(document["metadata"]["linear_coefficients"])
    trained_seeds = set(data["seeds"]) | set(data["held_out_seeds"])
    synthetic_seeds = [int(s) for s in args.synthetic_seeds.split(",")]
    if trained_seeds & set(synthetic_seeds):
        raise SystemExit("--synthetic-seeds overlap the model's training or held-out seeds")
    sets: dict[str, list[LoggedRun]] = {
        "synthetic (held-out seeds)": [
            LoggedRun(source, seed, scheduler, placer)
            for source in data["sources"]
            for seed in synthetic_seeds
            for scheduler in data["schedulers"]
            for placer in data["placers"]
        ],
        "Philly week": [
            LoggedRun("philly", 0, scheduler, placer)
            for scheduler in ("drf", "optimus-fitted")
            for placer in ("load-balance", "tetris", "binpack")
        ],
    }
    if args.placer:
        sets["Philly week, Harmony's placements"] = [
            LoggedRun("philly", 0, scheduler, args.placer) for scheduler in ("drf", "optimus-fitted")
        ]
    runs = [run for group in sets.values() for run in group]
    with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
        logged = dict(zip(runs, pool.map(samples_of, runs, chunksize=1), strict=True))
    rows, report = [], {}
    for name, group in sets.items():
        for key, selected in _breakdown(group):
            samples = SpeedSamples.concatenate([logged[run] for run in selected])
            errors = {
                "network": relative_errors(network.log_throughput(samples.encoded), samples.log_throughput),
                "linear": relative_errors(linear.log_throughput(samples.encoded), samples.log_throughput),
            }
            entry: dict[str, Any] = {
                m: {"mean": float(e.mean()), "p90": float(np.quantile(e, 0.9))} for m, e in errors.items()
            }
            entry["samples"] = len(samples)
            report[f"{name} / {key}"] = entry
            rows.append(
                [
                    name,
                    key,
                    f"{entry['network']['mean']:.1%}",
                    f"{entry['linear']['mean']:.1%}",
                    f"{entry['network']['p90']:.1%}",
                    f"{len(samples):,}",
                ]
            )
    columns = ["held-out set", "runs", "network MRE", "linear MRE", "network p90", "samples"]
    print_table("Speed prediction: mean relative error on held-out placements", columns, rows)
    write_json(
        "speed_model_error.json",
        {"environment": environment(), "model": project_path(args.model), "placer": args.placer, "errors": report},
    )


def _breakdown(runs: list[LoggedRun]) -> list[tuple[str, list[LoggedRun]]]:
    """All runs of a set, then per placer."""
    parts = [("all", runs)]
    for placer in dict.fromkeys(run.placer for run in runs):
        label = Path(placer).name if "/" in placer else placer
        parts.append((label, [run for run in runs if run.placer == placer]))
    return parts


if __name__ == "__main__":
    main()
