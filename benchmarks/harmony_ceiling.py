"""What placement alone can reach with the allocation held: the heuristics against an oracle placer and a bound.

A diagnostic of issue 19's bar (average JCT 25% below load balancing with the allocation policy fixed). The
oracle reads the simulator's interference table, which no placer of dl2 may see: each task goes to a server of
its own job that fits, else to an empty server, else to the fitting server whose jobs interfere least with it
either way (the larger of the slowdown it would suffer there and the one it would inflict), the most loaded
among equals. `isolate` (`dl2.schedulers.isolate`) is the same rule without the table; `isolate-strict` leaves a
task unplaced rather than share a server when its job already runs tasks of that role. `best-layout` is a bound,
not a placer: bin packing places every task the allocation asks for, and each job then runs at the best layout of
those tasks with no interference (`dl2.sim.lower_bound.BestLayoutSimulation`), which no placement of all of them
can beat. Every run counts the tasks left unplaced (`dl2.schedulers.tally`): only 0% holds the allocation.

    .venv/bin/python benchmarks/harmony_ceiling.py [--workload philly] [--seeds 0] [--schedulers drf,optimus-fitted]

Prints a table and writes `benchmarks/results/harmony_ceiling.json`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import numpy as np
from common import environment, print_table, write_json
from harmony_placement import bound, run, run_with

from dl2.schedulers.placement import Demand, NodeState
from dl2.schedulers.registry import PLACERS as REGISTERED
from dl2.sim.run import interference_model

PLACERS = ("load-balance", "tetris", "binpack", "isolate", "isolate-strict", "oracle", "best-layout")


class OraclePlacer:
    """Own servers, then empty ones, then least interference suffered or inflicted, then the most loaded."""

    name = "oracle"
    needs_tenancy = True

    def __init__(self) -> None:
        self.table = np.array(interference_model().table, dtype=float)
        """[victim type, aggressor type] slowdown."""

    def choose(self, state: NodeState, demand: Demand, job_nodes: Sequence[int]) -> int:
        own_server = state.first_fitting(job_nodes, demand)
        if own_server >= 0:
            return own_server
        tenancy = state.tenancy
        assert tenancy is not None
        fitting = state.fitting_nodes(demand)
        if fitting.size == 0:
            return -1
        own = tenancy.type_of[tenancy.placing]
        present = tenancy.jobs_of_type[fitting] > 0
        suffer = np.where(present, self.table[own][None, :], 1.0).max(axis=1)
        inflict = np.where(present, self.table[:, own][None, :], 1.0).max(axis=1)
        # lexicographic: interference first (an empty server has 1.0), then the most loaded server
        cost = np.maximum(suffer, inflict) - 1e-3 * state.utilisation_of_all()[fitting]
        return int(fitting[np.argmin(cost)])


def run_placer(workload: str, seed: int, scheduler: str, placer: str) -> dict[str, Any]:
    """One run; `oracle` and `best-layout` are this benchmark's own, the rest are registered placers."""
    if placer == "oracle":
        return run_with(workload, seed, scheduler, OraclePlacer())
    if placer == "best-layout":
        # bin packing places every task the allocation asks for; the speeds then ignore where they landed
        return run_with(workload, seed, scheduler, REGISTERED["binpack"](), best_layout=True)
    return run((workload, seed, scheduler, placer))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="philly")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--schedulers", default="drf,optimus-fitted")
    parser.add_argument("--placers", default=",".join(PLACERS))
    args = parser.parse_args()
    seeds = [int(seed) for seed in args.seeds.split(",")]
    placers = args.placers.split(",")
    rows, report = [], {}
    lower = {seed: bound((args.workload, seed)) for seed in seeds}
    for scheduler in args.schedulers.split(","):
        results: dict[str, list[dict[str, Any]]] = {}
        for placer in placers:
            results[placer] = [run_placer(args.workload, seed, scheduler, placer) for seed in seeds]
            print(scheduler, placer, results[placer], flush=True)
        base = np.array([result["avg_jct_s"] for result in results.get("load-balance", results[placers[0]])])
        entry = {}
        for placer, runs in results.items():
            jct = np.array([result["avg_jct_s"] for result in runs])
            left = float(np.mean([result["left_unplaced"] for result in runs]))
            relative = float((jct / base).mean())
            multiple = float(np.mean([value / lower[seed] for value, seed in zip(jct, seeds, strict=True)]))
            entry[placer] = {
                "avg_jct_s": jct.tolist(),
                "mean_h": float(jct.mean() / 3600),
                "x_lower_bound": multiple,
                "relative_to_load_balance": relative,
                "tasks_left_unplaced": left,
                "wall_s": [result["wall_s"] for result in runs],
            }
            rows.append(
                [scheduler, placer, f"{jct.mean() / 3600:.3f} h", f"{multiple:.2f}", f"{relative:.3f}", f"{left:.1%}"]
            )
        report[scheduler] = entry
    title = f"{args.workload} seeds {seeds}, realistic mode: placement with the allocation held (bar: 0.75 x LB)"
    print_table(title, ["allocation", "placer", "avg JCT", "x lower bound", "/ load balancing", "tasks left"], rows)
    write_json(
        "harmony_ceiling.json",
        {
            "environment": environment(),
            "workload": args.workload,
            "seeds": seeds,
            "lower_bound_s": [lower[seed] for seed in seeds],
            "results": report,
        },
    )


if __name__ == "__main__":
    main()
