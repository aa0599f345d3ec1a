"""How much better than its base the rollout teacher is (`dl2.rl.rollout_teacher`), and what it costs.

Runs `srpt-knee-fill` (replayed through the policy's `SlotDecision`, as warm-up records it) and the rollout
teacher `rollout:srpt-knee-fill` on the same workloads: by default the validation workloads (`authors-small`
seeds 5000-5009), where the teacher's parameters may be looked at. The rollout teacher is clairvoyant (its
continuations see the workload's future arrivals), so on test workloads it is a reference point for what a
student could learn, never a scheduler to compare with.

    .venv/bin/python benchmarks/rollout_teacher.py [--source authors-small] [--seeds 5000-5009] [--jobs 2]

Prints a table and writes `benchmarks/results/rollout_teacher.json`.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from typing import Any

import numpy as np
from common import environment, print_table, write_json

from dl2.env.observation import ObservationConfig
from dl2.rl.config import WarmUpConfig
from dl2.rl.demonstrations import record
from dl2.rl.rollout_teacher import FILLS, KNEES
from dl2.rl.training import make_teacher, sim_config
from dl2.schedulers.load_balance import LoadBalancePlacer
from dl2.workload.source import workload


def parse_seeds(text: str) -> list[int]:
    if "-" in text:
        first, last = text.split("-")
        return list(range(int(first), int(last) + 1))
    return [int(seed) for seed in text.split(",")]


def run(task: tuple[str, str, int, int]) -> dict[str, Any]:
    """One teacher on one workload: its replayed average JCT in slots and what it cost."""
    teacher_name, source, seed, window = task
    config = WarmUpConfig(teacher=teacher_name, source=source, mode="compat", observation=ObservationConfig(window))
    teacher = make_teacher(config)
    jobs = workload(source, seed)
    started = time.perf_counter()
    # record every 10^9-th slot: the first one only (the run is what is measured here, not the data)
    _, average_jct_s = record(jobs, teacher, sim_config("compat", seed), config.observation, LoadBalancePlacer(), 10**9)
    return {
        "teacher": teacher_name,
        "seed": seed,
        "avg_jct_slots": average_jct_s / jobs.slot_s,
        "seconds": time.perf_counter() - started,
        "rollouts": getattr(teacher, "rollouts", 0),
        "chosen": {str(k): v for k, v in sorted(getattr(teacher, "chosen", {}).items())},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="authors-small")
    parser.add_argument("--seeds", default="5000-5009", help="workload seeds: 'a-b' or 'a,b,c'")
    parser.add_argument("--window", type=int, default=40, help="J of the decisions the teacher is replayed through")
    parser.add_argument("--jobs", type=int, default=2, help="workloads run in parallel")
    args = parser.parse_args()
    seeds = parse_seeds(args.seeds)
    tasks = [
        (name, args.source, seed, args.window)
        for name in ("srpt-knee-fill", "rollout:srpt-knee-fill")
        for seed in seeds
    ]
    started = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
        runs = pool.map(run, tasks, chunksize=1)
    base = {r["seed"]: r["avg_jct_slots"] for r in runs if r["teacher"] == "srpt-knee-fill"}
    rollout = {r["seed"]: r for r in runs if r["teacher"] != "srpt-knee-fill"}
    rows = [
        [
            str(seed),
            f"{base[seed]:.2f}",
            f"{rollout[seed]['avg_jct_slots']:.2f}",
            f"{rollout[seed]['avg_jct_slots'] / base[seed]:.3f}",
            f"{rollout[seed]['rollouts']:,}",
            f"{rollout[seed]['seconds']:.0f}",
        ]
        for seed in seeds
    ]
    base_mean = float(np.mean(list(base.values())))
    rollout_mean = float(np.mean([r["avg_jct_slots"] for r in rollout.values()]))
    rows.append(
        [
            "mean",
            f"{base_mean:.2f}",
            f"{rollout_mean:.2f}",
            f"{rollout_mean / base_mean:.3f}",
            f"{np.mean([r['rollouts'] for r in rollout.values()]):,.0f}",
            f"{np.mean([r['seconds'] for r in rollout.values()]):.0f}",
        ]
    )
    print_table(
        f"rollout teacher vs its base on {args.source} seeds {args.seeds} (average JCT in slots, compat mode)",
        ["seed", "srpt-knee-fill", "rollout:srpt-knee-fill", "ratio", "rollouts", "seconds"],
        rows,
    )
    path = write_json(
        "rollout_teacher.json",
        {
            "source": args.source,
            "seeds": seeds,
            "window": args.window,
            "variants": {"knees": list(KNEES), "fills": list(FILLS)},
            "base_mean_avg_jct_slots": base_mean,
            "rollout_mean_avg_jct_slots": rollout_mean,
            "ratio": rollout_mean / base_mean,
            "runs": runs,
            "wall_s": time.perf_counter() - started,
            "environment": environment(),
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
