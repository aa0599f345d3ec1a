"""Placement decision latency of Harmony's placer: one 16-task job (8 workers, 8 PS) placed on 352 servers, one core.

Bar (issue 19): at most 2 ms median per job. States come from the Philly week under an allocation policy that
places with the same placer (every `--every`-th slot with at least `--min-jobs` jobs): into each, a new
8-GPU job of a random model arrives and asks for 8 workers and 8 PS while every other job keeps what it holds.
Timed: the whole placement round (`place_sticky`: the free resources and tenancy of the 352 servers, then the
job's decisions), and the placer's own calls alone. Each state is timed `--repeat` times and the fastest run
counts (timeit's convention on this shared machine).

    .venv/bin/python benchmarks/harmony_latency.py [--placer models/harmony-placer]

Prints a table and writes `benchmarks/results/harmony_latency.json`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from common import environment, pin_to_one_core, print_table, write_json

from dl2.core import EMPTY_JOB_ALLOCATION, ClusterView, JobView
from dl2.placement.policy import HarmonyPlacer
from dl2.resolve import placer_factory
from dl2.schedulers.placement import Demand, NodeState, place_sticky
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import SimConfig
from dl2.sim.run import interference_model, speed_model
from dl2.sim.simulator import Simulation
from dl2.workload.catalogue import GPU_MODEL_NAMES
from dl2.workload.mapping import DEFAULT_MAPPING, map_trace_job
from dl2.workload.registry import load_workloads

MEDIAN_BAR_MS = 2.0


class Timed:
    """Times the inner placer's calls."""

    needs_tenancy = True

    def __init__(self, inner: HarmonyPlacer) -> None:
        self.inner, self.name, self.seconds = inner, inner.name, 0.0

    def choose(self, state: NodeState, demand: Demand, job_nodes: Sequence[int]) -> int:
        started = time.perf_counter()
        node = self.inner.choose(state, demand, job_nodes)
        self.seconds += time.perf_counter() - started
        return node


def busy_views(
    placer: HarmonyPlacer, scheduler: str, every: int, min_jobs: int, max_states: int = 0
) -> list[ClusterView]:
    """States of the Philly week (every `every`-th slot with at least `min_jobs` jobs), the first `max_states` of
    them if set."""
    workload = load_workloads("philly", 0)[0]
    config = SimConfig.realistic(0)
    speed = speed_model(config.mode)
    simulation = Simulation(workload, config, speed, interference_model())
    policy = make_scheduler(scheduler, speed, False, placer)
    views = []
    while not simulation.done and not (max_states and len(views) >= max_states):
        view = simulation.begin_slot()
        allocation = policy.schedule(view)
        if simulation.slot % every == 0 and len(view.jobs) >= min_jobs:
            # the state after the slot's placement: every job holds what it was given
            held = tuple(replace(j, allocation=allocation.get(j.spec.job_id)) for j in view.jobs)
            views.append(replace(view, jobs=held))
        simulation.apply(allocation)
    return views


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--placer", default="models/harmony-placer")
    parser.add_argument("--scheduler", default="drf", help="allocation policy of the runs the states come from")
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument("--min-jobs", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--max-states", type=int, default=0, help="stop after this many states (0: the whole week)")
    args = parser.parse_args()
    core = pin_to_one_core()
    make = placer_factory(args.placer)
    assert make is not None
    placer = make()
    assert isinstance(placer, HarmonyPlacer), "the latency bar is about a Harmony placer"
    views = busy_views(placer, args.scheduler, args.every, args.min_jobs, args.max_states)
    rng = np.random.default_rng(0)
    rounds, decisions, occupied, asked = [], [], [], []
    for index, view in enumerate(views):
        model = GPU_MODEL_NAMES[int(rng.integers(len(GPU_MODEL_NAMES)))]
        job = map_trace_job(f"new-{index}", view.time_s, 8, 3600.0, rng, DEFAULT_MAPPING, model)
        arriving = JobView(job.spec, 0.0, 0.0, EMPTY_JOB_ALLOCATION, 0.0, 0.0, 0)
        jobs = (*view.jobs, arriving)
        targets = [(j.allocation.num_workers, j.allocation.num_ps) for j in view.jobs] + [(8, 8)]
        state_view = replace(view, jobs=jobs)
        best_round, best_decisions = float("inf"), float("inf")
        for _ in range(args.repeat):
            timed = Timed(make())  # type: ignore[arg-type]
            started = time.perf_counter()
            allocation = place_sticky(state_view, targets, timed)
            best_round = min(best_round, time.perf_counter() - started)
            best_decisions = min(best_decisions, timed.seconds)
        placed = allocation.get(job.spec.job_id)
        asked.append(placed.num_workers + placed.num_ps)
        rounds.append(best_round * 1e3)
        decisions.append(best_decisions * 1e3)
        occupied.append(len({node for j in view.jobs for node in j.allocation.worker_nodes + j.allocation.ps_nodes}))
    rounds_ms, decisions_ms = np.array(rounds), np.array(decisions)
    rows = [
        ["whole round (state + decisions)", f"{np.median(rounds_ms):.3f}", f"{np.percentile(rounds_ms, 99):.3f}"],
        ["the placer's decisions", f"{np.median(decisions_ms):.3f}", f"{np.percentile(decisions_ms, 99):.3f}"],
    ]
    title = f"One 16-task job on 352 servers, {len(views)} states ({args.scheduler} on Philly; bar {MEDIAN_BAR_MS} ms)"
    print_table(title, ["timed", "median ms", "p99 ms"], rows)
    write_json(
        "harmony_latency.json",
        {
            "environment": {**environment(), "core": core},
            "placer": args.placer,
            "scheduler": args.scheduler,
            "states": len(views),
            "jobs_per_state_median": float(np.median([len(v.jobs) for v in views])),
            "occupied_servers_median": float(np.median(occupied)),
            "tasks_placed_median": float(np.median(asked)),
            "round_ms": {"median": float(np.median(rounds_ms)), "p99": float(np.percentile(rounds_ms, 99))},
            "decisions_ms": {"median": float(np.median(decisions_ms)), "p99": float(np.percentile(decisions_ms, 99))},
            "median_bar_ms": MEDIAN_BAR_MS,
            "meets_bar": bool(np.median(rounds_ms) <= MEDIAN_BAR_MS),
        },
    )


if __name__ == "__main__":
    main()
