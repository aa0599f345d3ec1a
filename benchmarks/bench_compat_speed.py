"""Compatibility mode vs the DL2 authors' simulator: same work, same results, how much faster (one core).

The authors' times are constants: their public code (pengyanghua/DL2 @ 2e54920, Python 2.7.18, numpy 1.16.6,
scipy 1.2.3; no licence, so it cannot live in this repository) was timed on the 2-vCPU development machine, one
core via taskset, through a small driver that builds their Job objects from these exact workload files and
disables their supervised-learning recorder `_state()` (outcome-neutral, checked). 47 s is the time quoted for
their DRF on the default workloads. Their SRTF is our `srtf-fraction`.
"""

from __future__ import annotations

import argparse
import json
import time

from common import environment, pin_to_one_core, print_table, write_json

from dl2.paths import reference_dir
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import Mode, SimConfig
from dl2.sim.metrics import summarize
from dl2.sim.run import speed_model
from dl2.sim.simulator import simulate
from dl2.workload.reference import load_reference_workloads

AUTHORS_SECONDS_MEASURED = {
    ("drf", "default"): 58.0,
    ("optimus", "default"): 60.0,
    ("fifo", "default"): 54.1,
    ("srtf-fraction", "default"): 55.8,
    ("drf", "small"): 27.8,
    ("optimus", "small"): 36.8,
    ("fifo", "small"): 42.2,
    ("srtf-fraction", "small"): 38.0,
}
AUTHORS_SECONDS_QUOTED = {("drf", "default"): 47.0}
THEIR_NAMES = {"drf": "DRF", "fifo": "FIFO", "srtf-fraction": "SRTF", "optimus": "Optimus"}
BAR = 20.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="timed repetitions (the best is kept)")
    args = parser.parse_args()
    core = pin_to_one_core()
    started = time.perf_counter()
    speed = speed_model(Mode.COMPAT)
    setup_s = time.perf_counter() - started
    reference = json.loads((reference_dir() / "results-uniform.json").read_text())
    rows, records = [], []
    for setting in ("default", "small"):
        workloads = load_reference_workloads(reference_dir() / f"traces-{setting}-uniform.json")
        for name in ("drf", "optimus", "fifo", "srtf-fraction"):
            best = float("inf")
            jcts: list[float] = []
            for _ in range(args.repeat):
                tick = time.perf_counter()
                results = [simulate(w, make_scheduler(name, speed, True), SimConfig.compat(), speed) for w in workloads]
                best = min(best, time.perf_counter() - tick)
                jcts = [summarize(r).avg_jct_slots for r in results]
            theirs = reference[setting][THEIR_NAMES[name]]["avg_jct_slots"]
            ours = sum(jcts) / len(jcts)
            measured = AUTHORS_SECONDS_MEASURED[(name, setting)]
            record = {
                "scheduler": name,
                "setting": setting,
                "ours_s": best,
                "authors_measured_s": measured,
                "speedup_vs_measured": measured / best,
                "authors_quoted_s": AUTHORS_SECONDS_QUOTED.get((name, setting)),
                "ours_avg_jct_slots": ours,
                "theirs_avg_jct_slots": theirs,
                "jct_difference": ours / theirs - 1.0,
            }
            quoted = record["authors_quoted_s"]
            if quoted is not None:
                record["speedup_vs_quoted"] = quoted / best
            records.append(record)
            rows.append(
                [
                    name,
                    setting,
                    f"{best:.2f}",
                    f"{measured:.1f}",
                    f"{measured / best:.1f}x",
                    f"{quoted / best:.1f}x" if quoted else "",
                    f"{ours:.2f}",
                    f"{theirs:.2f}",
                    f"{100 * (ours / theirs - 1):+.2f}%",
                ]
            )
    print_table(
        f"Compatibility mode vs the authors' simulator (10 workloads each, one core #{core}, best of {args.repeat})",
        [
            "scheduler",
            "setting",
            "ours s",
            "theirs s",
            "speed-up",
            "vs quoted 47 s",
            "our JCT",
            "their JCT",
            "JCT diff",
        ],
        rows,
    )
    drf = next(r for r in records if r["scheduler"] == "drf" and r["setting"] == "default")
    verdict = drf["speedup_vs_measured"] >= BAR and drf["speedup_vs_quoted"] >= BAR
    print(
        f"DRF, default workloads: {drf['speedup_vs_quoted']:.1f}x the quoted 47 s, {drf['speedup_vs_measured']:.1f}x "
        f"their code timed here; bar {BAR:.0f}x: {'met' if verdict else 'NOT met'}"
    )
    path = write_json(
        "compat_speed.json",
        {
            "environment": environment(),
            "core": core,
            "speed_model_setup_s": setup_s,
            "bar_speedup": BAR,
            "runs": records,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
