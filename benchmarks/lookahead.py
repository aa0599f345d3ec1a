"""Lookahead at decision time (`dl2.rl.lookahead`) on clusters unlike the catalogue: below every heuristic?

Per cell (a truth and a week, as `benchmarks/loop_scenarios.py` plays them: `synthetic-philly`'s first `--jobs`
jobs on its first `--nodes` servers, the workload of the seed under the truth), every scheduler places with
`isolate-strict` and is played under the truth:

- the heuristics a deployment has (reading the catalogue) and the champion `models/dl2-philly`, as the loop
  benchmark's rows; the champion as shipped (its own placement) too;
- `lookahead:optimus+speedup-hull` looking ahead in the catalogue's world (nothing learned from the cluster);
- the same in the world the previous week's records calibrate (`dl2.sim.calibrated`; the week of seed + 500 under
  DRF, as a shadow controller records it): what learning the cluster from its records adds;
- the same with the champion as a third candidate, in the calibrated world (the DL2 policy in the loop);
- the lookahead reading the truth: the same two heuristics looking ahead in the truth's own world (its speeds and
  interference, the jobs' true types), which no deployment has; not a ceiling (the champion as a candidate can beat
  it).

    .venv/bin/python benchmarks/lookahead.py [--cells catalogue:9100,speed-shift:9101 --processes 2]

Prints the table and writes `benchmarks/results/lookahead.json`.
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from calibrated_twin import previous_week_log
from common import environment, print_table, write_json
from truth_scenarios import CHAMPION, HEURISTICS, philly_like

from dl2.resolve import scheduler_builder
from dl2.rl.lookahead import Beyond, LookaheadScheduler, make_lookahead
from dl2.sim.calibrated import calibrated_world
from dl2.sim.config import Mode, SimConfig
from dl2.sim.metrics import summarize
from dl2.sim.run import World
from dl2.truth.realise import TrueCluster, realise
from dl2.truth.run import run_on
from dl2.truth.scenarios import truth_named

PLACER = "isolate-strict"
TRUTH_ROW = "lookahead reading the truth"
"""The lookahead over the two heuristics in the truth's world, handed the jobs' true types."""
LOOKAHEAD = "lookahead:optimus+speedup-hull"
WITH_CHAMPION = f"lookahead:optimus+speedup-hull+{CHAMPION}"
CELLS = (
    *(f"{truth}:{seed}" for seed in (9100, 9101, 9102)
      for truth in ("catalogue", "speed-shift", "new-types", "interference-2x", "dense-arrivals")),
    "seed-4242:9105", "seed-777:9105", "seed-31337:9106", "seed-2718:9106",
)  # fmt: skip
"""The loop benchmark's 19 cells (docs/results.md, "Three seeds, and the champion placed as well")."""


def hours(cluster: TrueCluster, build: Any, seed: int, oracle: bool = False) -> float:
    """Average JCT (h) under the truth; `oracle`: handed the truth's speeds and true types (`run_on`'s)."""
    result = run_on(cluster, build, SimConfig.realistic(seed=seed), oracle)
    return summarize(result).avg_jct_s / 3600


def lookahead_in(
    name: str, world: World | None, horizon: int = 0, beyond: Beyond = "estimate", growth: int = 2
) -> tuple[Any, dict[str, Any]]:
    """A builder of the lookahead `name` in `world` (None: the world of the speeds it is handed and the truth's
    interference, for the row reading the truth), its continuations deciding every slot for `horizon` slots (0: to
    the end) and `beyond` that (`growth`: `LookaheadScheduler`'s), and where it reports what it did."""
    facts: dict[str, Any] = {}

    def build(speed: Any, compat: bool) -> LookaheadScheduler:
        model = world or World(speed, facts["interference"])
        scheduler = make_lookahead(
            name, lambda candidate: scheduler_builder(candidate, PLACER, Mode.REALISTIC)(model.speed, compat),
            model, SimConfig.realistic(), horizon, beyond, growth,
        )  # fmt: skip
        facts["scheduler"] = scheduler
        return scheduler

    return build, facts


def run_cell(task: tuple[str, int, int, int, int, Beyond, int]) -> dict[str, Any]:
    truth, seed, num_jobs, num_nodes, horizon, beyond, growth = task
    cluster = realise(truth_named(truth), philly_like(seed, num_jobs, num_nodes))
    row: dict[str, float] = {}
    for name in HEURISTICS:
        row[name] = hours(cluster, scheduler_builder(name, PLACER, Mode.REALISTIC), seed)
    row["champion as shipped"] = hours(cluster, scheduler_builder(CHAMPION, None, Mode.REALISTIC), seed)
    row["champion"] = hours(cluster, scheduler_builder(CHAMPION, PLACER, Mode.REALISTIC), seed)
    with tempfile.TemporaryDirectory(prefix="dl2-lookahead-") as scratch:
        calibrated, _ = calibrated_world(previous_week_log(truth, seed, num_jobs, num_nodes, Path(scratch)))
    costs: dict[str, dict[str, Any]] = {}
    runs = {
        "lookahead, catalogue": (LOOKAHEAD, World.catalogue(Mode.REALISTIC), False),
        "lookahead, calibrated": (LOOKAHEAD, calibrated, False),
        "lookahead + champion, calibrated": (WITH_CHAMPION, calibrated, False),
        TRUTH_ROW: (LOOKAHEAD, None, True),
    }
    for label, (name, world, oracle) in runs.items():
        build, facts = lookahead_in(name, world, horizon, beyond, growth)
        facts["interference"] = cluster.interference
        started = time.perf_counter()
        row[label] = hours(cluster, build, seed, oracle)
        scheduler = facts["scheduler"]
        costs[label] = {
            "seconds": time.perf_counter() - started,
            "continuations": scheduler.continuations,
            "chosen": {scheduler.candidates[i].name: n for i, n in sorted(scheduler.chosen.items())},
            "contested": scheduler.contested,
            "decided": scheduler.decided,
            "decided_alone": scheduler.alone,
        }
    return {"truth": truth, "seed": seed, "avg_jct_h": row, "lookahead_costs": costs}


def print_attribution(cells: list[dict[str, Any]]) -> None:
    """Per cell, who decided the contested slots of the lookahead with the champion as a candidate (the slots where
    the candidates disagreed; a candidate decides a slot where the applied allocation is its proposal, alone or
    with others that proposed the same)."""
    label = "lookahead + champion, calibrated"
    rows = []
    for cell in cells:
        costs = cell["lookahead_costs"][label]
        contested = max(costs.get("contested", 0), 1)
        decided, alone = costs.get("decided", {}), costs.get("decided_alone", {})
        rows.append([
            cell["truth"], str(cell["seed"]), str(costs.get("contested", 0)),
            *(f"{decided.get(name, 0) / contested:.0%} ({alone.get(name, 0) / contested:.0%})"
              for name in ("optimus", "speedup-hull", Path(CHAMPION).name)),
        ])  # fmt: skip
    print_table(
        f"who decided the contested slots of '{label}': share of them (share it alone proposed)",
        ["truth", "seed", "contested slots", "optimus", "speedup-hull", "network"], rows,
    )  # fmt: skip


def best_heuristic(row: dict[str, float]) -> tuple[str, float]:
    name = min(HEURISTICS, key=row.__getitem__)
    return name, row[name]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", default=",".join(CELLS), help="truth:seed pairs, comma-separated")
    parser.add_argument("--jobs", type=int, default=150, help="first N jobs of each week")
    parser.add_argument("--nodes", type=int, default=12, help="first N servers of the cluster")
    parser.add_argument("--processes", type=int, default=2, help="cells run in parallel")
    parser.add_argument("--horizon", type=int, default=0, help="slots each continuation decides every slot (0: all)")
    parser.add_argument("--beyond", choices=["estimate", "sparse"], default="estimate", help="past the horizon")
    parser.add_argument("--growth", type=int, default=2, help="factor between gaps of a sparse continuation")
    parser.add_argument("--out", default="lookahead.json", help="file name under benchmarks/results/")
    args = parser.parse_args()
    tasks = [
        (cell.split(":")[0], int(cell.split(":")[1]), args.jobs, args.nodes, args.horizon, args.beyond, args.growth)
        for cell in args.cells.split(",")
    ]
    with multiprocessing.get_context("fork").Pool(args.processes) as pool:
        cells = pool.map(run_cell, tasks, chunksize=1)
    rows, against_best, against_champion = [], [], []
    for cell in cells:
        row = cell["avg_jct_h"]
        name, best = best_heuristic(row)
        ours = row["lookahead + champion, calibrated"]
        against_best.append(ours / best - 1)
        against_champion.append(ours / row["champion"] - 1)
        rows.append([
            cell["truth"], str(cell["seed"]), f"{row['champion as shipped']:.3f}", f"{row['champion']:.3f}",
            f"{best:.3f} ({name})", f"{row['lookahead, catalogue']:.3f}", f"{row['lookahead, calibrated']:.3f}",
            f"{ours:.3f}", f"{ours / best - 1:+.1%}", f"{ours / row['champion'] - 1:+.1%}",
            f"{row[TRUTH_ROW]:.3f}", f"{ours / row[TRUTH_ROW] - 1:+.1%}",
        ])  # fmt: skip
    print_table(
        f"average JCT (h) under the truth, every scheduler placing with {PLACER} but the champion as shipped",
        ["truth", "seed", "champion as shipped", "champion", "best heuristic", "lookahead, catalogue",
         "lookahead, calibrated", "lookahead + champion, calibrated", "vs best heuristic", "vs champion",
         TRUTH_ROW, f"vs {TRUTH_ROW}"],
        rows,
    )  # fmt: skip
    print_attribution(cells)
    summary = {
        "below_best_heuristic": int(sum(d < 0 for d in against_best)),
        "cells": len(cells),
        "vs_best_heuristic": {"min": min(against_best), "max": max(against_best), "mean": float(np.mean(against_best))},
        "vs_champion": {"min": min(against_champion), "max": max(against_champion),
                        "mean": float(np.mean(against_champion))},
    }  # fmt: skip
    print(summary)
    path = write_json(
        args.out, {"arguments": vars(args), "environment": environment(), "cells": cells, "summary": summary}
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
