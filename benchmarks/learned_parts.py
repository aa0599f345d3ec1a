"""What each learned part adds: an ablation of the full system, one part at a time, on shifted truths and drawn ones.

Per cell (a truth, an arrival density and a seed: `synthetic-philly`'s first `--jobs` jobs on its first `--nodes`
servers, as `benchmarks/per_job_fit.py` plays them, realistic mode, the simulation seeded like the workload) every
row is played under the truth. Every search is the one a model folder ships (`dl2.rl.lookahead.as_configured`:
Optimus the base, its continuations decided every slot for two slots and sparsely after). The parts:

- the network: the DL2 policy `--network` (`models/dl2-philly`), the search's third candidate;
- calibration: the world the search looks ahead in is the catalogue's calibrated from the decision records of
  the cluster's previous week (`benchmarks/truth_scenarios.calibrated_speed`: per type), corrected per job as
  each job's own progress accumulates (`dl2.rl.fitted_lookahead`), and the servers that progress shows slow
  spared by every placer (`dl2.workload.node_fit`);
- the learned placer: Harmony's `--learned-placer` (`models/harmony-placer-philly`), placing for every candidate.
  It is no part of the full system, which places with `isolate-strict` (`FULL_PLACER`): on every run of this
  benchmark the learned placer made the full system slower, not faster (row "full system, learned placer").

Rows (each pair named in the summary differs in one part):

| row | search | world | network | placer |
|---|---|---|---|---|
| full system | yes | calibrated + per job + slow servers | yes | isolate-strict |
| without the learned resize cost | yes | as the full system's, resizes at the run's cost | yes | isolate-strict |
| without the slow-server fit | yes | calibrated + per job, no servers spared | yes | isolate-strict |
| without the per-job fit | yes | calibrated | yes | isolate-strict |
| without calibration | yes | catalogue | yes | isolate-strict |
| without the network | yes | calibrated + per job + slow servers | no | isolate-strict |
| network alone | no | - | yes | isolate-strict |
| full system, learned placer | yes | calibrated + per job + slow servers | yes | learned |
| full system, binpack | yes | calibrated + per job + slow servers | yes | binpack |
| search, nothing learned, P | yes | catalogue | no | P (isolate-strict, binpack) |
| H, P | no | catalogue | no | P, for H in Optimus, `speedup-hull` |
| search reading the truth, isolate-strict | yes | the truth (speeds, interference, types) | no | isolate-strict |

The best placer of the rows with nothing learned is the one with the lower mean over all cells (one placer for
every cell, never picked per cell); so is the full system's (of isolate-strict, the learned placer and binpack).
Summaries, each a mean over cells of paired ratios with a 95% interval (Student t over cells): the full system
against the search with nothing learned, each with its best placer, on the shifted truths (every truth but
`catalogue`) and on `catalogue` (the control); what removing each part costs on the truths it targets (calibration:
every shifted truth; the slow-server fit: the truths with slow servers; the network: all); the learned placer
instead of isolate-strict on the interference truths and the drawn ones; the network alone against the full
system; the search reading the truth against the same search with nothing learned (the most a learned world could
add to it).

    .venv/bin/python benchmarks/learned_parts.py [--truths catalogue,speed-shift,...,drawn-1,...,drawn-6]
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
from dl2.rl.lookahead import SPARSE_GROWTH, LookaheadScheduler, load_policy, make_lookahead
from dl2.schedulers.registry import make_scheduler
from dl2.schedulers.slow_nodes import SparingSlowNodes
from dl2.sim.config import Mode, SimConfig
from dl2.sim.metrics import mean_ci95, summarize
from dl2.sim.run import World, interference_model
from dl2.truth.realise import TrueCluster, realise
from dl2.truth.run import run_on
from dl2.truth.scenarios import truth_named
from dl2.workload.interference import InterferenceModel
from dl2.workload.speed import SpeedModel

ROOT = Path(__file__).resolve().parent.parent
NETWORK = str(ROOT / "models" / "dl2-philly")
LEARNED_PLACER = str(ROOT / "models" / "harmony-placer-philly")
PLAIN_PLACERS = ("isolate-strict", "binpack")
FULL_PLACER = "isolate-strict"
"""The full system's placer (the module docstring says why it is not the learned one)."""
HEURISTICS = ("optimus", "speedup-hull")
HORIZON_SLOTS = 2
"""The shipped search's horizon (`online.twin.lookahead_horizon_slots` in params.yaml), sparse past it."""
NAMED = "catalogue,speed-shift,new-types,interference-2x,interference-pairs,scaling-knee,slow-nodes"
"""`dense-arrivals` is left out: its one departure is the density, which every cell sets."""
DRAWN = ",".join(f"drawn-{seed}" for seed in range(1, 7))
"""Truths drawn with every departure (`dl2.truth.draw`)."""
INTERFERENCE_TRUTHS = ("interference-2x", "interference-pairs")

FULL = "full system"
NO_JOB_FIT = "without the per-job fit"
NO_RESCALE_FIT = "without the learned resize cost"
NO_CALIBRATION = "without calibration"
NO_NODE_FIT = "without the slow-server fit"
NO_NETWORK = "without the network"
NETWORK_ALONE = "network alone"
WITH_LEARNED_PLACER = "full system, learned placer"
READING_THE_TRUTH = "search reading the truth, isolate-strict"
"""The search with nothing learned, looking ahead in the truth itself (its speeds, interference and job types, which
no deployment has): how much any learned world could add to this search, on these truths."""


def full_placer(placer: str) -> str:
    return f"full system, {placer}"


def nothing_learned(placer: str) -> str:
    return f"search, nothing learned, {placer}"


def heuristic_row(name: str, placer: str) -> str:
    return f"{name}, {placer}"


def row_labels() -> list[str]:
    """The rows in the order the tables print them (`rows_of`'s)."""
    labels = [FULL, NO_RESCALE_FIT, NO_NODE_FIT, NO_JOB_FIT, NO_CALIBRATION, NO_NETWORK, NETWORK_ALONE]
    labels += [WITH_LEARNED_PLACER, *(full_placer(p) for p in PLAIN_PLACERS if p != FULL_PLACER)]
    for placer in PLAIN_PLACERS:
        labels += [nothing_learned(placer), *(heuristic_row(h, placer) for h in HEURISTICS)]
    return [*labels, READING_THE_TRUTH]


def search(
    candidates: str,
    speed: SpeedModel,
    placer: str,
    fitted: bool,
    learn_rescale: bool = True,
    interference: InterferenceModel | None = None,
    learn_nodes: bool = True,
    spare: frozenset[int] = frozenset(),
) -> Scheduler:
    """The shipped search over `candidates` (heuristics and model folders joined by '+'), placing with `placer`, in
    the world of `speed` (corrected per job, and sparing the servers it learns slow with `learn_nodes`, when
    `fitted`) with `interference` (None: the catalogue's); unfitted, its placers spare the servers `spare` names."""
    world = World(speed, interference or interference_model())
    config = SimConfig.realistic()
    make_placer = placer_factory(placer)
    assert make_placer is not None
    if fitted:
        policy = lambda name, make: load_policy(name, compat=False, placer=make())  # noqa: E731
        return make_fitted_lookahead(
            candidates, world, config, make_placer, HORIZON_SLOTS, "sparse", SPARSE_GROWTH, policy, learn_rescale,
            learn_nodes,
        )  # fmt: skip
    if spare:
        fresh = make_placer
        build = lambda name: make_scheduler(name, speed, False, SparingSlowNodes(fresh(), lambda: spare))  # noqa: E731
        return make_lookahead("lookahead:" + candidates, build, world, config, HORIZON_SLOTS, "sparse", SPARSE_GROWTH)
    build = lambda name: scheduler_builder(name, placer, Mode.REALISTIC)(speed, False)  # noqa: E731
    return make_lookahead("lookahead:" + candidates, build, world, config, HORIZON_SLOTS, "sparse", SPARSE_GROWTH)


def rows_of(calibrated: SpeedModel, network: str, learned_placer: str, truth: TrueCluster) -> dict[str, Any]:
    """Row -> a builder of its scheduler from the speeds `run_on` hands it (the catalogue's; the truth's for
    `READING_THE_TRUTH`, which also looks ahead with the truth's interference and spares its slow servers)."""
    with_network = f"optimus+speedup-hull+{network}"
    rows: dict[str, Any] = {
        FULL: lambda speed, compat: search(with_network, calibrated, FULL_PLACER, True),
        NO_RESCALE_FIT: lambda speed, compat: search(with_network, calibrated, FULL_PLACER, True, False),
        NO_NODE_FIT: lambda speed, compat: search(with_network, calibrated, FULL_PLACER, True, learn_nodes=False),
        NO_JOB_FIT: lambda speed, compat: search(with_network, calibrated, FULL_PLACER, False),
        NO_CALIBRATION: lambda speed, compat: search(with_network, speed, FULL_PLACER, False),
        NO_NETWORK: lambda speed, compat: search("optimus+speedup-hull", calibrated, FULL_PLACER, True),
        NETWORK_ALONE: scheduler_builder(network, FULL_PLACER, Mode.REALISTIC),
        WITH_LEARNED_PLACER: lambda speed, compat: search(with_network, calibrated, learned_placer, True),
    }
    for placer in PLAIN_PLACERS:
        if placer != FULL_PLACER:
            rows[full_placer(placer)] = lambda speed, compat, p=placer: search(with_network, calibrated, p, True)
        rows[nothing_learned(placer)] = lambda speed, compat, p=placer: search("optimus+speedup-hull", speed, p, False)
        for name in HEURISTICS:
            rows[heuristic_row(name, placer)] = scheduler_builder(name, placer, Mode.REALISTIC)
    rows[READING_THE_TRUTH] = lambda speed, compat: search(
        "optimus+speedup-hull", speed, "isolate-strict", False, interference=truth.interference, spare=truth.slow_nodes
    )
    return rows


def run_cell(task: tuple[str, float, int, int, int, str, str, tuple[str, ...]]) -> dict[str, Any]:
    truth_name, density, seed, num_jobs, num_nodes, network, learned_placer, only = task
    truth = replace(truth_named(truth_name), arrival_density=density)
    cluster = realise(truth, philly_like(seed, num_jobs, num_nodes))
    calibrated = calibrated_speed(truth_name, seed, num_jobs, num_nodes)
    hours: dict[str, float] = {}
    seconds: dict[str, float] = {}
    decided: dict[str, dict[str, float]] = {}
    for label, build in rows_of(calibrated, network, learned_placer, cluster).items():
        if only and label not in only:
            continue
        built: list[Scheduler] = []

        def keep(speed: SpeedModel, compat: bool, build: Any = build, built: list[Scheduler] = built) -> Scheduler:
            built.append(build(speed, compat))
            return built[-1]

        started = time.perf_counter()
        result = run_on(cluster, keep, SimConfig.realistic(seed=seed), oracle=label == READING_THE_TRUTH)
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


def best_full_system(cells: list[dict[str, Any]]) -> str:
    """The full system's row with the lower mean JCT over all cells: its own placer, the learned one or another."""
    rows = [FULL, WITH_LEARNED_PLACER, *(full_placer(p) for p in PLAIN_PLACERS if p != FULL_PLACER)]
    return min(rows, key=lambda row: sum(c["avg_jct_h"][row] for c in cells))


def with_best_heuristic(cell: dict[str, Any], placer: str) -> dict[str, Any]:
    """`cell` with a row "best heuristic": the lower of the heuristics placing with `placer` in that cell."""
    best = min(cell["avg_jct_h"][heuristic_row(name, placer)] for name in HEURISTICS)
    return {**cell, "avg_jct_h": {**cell["avg_jct_h"], "best heuristic": best}}


def summarise(cells: list[dict[str, Any]]) -> dict[str, Any]:
    placer = best_plain_placer(cells)
    baseline = nothing_learned(placer)
    best = best_full_system(cells)
    shifted = [c for c in cells if c["truth"] != "catalogue"]
    control = [c for c in cells if c["truth"] == "catalogue"]
    interference = [c for c in cells if c["truth"] in INTERFERENCE_TRUTHS or c["truth"].startswith(("seed-", "drawn-"))]
    checkpoint = [c for c in cells if truth_named(c["truth"]).rescale is not None]
    slow = [c for c in cells if truth_named(c["truth"]).slow_nodes is not None]
    knee = [c for c in cells if truth_named(c["truth"]).knee is not None]
    return {
        "best_plain_placer": placer,
        "best_full_system": best,
        "full_vs_nothing_learned_shifted": paired(shifted, best, baseline),
        "full_vs_nothing_learned_catalogue": paired(control, best, baseline),
        "removing_calibration_shifted": paired(shifted, NO_CALIBRATION, FULL),
        "removing_the_per_job_fit_shifted": paired(shifted, NO_JOB_FIT, FULL),
        "removing_the_per_job_fit_knee": paired(knee, NO_JOB_FIT, FULL),
        "removing_the_learned_resize_cost_checkpoint": paired(checkpoint, NO_RESCALE_FIT, FULL),
        "removing_the_slow_server_fit_slow_servers": paired(slow, NO_NODE_FIT, FULL),
        "removing_the_network": paired(cells, NO_NETWORK, FULL),
        "the_learned_placer_instead_of_isolate_strict_interference": paired(interference, WITH_LEARNED_PLACER, FULL),
        "network_alone_vs_full": paired(cells, NETWORK_ALONE, FULL),
        "reading_the_truth_vs_nothing_learned_shifted": paired(
            shifted, READING_THE_TRUTH, nothing_learned("isolate-strict")
        ),
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
    parser.add_argument("--truths", default=f"{NAMED},{DRAWN}", help="scenarios, seed-N and drawn-N, comma-separated")
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
    if unknown or (only and not args.merge):  # a run of every row may merge with an earlier one's other cells
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
        cells = merged(cells, json.loads(Path(args.merge).read_text())["cells"], not only)
    report(args, cells, environment())


def merged(cells: list[dict[str, Any]], earlier: list[dict[str, Any]], every_row: bool) -> list[dict[str, Any]]:
    """`earlier`'s cells, each completed or overridden by the rows the same cell (truth, density, seed) of `cells`
    ran; then the cells of `cells` that `earlier` lacks, which must have run every row (`every_row`)."""
    key = lambda cell: (cell["truth"], cell["density"], cell["seed"])  # noqa: E731
    new = {key(cell): cell for cell in cells}
    complete = []
    for old in earlier:
        cell = new.pop(key(old), None)
        if cell is None:
            complete.append(old)
            continue
        complete.append({
            **cell,
            "avg_jct_h": {**old["avg_jct_h"], **cell["avg_jct_h"]},
            "seconds": {**old["seconds"], **cell["seconds"]},
            "decided": {**old["decided"], **cell["decided"]},
        })  # fmt: skip
    if new and not every_row:
        truth, density, seed = next(iter(new))
        raise SystemExit(f"--merge: no cell {truth} x{density:g} seed {seed} to merge (run every row for a new cell)")
    return [*complete, *new.values()]


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
        f"what each part adds (paired by cell; the full system is {summary['best_full_system']!r}, nothing learned "
        f"places with {summary['best_plain_placer']})",
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
