"""Compatibility mode vs the DL2 authors' simulator, timed in the same run on one core.

Three timings per scheduler (DRF, Optimus, FIFO, SRTF: ours is `srtf-fraction`) and setting (their 10 default and
10 small workloads): our simulation in-process (the speed model built beforehand), the whole `dl2 simulate --mode
compat --json` process (interpreter start, imports, speed model, workload loading, simulation, output), and the
authors' own simulator (pengyanghua/DL2, Python 2.7) through `authors_driver.py` on the same workload files. Each
is measured `--repeat` times in interleaved rounds, so that a load spike on a shared machine hits all three alike,
and the best is kept; CPU seconds are recorded beside wall seconds. Their code has no licence and is never part of
this repository: `--authors-code` names a checkout the user made (benchmarks/README.md). Without it, or without its
Python 2.7 environment, the table has our two timings only and says why.

The JCTs are checked: ours against theirs from this run, within 2% (FIFO's results depend on the order of
equal-key ties, which their code takes from Python 2 memory addresses: reported, not checked), and against
the published `results-uniform.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import environment, pin_to_one_core, print_table, project_path, write_json

from dl2.paths import reference_dir
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import Mode, SimConfig
from dl2.sim.metrics import summarize
from dl2.sim.run import speed_model
from dl2.sim.simulator import simulate
from dl2.workload.reference import load_reference_workloads

ROOT = Path(__file__).resolve().parent.parent
DRIVER = Path(__file__).resolve().parent / "authors_driver.py"
DEFAULT_AUTHORS_CODE = os.environ.get("DL2_AUTHORS_CODE", str(ROOT / "work" / "authors-dl2"))
DEFAULT_PYTHON2 = os.environ.get("DL2_AUTHORS_PYTHON", str(ROOT / "work" / "py27" / "bin" / "python"))
SCHEDULERS = ("drf", "optimus", "fifo", "srtf")
SETTINGS = ("default", "small")
THEIR_NAMES = {"drf": "DRF", "fifo": "FIFO", "srtf": "SRTF", "optimus": "Optimus"}
OUR_NAMES = {"srtf": "srtf-fraction"}
"""Our scheduler for each of theirs: their SRTF orders by the remaining fraction of epochs (`srtf-fraction`;
dl2's `srtf` orders by estimated remaining time)."""
TIE_ORDER_DEPENDENT = {"fifo"}
JCT_TOLERANCE = 0.02
BAR = 20.0


@dataclass
class Best:
    """The best wall and CPU seconds over the rounds, and the average JCT (slots) of each round."""

    wall_s: float = float("inf")
    cpu_s: float = float("inf")
    avg_jct_slots: list[float] | None = None

    def add(self, wall_s: float, cpu_s: float, avg_jct_slots: float) -> None:
        self.wall_s, self.cpu_s = min(self.wall_s, wall_s), min(self.cpu_s, cpu_s)
        self.avg_jct_slots = [*(self.avg_jct_slots or []), avg_jct_slots]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds of the three timings (best kept)")
    parser.add_argument("--authors-code", default=DEFAULT_AUTHORS_CODE, help="a checkout of pengyanghua/DL2")
    parser.add_argument("--python2", default=DEFAULT_PYTHON2, help="Python 2.7 with numpy 1.16.6 and scipy 1.2.3")
    parser.add_argument("--schedulers", nargs="+", choices=SCHEDULERS, default=list(SCHEDULERS))
    parser.add_argument("--settings", nargs="+", choices=SETTINGS, default=list(SETTINGS))
    args = parser.parse_args()
    core = pin_to_one_core()
    started = time.perf_counter()
    speed = speed_model(Mode.COMPAT)
    setup_s = time.perf_counter() - started
    authors_missing = why_authors_unavailable(Path(args.authors_code), Path(args.python2))
    if authors_missing:
        print(f"authors' simulator NOT timed: {authors_missing}; timing ours only (see benchmarks/README.md)")
    workloads = {s: load_reference_workloads(reference_dir() / f"traces-{s}-uniform.json") for s in args.settings}
    cells = [(setting, name) for setting in args.settings for name in args.schedulers]
    simulation = {cell: Best() for cell in cells}
    process = {cell: Best() for cell in cells}
    authors = {cell: Best() for cell in cells}
    for round_index in range(args.repeat):
        for setting, name in cells:
            print(f"round {round_index + 1}/{args.repeat}: {name} on {setting}", file=sys.stderr, flush=True)
            simulation[setting, name].add(*time_simulation(workloads[setting], name, speed))
            process[setting, name].add(*time_process(setting, name))
            if not authors_missing:
                authors[setting, name].add(*time_authors(Path(args.python2), Path(args.authors_code), setting, name))
    published = json.loads((reference_dir() / "results-uniform.json").read_text())
    records = [
        record(setting, name, simulation[setting, name], process[setting, name], authors[setting, name], published)
        for setting, name in cells
    ]
    print_results(records, core, args.repeat)
    path = write_json(
        "compat_speed.json",
        {
            "environment": environment(),
            "core": core,
            "repeat": args.repeat,
            "speed_model_setup_s": setup_s,
            "authors_code": None if authors_missing else project_path(Path(args.authors_code)),
            "authors_python": None if authors_missing else authors_python_version(Path(args.python2)),
            "authors_missing": authors_missing,
            "jct_tolerance": JCT_TOLERANCE,
            "bar_speedup": BAR,
            "runs": records,
        },
    )
    print(f"wrote {path}")
    if any(r["jct_agrees"] is False for r in records):
        sys.exit("JCTs disagree beyond the tolerance: the timings do not compare the same work")


def why_authors_unavailable(code: Path, python2: Path) -> str | None:
    """None when the authors' checkout and its interpreter are there, else why not (one line)."""
    if not (code / "drf_env.py").is_file() or not (code / "config_speed.txt").is_file():
        return f"no checkout of pengyanghua/DL2 at {code}"
    if not python2.is_file():
        return f"no Python 2.7 interpreter at {python2}"
    check = subprocess.run([str(python2), "-c", "import numpy, scipy"], capture_output=True, text=True, check=False)
    if check.returncode != 0:
        return f"{python2} cannot import numpy and scipy: {check.stderr.strip().splitlines()[-1]}"
    return None


def authors_python_version(python2: Path) -> str:
    """'2.7.18 numpy 1.16.6 scipy 1.2.3' for the interpreter that ran their code."""
    code = "import platform, numpy, scipy; print('%s numpy %s scipy %s' % "
    code += "(platform.python_version(), numpy.__version__, scipy.__version__))"
    return subprocess.run([str(python2), "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def time_simulation(workloads: list[Any], name: str, speed: Any) -> tuple[float, float, float]:
    """Our simulation of every workload in this process: wall s, CPU s, mean of the workloads' avg JCT."""
    tick, cpu = time.perf_counter(), time.process_time()
    ours = OUR_NAMES.get(name, name)
    results = [simulate(w, make_scheduler(ours, speed, True), SimConfig.compat(), speed) for w in workloads]
    wall_s, cpu_s = time.perf_counter() - tick, time.process_time() - cpu
    jcts = [summarize(r).avg_jct_slots for r in results]
    return wall_s, cpu_s, sum(jcts) / len(jcts)


def time_process(setting: str, name: str) -> tuple[float, float, float]:
    """The whole `dl2 simulate` command as a fresh process: wall s, CPU s (of the child), its mean avg JCT."""
    command = [sys.executable, "-m", "dl2.cli.main", "simulate", "--workload", f"dl2-official-{setting}"]
    command += ["--scheduler", OUR_NAMES.get(name, name), "--mode", "compat", "--json"]
    wall_s, cpu_s, stdout = run_child(command)
    return wall_s, cpu_s, float(json.loads(stdout)["avg_jct_slots"])


def time_authors(python2: Path, code: Path, setting: str, name: str) -> tuple[float, float, float]:
    """Their simulator through our driver: wall s and CPU s of its 10 runs (their imports and speed fit
    excluded), and the mean of the workloads' avg JCT."""
    workload_file = reference_dir() / f"traces-{setting}-uniform.json"
    command = [str(python2), str(DRIVER), "--code", str(code), "--workloads", str(workload_file)]
    command += ["--scheduler", name]
    _, _, stdout = run_child(command)
    run = json.loads(stdout)["runs"][0]
    jcts = run["avg_jct_slots"]
    return float(run["best_s"]), float(run["best_cpu_s"]), sum(jcts) / len(jcts)


def run_child(command: list[str]) -> tuple[float, float, str]:
    """Run a command from the project root (it inherits this process's one-core affinity): wall s, its CPU s
    and its stdout; a clear error with the end of its stderr if it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    tick = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    wall_s = time.perf_counter() - tick
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall_s, cpu_s, done.stdout


def record(
    setting: str, name: str, simulation: Best, process: Best, authors: Best, published: dict[str, Any]
) -> dict[str, Any]:
    assert simulation.avg_jct_slots and process.avg_jct_slots
    ours = simulation.avg_jct_slots[0]
    theirs_published = published[setting][THEIR_NAMES[name]]["avg_jct_slots"]
    row: dict[str, Any] = {
        "scheduler": name,
        "setting": setting,
        "simulation_s": simulation.wall_s,
        "simulation_cpu_s": simulation.cpu_s,
        "process_s": process.wall_s,
        "process_cpu_s": process.cpu_s,
        "ours_avg_jct_slots": ours,
        "process_avg_jct_slots": process.avg_jct_slots[0],
        "published_avg_jct_slots": theirs_published,
        "jct_difference_vs_published": ours / theirs_published - 1.0,
        "authors_s": None,
        "jct_agrees": None,
    }
    same_code = all(abs(j - ours) <= 1e-9 * ours for j in [*simulation.avg_jct_slots, *process.avg_jct_slots])
    if authors.avg_jct_slots:
        theirs = authors.avg_jct_slots[0]
        difference = ours / theirs - 1.0
        row |= {
            "authors_s": authors.wall_s,
            "authors_cpu_s": authors.cpu_s,
            "authors_avg_jct_slots": theirs,
            "authors_avg_jct_slots_by_round": authors.avg_jct_slots,
            "jct_difference_vs_authors": difference,
            "speedup_process": authors.wall_s / process.wall_s,
            "speedup_simulation": authors.wall_s / simulation.wall_s,
            "speedup_process_cpu": authors.cpu_s / process.cpu_s,
            "speedup_simulation_cpu": authors.cpu_s / simulation.cpu_s,
        }
        checked = name not in TIE_ORDER_DEPENDENT
        row["jct_agrees"] = same_code and (abs(difference) <= JCT_TOLERANCE if checked else True)
    elif not same_code:
        row["jct_agrees"] = False
    return row


def print_results(records: list[dict[str, Any]], core: int, repeat: int) -> None:
    timed = records[0]["authors_s"] is not None
    columns = ["scheduler", "setting", "simulation s", "process s"]
    if timed:
        columns += ["authors s", "speed-up process", "speed-up simulation", "CPU speed-up process"]
        columns += ["our JCT", "authors' JCT", "JCT diff"]
    else:
        columns += ["our JCT"]
    columns += ["published JCT", "diff"]
    rows = []
    for r in records:
        row = [r["scheduler"], r["setting"], f"{r['simulation_s']:.2f}", f"{r['process_s']:.2f}"]
        if timed:
            note = " (tie order)" if r["scheduler"] in TIE_ORDER_DEPENDENT else ""
            row += [f"{r['authors_s']:.1f}", f"{r['speedup_process']:.1f}x", f"{r['speedup_simulation']:.1f}x"]
            row += [f"{r['speedup_process_cpu']:.1f}x", f"{r['ours_avg_jct_slots']:.2f}"]
            row += [f"{r['authors_avg_jct_slots']:.2f}", f"{100 * r['jct_difference_vs_authors']:+.2f}%{note}"]
        else:
            row += [f"{r['ours_avg_jct_slots']:.2f}"]
        row += [f"{r['published_avg_jct_slots']:.2f}", f"{100 * r['jct_difference_vs_published']:+.2f}%"]
        rows.append(row)
    versus = "vs the authors' simulator" if timed else "(the authors' simulator not timed)"
    print_table(f"Compatibility mode {versus} (10 workloads each, one core #{core}, best of {repeat})", columns, rows)
    drf = next((r for r in records if r["scheduler"] == "drf" and r["setting"] == "default"), None)
    if timed and drf is not None:
        met = drf["speedup_process"] >= BAR
        print(
            f"DRF, default workloads: the `dl2 simulate` process {drf['speedup_process']:.1f}x and the simulation "
            f"{drf['speedup_simulation']:.1f}x faster than the authors' simulator timed in this run; "
            f"bar {BAR:.0f}x for the process: {'met' if met else 'NOT met'}"
        )
    agreement = [r for r in records if r["jct_agrees"] is not None]
    if agreement:
        failed = ", ".join(f"{r['scheduler']}/{r['setting']}" for r in agreement if not r["jct_agrees"])
        print(f"JCT agreement within {100 * JCT_TOLERANCE:.0f}%: {f'NOT met for {failed}' if failed else 'met'}")


if __name__ == "__main__":
    main()
