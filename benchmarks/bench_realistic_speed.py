"""Realistic-mode speed: a week of Philly per heuristic (bar: at most 30 s each on one core), and scaling over
1k, 10k and 100k synthetic jobs with Philly's statistics on proportionally larger clusters (jobs per second;
cost should grow about linearly, so jobs per second should stay about flat)."""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

from common import environment, pin_to_one_core, print_table, write_json

from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import SimConfig
from dl2.sim.metrics import summarize
from dl2.sim.run import run_one
from dl2.workload.registry import load_workloads
from dl2.workload.synthetic import PRESETS, generate, scaled

HEURISTICS = ("drf", "fifo", "srtf", "optimus", "optimus-fitted", "tiresias")
PHILLY_BAR_S = 30.0


def timed_run(workload, scheduler: str) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    tick = time.perf_counter()
    result = run_one(
        workload, lambda speed, compat: make_scheduler(scheduler, speed, compat), SimConfig.realistic(seed=0)
    )
    return time.perf_counter() - tick, summarize(result)


def function_calls(workload, scheduler: str) -> int:  # type: ignore[no-untyped-def]
    """Python function calls of one run (cProfile's count): a measure of the work that caches do not change."""
    profile = cProfile.Profile()
    profile.enable()
    timed_run(workload, scheduler)
    profile.disable()
    return int(pstats.Stats(profile).total_calls)  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="synthetic job counts for the scaling table")
    parser.add_argument("--scaling-schedulers", default="drf,optimus", help="schedulers of the scaling table")
    parser.add_argument("--skip-philly", action="store_true")
    parser.add_argument(
        "--count-calls",
        action="store_true",
        help="run each scaling case once more under cProfile and report Python function calls per job (work done, "
        "as opposed to time, which also grows with cache misses on a bigger working set; about 2.5x the run time)",
    )
    parser.add_argument("--out", default="realistic_speed.json", help="file name under benchmarks/results/")
    args = parser.parse_args()
    core = pin_to_one_core()
    records: dict[str, object] = {"environment": environment(), "core": core, "philly_bar_s": PHILLY_BAR_S}

    if not args.skip_philly:
        tick = time.perf_counter()
        philly = load_workloads("philly")[0]
        load_s = time.perf_counter() - tick
        rows, philly_runs = [], []
        for name in HEURISTICS:
            seconds, metrics = timed_run(philly, name)
            philly_runs.append(
                {
                    "scheduler": name,
                    "seconds": seconds,
                    "avg_jct_h": metrics.avg_jct_s / 3600,
                    "slots": metrics.num_slots,
                }
            )  # type: ignore[attr-defined]
            rows.append(
                [
                    name,
                    f"{seconds:.1f}",
                    "yes" if seconds <= PHILLY_BAR_S else "NO",
                    f"{metrics.avg_jct_s / 3600:.2f}",
                    str(metrics.num_slots),
                ]
            )  # type: ignore[attr-defined]
        title = f"A week of Philly: {philly.num_jobs} jobs on {philly.cluster.num_nodes} servers"
        print_table(
            f"{title} (realistic, one core #{core}; load {load_s:.2f} s)",
            ["scheduler", "seconds", f"<= {PHILLY_BAR_S:.0f} s", "avg JCT (h)", "slots"],
            rows,
        )
        records["philly"] = {"load_s": load_s, "runs": philly_runs}

    rows, scaling = [], []
    for size in (int(s) for s in args.sizes.split(",")):
        spec = scaled(PRESETS["synthetic-philly"], size)
        tick = time.perf_counter()
        workload = generate(spec, seed=0, name=f"synthetic-philly-{size}")
        generate_s = time.perf_counter() - tick
        for name in args.scaling_schedulers.split(","):
            seconds, metrics = timed_run(workload, name)
            entry = {
                "jobs": size,
                "nodes": workload.cluster.num_nodes,
                "scheduler": name,
                "generate_s": generate_s,
                "seconds": seconds,
                "jobs_per_s": size / seconds,
                "slots": metrics.num_slots,  # type: ignore[attr-defined]
            }
            if args.count_calls:
                entry["calls_per_job"] = function_calls(workload, name) / size
            scaling.append(entry)
            rows.append(
                [
                    f"{size:,}",
                    str(workload.cluster.num_nodes),
                    name,
                    f"{seconds:.1f}",
                    f"{size / seconds:,.0f}",
                    str(entry["slots"]),
                    f"{entry['calls_per_job']:,.0f}" if args.count_calls else "",
                ]
            )
    for name in args.scaling_schedulers.split(","):
        own = [e for e in scaling if e["scheduler"] == name]
        if len(own) > 1:
            first, last = own[0], own[-1]
            growth = (last["seconds"] / first["seconds"]) / (last["jobs"] / first["jobs"])  # type: ignore[operator]
            calls = ""
            if args.count_calls:
                calls = f"{last['calls_per_job'] / first['calls_per_job']:.2f}"  # type: ignore[operator]
            rows.append(["", "", f"{name}: growth per job, last / first", f"{growth:.2f}", "", "", calls])
    print_table(
        f"Scaling: synthetic Philly statistics, nodes proportional to jobs (one core #{core})",
        ["jobs", "nodes", "scheduler", "seconds", "jobs / s", "slots", "calls / job"],
        rows,
    )
    records["scaling"] = scaling
    print(f"wrote {write_json(args.out, records)}")


if __name__ == "__main__":
    main()
