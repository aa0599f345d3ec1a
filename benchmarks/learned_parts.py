"""What each learned part adds: an ablation of the full system, one part at a time, on shifted truths and drawn ones.

Per cell (a truth, an arrival density and a seed: `synthetic-philly`'s first `--jobs` jobs on its first `--nodes`
servers, as `benchmarks/per_job_fit.py` plays them, realistic mode, the simulation seeded like the workload) every
row is played under the truth. Every search is the one a model folder ships (`dl2.rl.lookahead.as_configured`:
Optimus the base, its continuations decided every slot for two slots and sparsely after). The parts:

- the network: the DL2 policy `--network` (`models/dl2-philly`), the search's third candidate;
- calibration: the world the search looks ahead in is the catalogue's calibrated from the decision records of
  the cluster's previous week (`benchmarks/truth_scenarios.calibrated_speed`: per type), corrected per job as
  each job's own progress accumulates (`dl2.rl.fitted_lookahead`);
- the learned placer: Harmony's `--learned-placer` (`models/harmony-placer-philly`), placing for every candidate.

Rows (each pair named in the summary differs in one part):

| row | search | world | network | placer |
|---|---|---|---|---|
| full system | yes | calibrated + per job | yes | learned |
| without the per-job fit | yes | calibrated | yes | learned |
| without calibration | yes | catalogue | yes | learned |
| without the network | yes | calibrated + per job | no | learned |
| network alone | no | - | yes | learned |
| full system, P | yes | calibrated + per job | yes | P (isolate-strict, binpack) |
| search, nothing learned, P | yes | catalogue | no | P |
| H, P | no | catalogue | no | P, for H in Optimus, `speedup-hull` |

The best placer of the rows with nothing learned is the one with the lower mean over all cells (one placer for
every cell, never picked per cell). Summaries, each a mean over cells of paired ratios with a 95% interval
(Student t over cells): the full system against the search with nothing learned on the shifted truths (every
truth but `catalogue`) and on `catalogue` (the control); what removing each part costs on the truths it targets
(calibration: every shifted truth; the network: all; the learned placer: the interference truths and the drawn
ones); the network alone against the full system.

    .venv/bin/python benchmarks/learned_parts.py [--truths catalogue,speed-shift,...,seed-1,...,seed-6]
        [--densities 1,2 --seeds 9100,9101,9102 --jobs 150 --nodes 12]

Prints a table per density and the summary, and writes `benchmarks/results/learned_parts.json`.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from common import environment, print_table, write_json
from tqdm import tqdm
from truth_scenarios import calibrated_speed, philly_like

from dl2.core import Scheduler
from dl2.resolve import placer_factory, scheduler_builder
from dl2.rl.fitted_lookahead import make_fitted_lookahead
from dl2.rl.lookahead import SPARSE_GROWTH, LookaheadScheduler, make_lookahead
from dl2.sim.config import Mode, SimConfig
from dl2.sim.metrics import mean_ci95, summarize
from dl2.sim.run import World, interference_model
from dl2.truth.realise import realise
from dl2.truth.run import run_on
from dl2.truth.scenarios import truth_named
from dl2.workload.speed import SpeedModel

ROOT = Path(__file__).resolve().parent.parent
NETWORK = str(ROOT / "models" / "dl2-philly")
LEARNED_PLACER = str(ROOT / "models" / "harmony-placer-philly")
PLAIN_PLACERS = ("isolate-strict", "binpack")
HEURISTICS = ("optimus", "speedup-hull")
HORIZON_SLOTS = 2
"""The shipped search's horizon (`online.twin.lookahead_horizon_slots` in params.yaml), sparse past it."""
NAMED = "catalogue,speed-shift,new-types,interference-2x,scaling-knee"
"""`dense-arrivals` is left out: its one departure is the density, which every cell sets."""
DRAWN = ",".join(f"seed-{seed}" for seed in range(1, 7))
INTERFERENCE_TRUTHS = ("interference-2x",)

FULL = "full system"
NO_JOB_FIT = "without the per-job fit"
NO_RESCALE_FIT = "without the learned resize cost"
NO_CALIBRATION = "without calibration"
NO_NETWORK = "without the network"
NETWORK_ALONE = "network alone"


def full_placer(placer: str) -> str:
    return f"full system, {placer}"


def nothing_learned(placer: str) -> str:
    return f"search, nothing learned, {placer}"


def heuristic_row(name: str, placer: str) -> str:
    return f"{name}, {placer}"


def row_labels() -> list[str]:
    """The rows in the order the tables print them (`rows_of`'s)."""
    labels = [FULL, NO_RESCALE_FIT, NO_JOB_FIT, NO_CALIBRATION, NO_NETWORK, NETWORK_ALONE]
    for placer in PLAIN_PLACERS:
        labels += [full_placer(placer), nothing_learned(placer), *(heuristic_row(h, placer) for h in HEURISTICS)]
    return labels


def search(candidates: str, speed: SpeedModel, placer: str, fitted: bool, learn_rescale: bool = True) -> Scheduler:
    """The shipped search over `candidates` (heuristics and model folders joined by '+'), placing with `placer`, in
    the world of `speed` (corrected per job when `fitted`) with the catalogue's interference."""
    world = World(speed, interference_model())
    config = SimConfig.realistic()
    if fitted:
        make_placer = placer_factory(placer)
        assert make_placer is not None
        policy = lambda name: scheduler_builder(name, placer, Mode.REALISTIC)(speed, False)  # noqa: E731
        return make_fitted_lookahead(
            candidates, world, config, make_placer, HORIZON_SLOTS, "sparse", SPARSE_GROWTH, policy, learn_rescale
        )
    build = lambda name: scheduler_builder(name, placer, Mode.REALISTIC)(speed, False)  # noqa: E731
    return make_lookahead("lookahead:" + candidates, build, world, config, HORIZON_SLOTS, "sparse", SPARSE_GROWTH)


def rows_of(calibrated: SpeedModel, network: str, learned_placer: str) -> dict[str, Any]:
    """Row -> a builder of its scheduler from the speeds `run_on` hands it (the catalogue's)."""
    with_network = f"optimus+speedup-hull+{network}"
    rows: dict[str, Any] = {
        FULL: lambda speed, compat: search(with_network, calibrated, learned_placer, True),
        NO_RESCALE_FIT: lambda speed, compat: search(with_network, calibrated, learned_placer, True, False),
        NO_JOB_FIT: lambda speed, compat: search(with_network, calibrated, learned_placer, False),
        NO_CALIBRATION: lambda speed, compat: search(with_network, speed, learned_placer, False),
        NO_NETWORK: lambda speed, compat: search("optimus+speedup-hull", calibrated, learned_placer, True),
        NETWORK_ALONE: scheduler_builder(network, learned_placer, Mode.REALISTIC),
    }
    for placer in PLAIN_PLACERS:
        rows[full_placer(placer)] = lambda speed, compat, p=placer: search(with_network, calibrated, p, True)
        rows[nothing_learned(placer)] = lambda speed, compat, p=placer: search("optimus+speedup-hull", speed, p, False)
        for name in HEURISTICS:
            rows[heuristic_row(name, placer)] = scheduler_builder(name, placer, Mode.REALISTIC)
    return rows


def run_cell(task: tuple[str, float, int, int, int, str, str, tuple[str, ...]]) -> dict[str, Any]:
    truth_name, density, seed, num_jobs, num_nodes, network, learned_placer, only = task
    truth = replace(truth_named(truth_name), arrival_density=density)
    cluster = realise(truth, philly_like(seed, num_jobs, num_nodes))
    calibrated = calibrated_speed(truth_name, seed, num_jobs, num_nodes)
    hours: dict[str, float] = {}
    seconds: dict[str, float] = {}
    decided: dict[str, dict[str, float]] = {}
    for label, build in rows_of(calibrated, network, learned_placer).items():
        if only and label not in only:
            continue
        built: list[Scheduler] = []

        def keep(speed: SpeedModel, compat: bool, build: Any = build, built: list[Scheduler] = built) -> Scheduler:
            built.append(build(speed, compat))
            return built[-1]

        started = time.perf_counter()
        result = run_on(cluster, keep, SimConfig.realistic(seed=seed))
        hours[label] = summarize(result).avg_jct_s / 3600
        seconds[label] = time.perf_counter() - started
        if isinstance(built[-1], LookaheadScheduler):
            shares = built[-1].decided_shares()
            decided[label] = {"contested": built[-1].contested, **shares}
    return {
        "truth": truth_name, "density": density, "seed": seed, "avg_jct_h": hours, "seconds": seconds,
        "decided": decided,
    }  # fmt: skip


def paired(cells: list[dict[str, Any]], row: str, against: str) -> dict[str, Any]:
    """Mean over `cells` of row / against - 1, its 95% half-width and the cells' count."""
    ratios = [cell["avg_jct_h"][row] / cell["avg_jct_h"][against] - 1 for cell in cells]
    if not ratios:
        return {"mean": None, "ci95": None, "cells": 0}
    mean, half = mean_ci95(ratios)
    return {"mean": mean, "ci95": half, "cells": len(ratios)}


def best_plain_placer(cells: list[dict[str, Any]]) -> str:
    """The plain placer whose search with nothing learned has the lower mean JCT over all cells."""
    return min(PLAIN_PLACERS, key=lambda p: sum(c["avg_jct_h"][nothing_learned(p)] for c in cells))


def with_best_heuristic(cell: dict[str, Any], placer: str) -> dict[str, Any]:
    """`cell` with a row "best heuristic": the lower of the heuristics placing with `placer` in that cell."""
    best = min(cell["avg_jct_h"][heuristic_row(name, placer)] for name in HEURISTICS)
    return {**cell, "avg_jct_h": {**cell["avg_jct_h"], "best heuristic": best}}


def summarise(cells: list[dict[str, Any]]) -> dict[str, Any]:
    placer = best_plain_placer(cells)
    baseline = nothing_learned(placer)
    shifted = [c for c in cells if c["truth"] != "catalogue"]
    control = [c for c in cells if c["truth"] == "catalogue"]
    interference = [c for c in cells if c["truth"] in INTERFERENCE_TRUTHS or c["truth"].startswith("seed-")]
    checkpoint = [c for c in cells if truth_named(c["truth"]).rescale is not None]
    return {
        "best_plain_placer": placer,
        "full_vs_nothing_learned_shifted": paired(shifted, FULL, baseline),
        "full_vs_nothing_learned_catalogue": paired(control, FULL, baseline),
        "removing_calibration_shifted": paired(shifted, NO_CALIBRATION, FULL),
        "removing_the_per_job_fit_shifted": paired(shifted, NO_JOB_FIT, FULL),
        "removing_the_learned_resize_cost_checkpoint": paired(checkpoint, NO_RESCALE_FIT, FULL),
        "removing_the_network": paired(cells, NO_NETWORK, FULL),
        "removing_the_learned_placer_interference": paired(interference, full_placer(placer), FULL),
        "learned_allocation_vs_nothing_learned_same_placer_shifted": paired(shifted, full_placer(placer), baseline),
        "network_alone_vs_full": paired(cells, NETWORK_ALONE, FULL),
        "nothing_learned_vs_best_heuristic": paired(
            [with_best_heuristic(c, placer) for c in cells], baseline, "best heuristic"
        ),
    }


def percent(entry: dict[str, Any]) -> str:
    if entry["mean"] is None:
        return "-"
    return f"{entry['mean']:+.1%} ± {entry['ci95']:.1%} ({entry['cells']} cells)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--truths", default=f"{NAMED},{DRAWN}", help="scenarios and seed-N, comma-separated")
    parser.add_argument("--densities", default="1,2", help="arrival densities, comma-separated (1: the workload's)")
    parser.add_argument("--seeds", default="9100,9101,9102", help="workload and simulation seeds")
    parser.add_argument("--jobs", type=int, default=150, help="first N jobs of each workload")
    parser.add_argument("--nodes", type=int, default=12, help="first N servers of the cluster")
    parser.add_argument("--network", default=NETWORK, help="the DL2 policy (a model folder)")
    parser.add_argument("--learned-placer", default=LEARNED_PLACER, help="Harmony's placer (a model folder)")
    parser.add_argument("--processes", type=int, default=2, help="cells run in parallel")
    parser.add_argument("--out", default="learned_parts.json", help="file name under benchmarks/results/")
    parser.add_argument("--from-json", help="summarise the cells of an earlier run's JSON instead of running them")
    parser.add_argument(
        "--rows", default="", help="run only these rows (labels separated by ';'), the others taken from --merge"
    )
    parser.add_argument("--merge", help="an earlier run's JSON whose cells give the rows not run (same cells)")
    args = parser.parse_args()
    if args.from_json:
        earlier = json.loads(Path(args.from_json).read_text())
        args = argparse.Namespace(**{**earlier["arguments"], "from_json": args.from_json})
        report(args, earlier["cells"], earlier["environment"])
        return
    only = tuple(label for label in args.rows.split(";") if label)
    unknown = [label for label in only if label not in row_labels()]
    if unknown or (only and not args.merge):
        parser.error(
            f"--rows takes labels of {row_labels()} and needs --merge" + (f" (unknown: {unknown})" * bool(unknown))
        )
    tasks = [
        (truth, float(density), int(seed), args.jobs, args.nodes, args.network, args.learned_placer, only)
        for truth in args.truths.split(",")
        for density in args.densities.split(",")
        for seed in args.seeds.split(",")
    ]
    with multiprocessing.get_context("fork").Pool(args.processes) as pool:
        cells = list(tqdm(pool.imap(run_cell, tasks, chunksize=1), total=len(tasks), desc="cells"))
    if args.merge:
        cells = merged(cells, json.loads(Path(args.merge).read_text())["cells"])
    report(args, cells, environment())


def merged(cells: list[dict[str, Any]], earlier: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each cell completed with the rows it did not run from the same cell (truth, density, seed) of `earlier`."""
    by_key = {(c["truth"], c["density"], c["seed"]): c for c in earlier}
    complete = []
    for cell in cells:
        old = by_key.get((cell["truth"], cell["density"], cell["seed"]))
        if old is None:
            raise SystemExit(f"--merge: no cell {cell['truth']} x{cell['density']:g} seed {cell['seed']} to merge")
        complete.append({
            **cell,
            "avg_jct_h": {**old["avg_jct_h"], **cell["avg_jct_h"]},
            "seconds": {**old["seconds"], **cell["seconds"]},
            "decided": {**old["decided"], **cell["decided"]},
        })  # fmt: skip
    return complete


def report(args: argparse.Namespace, cells: list[dict[str, Any]], measured_on: dict[str, Any]) -> None:
    """Prints the tables and the summary of `cells` and writes them with `args` to `args.out`."""
    labels = row_labels()
    for density in sorted({c["density"] for c in cells}):
        group = [c for c in cells if c["density"] == density]
        truths = list(dict.fromkeys(c["truth"] for c in group))
        table = []
        for label in labels:
            means = []
            for truth in truths:
                values = [c["avg_jct_h"][label] for c in group if c["truth"] == truth]
                means.append(f"{sum(values) / len(values):.3f}")
            table.append([label, *means])
        print_table(
            f"average JCT (h) under the truth, mean over seeds, arrivals {density:g}x, synthetic-philly's first "
            f"{args.jobs} jobs on {args.nodes} servers",
            ["row", *truths], table,
        )  # fmt: skip
    summary = summarise(cells)
    print_table(
        f"what each part adds (paired by cell; nothing learned places with {summary['best_plain_placer']})",
        ["comparison", "mean ± 95% interval"],
        [[key.replace("_", " "), percent(entry)] for key, entry in summary.items() if isinstance(entry, dict)],
    )  # fmt: skip
    shares: dict[str, list[float]] = {}
    for cell in cells:
        for label, share in cell["decided"].get(FULL, {}).items():
            shares.setdefault(label, []).append(float(share))
    print("full system, contested slots and share each candidate decided (mean over cells):")
    for label, values in shares.items():
        print(f"  {label}: {sum(values) / len(values):.3g}")
    arguments = {key: value for key, value in vars(args).items() if key != "from_json"}
    path = write_json(args.out, {"arguments": arguments, "environment": measured_on, "cells": cells,
                                 "summary": summary})  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
