"""What one slot's decision costs at Philly scale: the network alone, the heuristics, and the search that ships.

The Philly week (`philly`, 6,391 jobs on 352 servers) with its arrivals `--density` times as dense (8: it peaks
near 1,500 active jobs), Optimus placing with `isolate-strict` deciding every slot; the first views with at least
each of `--active` jobs are kept (as a deployment would meet them: active jobs, their progress and what they hold).
On each view every scheduler decides once, timed on one core (its fastest of `--repeat` runs: on a shared virtual
machine the slower runs measure other load). The rows: Optimus and `speedup-hull` (what a heuristic costs), the
network alone (`models/dl2-philly`), and the lookahead over both heuristics with the network as third candidate,
with its continuations played to the end and with each variant of `--variants` (`H:beyond:growth`,
`dl2.rl.lookahead.LookaheadScheduler`: the base decides every slot for H slots, then the rest is estimated or played
sparsely, the gaps between decisions growing by `growth`), and as the loop ships it (`online.twin` in params.yaml):
two slots then sparse x8 in a world each job's progress corrects (`lookahead-fitted:`). Its world here is the
catalogue's, which the views were played in, so few jobs depart from it and get speeds of their own; where many do
(a calibration off the cluster's truth), each such job's speeds are computed for it and a decision costs more.

    .venv/bin/python benchmarks/lookahead_latency.py [--active 200,1000,1500 --density 8 --variants 2:sparse:4]

Bars (the learned-parts issue): the network alone at most 50 ms, the search as shipped at most 1 s, at the
densest load. Prints the table and writes `benchmarks/results/lookahead_latency.json`.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from common import environment, pin_to_one_core, print_table, write_json

from dl2.core import ClusterView, Scheduler, Workload
from dl2.resolve import scheduler_builder
from dl2.rl.fitted_lookahead import FITTED_PREFIX
from dl2.rl.lookahead import SPARSE_GROWTH, LookaheadScheduler
from dl2.sim.config import Mode, SimConfig
from dl2.sim.run import interference_model, speed_model
from dl2.sim.simulator import Simulation
from dl2.workload.registry import load_workloads

ROOT = Path(__file__).resolve().parent.parent
MODEL = str(ROOT / "models" / "dl2-philly")
PLACER = "isolate-strict"
NETWORK_BAR_MS = 50.0
SEARCH_BAR_MS = 1000.0
HORIZON_SLOTS = 2
"""The shipped search's horizon (`online.twin.lookahead_horizon_slots` in params.yaml)."""


def views_at(workload: Workload, targets: list[int], driver: Scheduler) -> dict[int, ClusterView]:
    """For each target, the first view with at least that many active jobs while `driver` decides every slot (a
    target never reached gets the busiest view)."""
    simulation = Simulation(workload, SimConfig.realistic(seed=0), speed_model(Mode.REALISTIC), interference_model())
    found: dict[int, ClusterView] = {}
    busiest: ClusterView | None = None
    while not simulation.done and len(found) < len(targets):
        view = simulation.begin_slot()
        if busiest is None or len(view.jobs) > len(busiest.jobs):
            busiest = view
        for target in targets:
            if target not in found and len(view.jobs) >= target:
                found[target] = view
        simulation.apply(driver.schedule(view))
    assert busiest is not None
    return {target: found.get(target, busiest) for target in targets}


def timed_ms(scheduler: Scheduler, view: ClusterView, repeat: int) -> float:
    """The fastest of `repeat` decisions on `view`, after one untimed (compilation is not a decision's latency)."""
    scheduler.reset()
    scheduler.schedule(view)
    runs = []
    for _ in range(repeat):
        scheduler.reset()
        tick = time.perf_counter()
        scheduler.schedule(view)
        runs.append(1000 * (time.perf_counter() - tick))
    return min(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--active", default="200,1000,1500", help="active-job counts to time a slot at")
    parser.add_argument("--density", type=float, default=8.0, help="arrivals this many times as dense as Philly's")
    parser.add_argument(
        "--variants",
        default="0:estimate:2,4:estimate:2,4:sparse:2,2:sparse:2,2:sparse:4,2:sparse:8",
        help="H:beyond:growth, comma-separated",
    )
    parser.add_argument("--repeat", type=int, default=2, help="times each decision is timed (its fastest counts)")
    parser.add_argument("--model", default=MODEL, help="the network (a model folder)")
    parser.add_argument("--out", default="lookahead_latency.json", help="file name under benchmarks/results/")
    args = parser.parse_args()
    core = pin_to_one_core()
    targets = sorted(int(part) for part in args.active.split(","))
    variants = [variant.split(":") for variant in args.variants.split(",")]
    speed = speed_model(Mode.REALISTIC)
    workload = load_workloads("philly", 0)[0].denser(args.density)
    optimus = scheduler_builder("optimus", PLACER, Mode.REALISTIC)(speed, False)
    views = views_at(workload, targets, optimus)
    search = f"lookahead:optimus+speedup-hull+{args.model}"
    rows: dict[str, Any] = {
        "optimus": optimus,
        "speedup-hull": scheduler_builder("speedup-hull", PLACER, Mode.REALISTIC)(speed, False),
        "network alone": scheduler_builder(args.model, PLACER, Mode.REALISTIC)(speed, False),
    }
    for horizon, beyond, growth in variants:
        lookahead = scheduler_builder(search, PLACER, Mode.REALISTIC)(speed, False)
        assert isinstance(lookahead, LookaheadScheduler) and beyond in ("estimate", "sparse")
        lookahead.horizon_slots, lookahead.beyond, lookahead.growth = int(horizon), beyond, int(growth)  # type: ignore[assignment]
        label = "to the end" if horizon == "0" else f"{horizon} slots, then {beyond}"
        rows[f"search, {label}{f' x{growth}' if beyond == 'sparse' and horizon != '0' else ''}"] = lookahead
    # as the loop ships it (`online.twin.lookahead_fit`): the same search in a world each job's progress corrects
    fitted = scheduler_builder(FITTED_PREFIX + search.removeprefix("lookahead:"), PLACER, Mode.REALISTIC)(speed, False)
    assert isinstance(fitted, LookaheadScheduler)
    fitted.horizon_slots, fitted.beyond, fitted.growth = HORIZON_SLOTS, "sparse", SPARSE_GROWTH
    rows[f"search, fitted per job, {HORIZON_SLOTS} slots, then sparse x{SPARSE_GROWTH} (as shipped)"] = fitted
    measured: dict[str, dict[str, float]] = {}
    for name, scheduler in rows.items():
        measured[name] = {}
        for target, view in views.items():
            measured[name][str(target)] = timed_ms(scheduler, view, args.repeat)
            print(f"{name} at {len(view.jobs)} active jobs: {measured[name][str(target)]:.1f} ms", flush=True)
    active = {str(target): len(view.jobs) for target, view in views.items()}
    columns = ["one slot's decision (ms)", *(f"{active[str(t)]:,} active" for t in targets)]
    table = [[name, *(f"{measured[name][str(t)]:,.1f}" for t in targets)] for name in rows]
    print_table(f"Decision latency, Philly week at {args.density:g}x arrivals, {PLACER}, one core #{core}", columns,
                table)  # fmt: skip
    densest = str(targets[-1])
    record = {
        "environment": environment(),
        "core": core,
        "density": args.density,
        "placer": PLACER,
        "model": args.model,
        "active_jobs": active,
        "ms": measured,
        "bars_ms": {"network alone": NETWORK_BAR_MS, "search as shipped": SEARCH_BAR_MS},
        "network_met": measured["network alone"][densest] <= NETWORK_BAR_MS,
    }
    print(f"wrote {write_json(args.out, record)}")


if __name__ == "__main__":
    main()
