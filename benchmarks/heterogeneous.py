"""A cluster of several accelerator types: the type-agnostic heuristics against `gavel`, the
heterogeneity-aware baseline reading the catalogue's profile on each type.

The Alibaba GPU 2023 workload (`alibaba-gpu2023`, its jobs mapped to catalogue models with the seed) on the first
`--nodes` servers of its cluster, which mix its types (the first 60: G2 26, P100 23, G3 4, T4 4, V100M32 2,
V100M16 1; to the profile G2, G3 and P100 are one type, the V100s another), the first `--jobs` jobs, realistic mode
seeded like the workload. Rows: DRF, Tiresias and Optimus with
the default placer (load-balance), which reads the nodes' types (`place_sticky`); DRF placed blind to the types
(`reads_accelerators = False`: what the placement's reading of types is worth under the same policy); and `gavel`
reading the catalogue. Reported: mean average JCT over the seeds with a 95% confidence interval (Student t), and
the share of job-slots whose workers sat on more than one type.

    .venv/bin/python benchmarks/heterogeneous.py [--jobs 300 --nodes 60 --seeds 0,1,2]

Prints a table and writes `benchmarks/results/heterogeneous.json`.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from common import report

from dl2.core import Allocation, ClusterView, Scheduler, Workload
from dl2.schedulers.accelerator_types import AcceleratorTypes
from dl2.schedulers.registry import PLACERS, make_scheduler
from dl2.sim.config import SimConfig
from dl2.sim.metrics import mean_ci95
from dl2.sim.run import run_one
from dl2.workload.speed import SpeedModel
from dl2.workload.traces import load_alibaba
from testbed.twin.workloads import first_jobs, first_nodes

ROWS = ("drf", "drf (placed blind to types)", "tiresias", "optimus", "gavel (catalogue)")


class Counting:
    """Wraps a scheduler; counts job-slots and those whose workers sit on more than one type."""

    def __init__(self, inner: Scheduler, types: AcceleratorTypes) -> None:
        self.inner, self.name, self.types = inner, inner.name, types
        self.job_slots = 0
        self.spread = 0

    def reset(self) -> None:
        self.inner.reset()

    def schedule(self, view: ClusterView) -> Allocation:
        allocation = self.inner.schedule(view)
        type_of = self.types.type_of_node
        for held in allocation.jobs.values():
            self.job_slots += 1
            self.spread += len({type_of[node] for node in held.worker_nodes}) > 1
        return allocation


def builder(row: str, types: AcceleratorTypes, counters: list[Counting]) -> Callable[[SpeedModel, bool], Scheduler]:
    def build(speed: SpeedModel, compat: bool) -> Scheduler:
        placer = PLACERS["load-balance"]()
        if row == "drf (placed blind to types)":
            placer.reads_accelerators = False  # type: ignore[attr-defined]
        name = row.split(" ")[0]
        counters.append(Counting(make_scheduler(name, speed, compat, placer), types))
        return counters[-1]

    return build


def run(workload: Workload, row: str, seed: int) -> dict[str, float]:
    types = AcceleratorTypes.of(workload.cluster)
    counters: list[Counting] = []
    started = time.perf_counter()
    result = run_one(workload, builder(row, types, counters), SimConfig.realistic(seed=seed))
    jcts = [job.jct_s for job in result.jobs]
    counter = counters[-1]
    return {
        "average_jct_h": sum(jcts) / len(jcts) / 3600,
        "spread_share": counter.spread / max(counter.job_slots, 1),
        "wall_s": time.perf_counter() - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--nodes", type=int, default=60)
    parser.add_argument("--seeds", default="0,1,2")
    args = parser.parse_args()
    seeds = [int(seed) for seed in args.seeds.split(",")]
    runs: dict[str, list[dict[str, float]]] = {row: [] for row in ROWS}
    mix: Counter[str] = Counter()
    for seed in seeds:
        workload = first_nodes(first_jobs(load_alibaba(seed), args.jobs), args.nodes)
        mix = Counter(node.kind for node in workload.cluster.nodes)
        for row in ROWS:
            runs[row].append(run(workload, row, seed))
            print(f"seed {seed} {row}: {runs[row][-1]}", flush=True)
    summary: dict[str, Any] = {}
    table = []
    for row in ROWS:
        mean, half = mean_ci95([r["average_jct_h"] for r in runs[row]])
        spread = sum(r["spread_share"] for r in runs[row]) / len(runs[row])
        summary[row] = {"average_jct_h": mean, "ci95_h": half, "spread_share": spread, "runs": runs[row]}
        table.append([row, f"{mean:.2f} ± {half:.2f}", f"{100 * spread:.1f}%"])
    title = f"alibaba-gpu2023, first {args.jobs} jobs on the first {args.nodes} nodes ({dict(mix)}), seeds {seeds}"
    columns = ["scheduler", "average JCT (h)", "job-slots on >1 type"]
    settings = {"jobs": args.jobs, "nodes": args.nodes, "seeds": seeds, "node_types": dict(mix)}
    report("heterogeneous.json", title, columns, table, summary, **settings)


if __name__ == "__main__":
    main()
