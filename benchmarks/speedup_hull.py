"""How `speedup-hull`'s parameters were chosen, and what the packed request order adds (compatibility mode).

Runs on the validation workloads (`authors-small` seeds 5000-5009), where parameters may be looked at, never on the
authors' test workloads (`dl2 compare -w dl2-official-small` measures those once, after the choice):

- the size exponent alpha of `speedup-hull` (0: maximise the sum of each job's speed as a fraction of its best;
  larger: closer to shortest-remaining-first);
- the chosen alpha with its tasks asked job by job instead of in `packed_order`;
- `srpt-knee-ladder` (the previous best heuristic) for reference, as it asks (job by job) and with packed requests
  (its requests granted against the cluster's total, the slot then placed packed: `SlotDecision(packed=True)`, as
  in `packed_requests.py`), to separate what packing and what the allocation rule each bring.

    .venv/bin/python benchmarks/speedup_hull.py [--seeds 5000-5009]

Prints a table and writes `benchmarks/results/speedup_hull.json`.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
from common import environment, print_table, write_json
from packed_requests import average_jct_slots as packed_average_jct_slots

from dl2.core import Scheduler
from dl2.schedulers.speedup_hull import DEFAULT_SIZE_EXPONENT, SpeedupHull
from dl2.schedulers.srpt_knee import FILL_KNEE_EFFICIENCY, LADDER_FILLS, SRPTKnee
from dl2.sim.config import Mode, SimConfig
from dl2.sim.run import speed_model
from dl2.sim.simulator import simulate
from dl2.workload.source import workload

SIZE_EXPONENTS = (-0.25, 0.0, 0.1, 0.25, 0.5, 1.0)


def average_jct_slots(scheduler: Scheduler, seeds: list[int]) -> list[float]:
    speed = speed_model(Mode.COMPAT)
    values = []
    for seed in seeds:
        result = simulate(workload("authors-small", seed), scheduler, SimConfig.compat(), speed)
        values.append(float(np.mean([job.jct_s for job in result.jobs]) / result.slot_s))
    return values


def parse_seeds(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="5000-5009", help="authors-small seeds, e.g. 5000-5009")
    seeds = parse_seeds(parser.parse_args().seeds)
    speed = speed_model(Mode.COMPAT)
    candidates: list[tuple[str, Scheduler]] = [
        (f"speedup-hull, alpha {alpha:g}", SpeedupHull(speed, True, size_exponent=alpha)) for alpha in SIZE_EXPONENTS
    ]
    candidates += [
        (
            f"speedup-hull, alpha {DEFAULT_SIZE_EXPONENT:g}, job by job",
            SpeedupHull(speed, True, order="shortest-first"),
        ),
        ("srpt-knee-ladder", SRPTKnee(speed, True, None, FILL_KNEE_EFFICIENCY, LADDER_FILLS)),
    ]
    results: list[dict[str, Any]] = []
    for label, scheduler in candidates:
        values = average_jct_slots(scheduler, seeds)
        results.append({"scheduler": label, "avg_jct_slots": float(np.mean(values)), "per_workload": values})
    values = [packed_average_jct_slots(("srpt-knee-ladder", "authors-small", seed, True)) for seed in seeds]
    results.append(
        {"scheduler": "srpt-knee-ladder, packed", "avg_jct_slots": float(np.mean(values)), "per_workload": values}
    )
    print_table(
        f"Validation workloads authors-small {seeds[0]}-{seeds[-1]}, compatibility mode: average JCT (slots)",
        ["scheduler", "avg JCT"],
        [[r["scheduler"], f"{r['avg_jct_slots']:.2f}"] for r in results],
    )
    path = write_json("speedup_hull.json", {"seeds": seeds, "results": results, "environment": environment()})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
