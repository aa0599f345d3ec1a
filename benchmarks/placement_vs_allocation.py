"""What placement is worth against what allocation is worth, on clusters unlike the catalogue.

Every allocation policy (the champion `dl2-philly`, DRF, Tiresias, Optimus and `speedup-hull` reading the catalogue,
`optimus-fitted`) with every placement (the heuristic placers of `dl2.schedulers.registry.PLACERS` and Harmony's
learned placer `models/harmony-placer-philly`), on each truth (`dl2.truth`) and seed: `synthetic-philly`'s first
`--jobs` jobs on its first `--nodes` servers, realistic mode, the simulation seeded like the workload (the cells of
`benchmarks/loop_scenarios.py`). Reported: each pair's average JCT relative to the champion as it ships (placing
with `binpack`), mean over the seeds with a 95% interval (Student t over the per-seed ratios). The allocation
policies read the catalogue; no row reads the truth.

    .venv/bin/python benchmarks/placement_vs_allocation.py [--truths catalogue,interference-2x --seeds 9100]

Prints the table and writes `benchmarks/results/placement_vs_allocation.json`.
"""

from __future__ import annotations

import argparse
import multiprocessing
from pathlib import Path
from typing import Any

import numpy as np
from common import environment, print_table, write_json
from truth_scenarios import CHAMPION, philly_like

from dl2.resolve import scheduler_builder
from dl2.schedulers.registry import PLACERS
from dl2.sim.config import Mode, SimConfig
from dl2.sim.metrics import mean_ci95, summarize
from dl2.truth import SCENARIOS, realise, truth_named
from dl2.truth.run import run_on

ROOT = Path(__file__).resolve().parent.parent
HARMONY = str(ROOT / "models" / "harmony-placer-philly")
ALLOCATIONS = (CHAMPION, "drf", "tiresias", "optimus", "speedup-hull", "optimus-fitted")
PLACEMENTS = (*PLACERS, HARMONY)
SHIPPED = (CHAMPION, "binpack")
"""The champion as it ships: its model's placement."""


def label(name: str) -> str:
    return Path(name).name if "/" in name else name


def run_cell(task: tuple[str, int, int, int, str, str]) -> tuple[str, int, str, str, float]:
    """(truth, seed, jobs, nodes, allocation, placement) -> its average JCT in hours under the truth."""
    truth, seed, num_jobs, num_nodes, allocation, placement = task
    cluster = realise(truth_named(truth), philly_like(seed, num_jobs, num_nodes))
    result = run_on(cluster, scheduler_builder(allocation, placement, Mode.REALISTIC), SimConfig.realistic(seed=seed))
    return truth, seed, allocation, placement, summarize(result).avg_jct_s / 3600


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--truths", default=",".join(SCENARIOS), help="scenarios or seed-N, comma-separated")
    parser.add_argument("--seeds", default="9100,9101,9102", help="workload and simulation seeds")
    parser.add_argument("--jobs", type=int, default=150, help="first N jobs of each workload")
    parser.add_argument("--nodes", type=int, default=12, help="first N servers of the cluster")
    parser.add_argument("--workers", type=int, default=2, help="processes")
    parser.add_argument("--out", default="placement_vs_allocation.json", help="file name under benchmarks/results/")
    args = parser.parse_args()
    truths, seeds = args.truths.split(","), [int(seed) for seed in args.seeds.split(",")]
    tasks = [
        (t, s, args.jobs, args.nodes, a, p) for t in truths for s in seeds for a in ALLOCATIONS for p in PLACEMENTS
    ]
    with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
        cells = pool.map(run_cell, tasks, chunksize=4)
    jct = {(t, s, a, p): hours for t, s, a, p, hours in cells}
    results: dict[str, Any] = {"environment": environment(), "arguments": vars(args), "scenarios": {}}
    table = []
    for truth in truths:
        shipped = [jct[(truth, s, *SHIPPED)] for s in seeds]
        entries: dict[str, Any] = {}
        for allocation in ALLOCATIONS:
            for placement in PLACEMENTS:
                hours = [jct[(truth, s, allocation, placement)] for s in seeds]
                ratio, half = mean_ci95([h / base - 1 for h, base in zip(hours, shipped, strict=True)])
                entries[f"{label(allocation)} / {label(placement)}"] = {
                    "per_seed_h": [round(h, 4) for h in hours], "mean_h": float(np.mean(hours)),
                    "vs_shipped_champion": ratio, "vs_shipped_champion_ci95": half,
                }  # fmt: skip
        best = min(entries, key=lambda key: entries[key]["mean_h"])
        results["scenarios"][truth] = {"pairs": entries, "best": best}
        for name, entry in entries.items():
            mark = " (best)" if name == best else ""
            change = f"{entry['vs_shipped_champion']:+.1%} ± {entry['vs_shipped_champion_ci95']:.1%}"
            table.append([truth, name + mark, f"{entry['mean_h']:.3f}", change])
    print_table(
        f"average JCT (h), synthetic-philly's first {args.jobs} jobs on {args.nodes} servers, seeds {args.seeds}",
        ["truth", "allocation / placement", "avg JCT (h)", "vs the champion as shipped (binpack), 95% CI"],
        table,
    )
    print(f"wrote {write_json(args.out, results)}")


if __name__ == "__main__":
    main()
