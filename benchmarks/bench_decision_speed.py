"""Decision latency of a trained DL2 policy: a whole slot's allocation for about 40 concurrent jobs, one core.

Target: at most 5 ms median and 15 ms p99 per slot (DL2 §6.3 decides in milliseconds; the authors' TensorFlow
model needs about 0.33 ms per inference and hundreds of inferences per slot). Slots are taken from runs of the
policy on the authors' small workloads in compatibility mode (where 30-45 jobs are active at once); only slots
with 35 to 45 active jobs count. Each slot is timed `--repeat` times and its fastest run counts (timeit's
convention: on a shared virtual machine the slower runs measure other load). A model with packed requests
(`ObservationConfig.packed`) includes the packed placement of its slot. Also reported: time per decision (one
network evaluation plus the environment's bookkeeping), and which inference ran: the numba kernel of
`dl2.rl.compiled` (the default where numba is installed) or NumPy (`--numpy`).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from common import environment, pin_to_one_core, print_table, write_json

from dl2.core import ClusterView
from dl2.rl.learned import LearnedScheduler
from dl2.sim.config import Mode, SimConfig
from dl2.sim.run import speed_model
from dl2.sim.simulator import Simulation
from dl2.workload.authors import SETTINGS, generate_authors_workload

MEDIAN_BAR_MS = 5.0
P99_BAR_MS = 15.0


def busy_views(seeds: range, low: int, high: int, scheduler: LearnedScheduler) -> list[ClusterView]:
    """Views with `low`..`high` active jobs, met while the policy itself schedules (so states are realistic)."""
    views = []
    for seed in seeds:
        simulation = Simulation(
            generate_authors_workload(SETTINGS["small"], seed), SimConfig.compat(), speed_model(Mode.COMPAT)
        )
        while not simulation.done:
            view = simulation.begin_slot()
            if low <= len(view.jobs) <= high:
                views.append(view)
            simulation.apply(scheduler.schedule(view))
    return views


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", type=Path, default=Path(__file__).resolve().parent.parent / "models" / "dl2-compat-hull"
    )
    parser.add_argument("--out", default="decision_speed.json", help="file name under benchmarks/results/")
    parser.add_argument("--seeds", type=int, default=3, help="workloads to draw busy slots from")
    parser.add_argument("--numpy", action="store_true", help="NumPy inference even where numba is installed")
    parser.add_argument("--repeat", type=int, default=5, help="times each slot is timed (its fastest run counts)")
    args = parser.parse_args()
    core = pin_to_one_core()
    scheduler = LearnedScheduler.from_dir(args.model, compat=True)
    if args.numpy:
        scheduler.policy._kernel = None
    views = busy_views(range(7_000, 7_000 + args.seeds), 35, 45, scheduler)
    slot_ms, decisions = [], []
    for view in views:
        before = scheduler.decisions
        runs = []
        for _ in range(args.repeat):
            tick = time.perf_counter()
            scheduler.schedule(view)
            runs.append(1000 * (time.perf_counter() - tick))
        slot_ms.append(min(runs))
        decisions.append((scheduler.decisions - before) // args.repeat)
    slot = np.array(slot_ms)
    per_decision_us = 1000 * slot.sum() / max(sum(decisions), 1)
    record = {
        "model": str(args.model),
        "inference": "numba" if scheduler.policy._kernel is not None else "numpy",
        "slots": len(slot),
        "active_jobs_mean": float(np.mean([len(v.jobs) for v in views])),
        "decisions_per_slot_mean": float(np.mean(decisions)),
        "slot_ms_median": float(np.median(slot)),
        "slot_ms_p99": float(np.percentile(slot, 99)),
        "per_decision_us": per_decision_us,
        "repeat": args.repeat,
        "bar_median_ms": MEDIAN_BAR_MS,
        "bar_p99_ms": P99_BAR_MS,
    }
    met = record["slot_ms_median"] <= MEDIAN_BAR_MS and record["slot_ms_p99"] <= P99_BAR_MS
    print_table(
        f"Slot allocation latency, {args.model.name}, one core #{core}",
        [
            "inference",
            "slots",
            "active jobs",
            "decisions/slot",
            "median ms",
            "p99 ms",
            "us/decision",
            "bar (5 / 15 ms)",
        ],
        [
            [
                record["inference"],
                str(record["slots"]),
                f"{record['active_jobs_mean']:.1f}",
                f"{record['decisions_per_slot_mean']:.1f}",
                f"{record['slot_ms_median']:.2f}",
                f"{record['slot_ms_p99']:.2f}",
                f"{per_decision_us:.1f}",
                "met" if met else "NOT met",
            ]
        ],
    )
    print(f"wrote {write_json(args.out, {'environment': environment(), 'core': core, **record, 'met': met})}")


if __name__ == "__main__":
    main()
