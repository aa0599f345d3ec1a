"""Run the DL2 authors' own simulator (pengyanghua/DL2) on our workload files and print JCTs and wall times as JSON.

Python 2.7 (their code is Python 2 only); `bench_compat_speed.py` runs it with the interpreter of a throwaway
virtualenv (numpy 1.16.6, scipy 1.2.3; see benchmarks/README.md). Their code is imported from a checkout given
by path and is never copied here (it has no licence).

What it does, as their validation (`comparison.py`) does: build their `Job` objects from the jobs of a
`data/reference/dl2-official/traces-*.json` file (so both simulators run exactly the same jobs), set their
cluster parameters from the file's header, then step each heuristic environment (`DRF_Env`, `FIFO_Env`,
`SRTF_Env`, `Optimus_Env`) until it ends and read `get_results()`. Their supervised-learning recorder
`_state()` is replaced by a no-op: it builds an NN input and a label for every task a heuristic places and
is only read by their SL training; `--check-recorder` runs the first workload with and without it on the
same job objects and compares every job's JCT.

Their ties (equal priority-queue keys) fall to Python 2 object addresses; the job objects are built once and
reused by every repetition (their `Job.reset()` is called on arrival, as in their validation), so repetitions
in one process give the same results.
"""

# Python 2.7 code: percent formatting, the print function from __future__, no unpacking in list displays.
# ruff: noqa: UP010, UP031, RUF005
from __future__ import print_function

import argparse
import json
import logging
import os
import platform
import sys
import time
import types

ENVIRONMENTS = {
    "drf": ("drf_env", "DRF_Env", "DRF"),
    "fifo": ("fifo_env", "FIFO_Env", "FIFO"),
    "srtf": ("srtf_env", "SRTF_Env", "SRTF"),
    "optimus": ("optimus_env", "Optimus_Env", "Optimus"),
}
"""Our scheduler name -> (their module, their environment class, their name)."""

MODELS = ["resnet-50", "vgg-16", "resnext-110", "inception-bn", "seq2seq", "cnn-text-classification", "dssm", "wlm"]
"""Their job types 1-8 in their order (`trace.py`); the type only feeds their NN state."""

REQUIRED_FILES = ["parameters.py", "job.py", "cluster.py", "speed.py", "scheduler_base.py", "config_speed.txt"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", required=True, help="a checkout of pengyanghua/DL2")
    parser.add_argument("--workloads", required=True, help="a data/reference/dl2-official/traces-*.json file")
    parser.add_argument("--scheduler", action="append", choices=sorted(ENVIRONMENTS), help="repeatable; default all")
    parser.add_argument("--repeat", type=int, default=1, help="timed repetitions of each scheduler (best kept)")
    parser.add_argument("--check-recorder", action="store_true", help="compare runs with and without `_state()`")
    args = parser.parse_args()
    started = time.time()
    code = os.path.abspath(args.code)
    missing = [name for name in REQUIRED_FILES if not os.path.isfile(os.path.join(code, name))]
    if missing:
        sys.exit("authors_driver: %s is not a checkout of pengyanghua/DL2 (missing %s)" % (code, ", ".join(missing)))
    with open(args.workloads) as handle:
        reference = json.load(handle)
    modules = import_authors_code(code)
    configure(modules["parameters"], reference)
    traces = [build_trace(modules, jobs) for jobs in reference["traces"]]
    setup_s = time.time() - started
    runs = []
    for name in args.scheduler or sorted(ENVIRONMENTS):
        runs.append(time_scheduler(modules, name, traces, max(1, args.repeat)))
        if args.check_recorder:
            runs[-1]["recorder_check"] = check_recorder(modules, name, traces[0])
    print(
        json.dumps(
            {
                "python": platform.python_version(),
                "numpy": modules["numpy"].__version__,
                "scipy": modules["scipy"].__version__,
                "code": code,
                "workloads": args.workloads,
                "setup_s": setup_s,
                "runs": runs,
            },
            sort_keys=True,
        )
    )


def import_authors_code(code):
    """Their modules by name. `speed.py` fits its speed functions at import from `config_speed.txt` in the
    working directory, and imports plotting modules it never uses: without matplotlib, stand-ins are put in
    their place (nothing of them is called)."""
    os.chdir(code)
    sys.path.insert(0, code)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        stand_in_plotting_modules()
    import numpy
    import scipy

    modules = {"numpy": numpy, "scipy": scipy}
    for name in ["parameters", "job", "speed"] + sorted(module for module, _, _ in ENVIRONMENTS.values()):
        modules[name] = __import__(name)
    return modules


def stand_in_plotting_modules():
    names = ["matplotlib", "matplotlib.pyplot", "matplotlib.cm", "matplotlib.ticker", "mpl_toolkits"]
    names.append("mpl_toolkits.mplot3d")
    stand_ins = {name: types.ModuleType(name) for name in names}
    stand_ins["matplotlib"].pyplot = stand_ins["matplotlib.pyplot"]
    stand_ins["matplotlib"].cm = stand_ins["matplotlib.cm"]
    stand_ins["matplotlib"].ticker = stand_ins["matplotlib.ticker"]
    stand_ins["matplotlib.ticker"].MaxNLocator = None
    stand_ins["mpl_toolkits"].mplot3d = stand_ins["mpl_toolkits.mplot3d"]
    stand_ins["mpl_toolkits.mplot3d"].Axes3D = None
    sys.modules.update(stand_ins)


def configure(parameters, reference):
    """Their module-level settings from the file's header (their code reads `parameters.X` at run time)."""
    slots = reference["slots_per_node"]
    if slots["cpu"] != slots["gpu"] or reference["max_workers_per_job"] != reference["max_ps_per_job"]:
        sys.exit("authors_driver: their simulator has one slot count per node and one cap for workers and PS")
    window = reference["window_J"]
    parameters.CLUSTER_NUM_NODES = reference["num_nodes"]
    parameters.NUM_RESR_TYPES = 2
    parameters.NUM_RESR_SLOTS = slots["cpu"]
    parameters.TS_DURATION = float(reference["slot_seconds"])
    parameters.MAX_NUM_WORKERS = reference["max_workers_per_job"]
    parameters.SCHED_WINDOW_SIZE = window
    parameters.STATE_DIM = (parameters.STATE_DIM[0], window)
    parameters.ACTION_DIM = 3 * window + 1
    sizes = set(len(jobs) for jobs in reference["traces"])
    if len(sizes) != 1:
        sys.exit("authors_driver: their simulator ends a run at a fixed job count; workloads differ in size")
    parameters.TOT_NUM_JOBS = sizes.pop()


def build_trace(modules, jobs):
    """Their trace: arrival slot -> their `Job` objects, in job-id order as their generator makes them."""
    numpy = modules["numpy"]
    speed_funcs = modules["speed"].speed_funcs
    trace = {}
    for record in sorted(jobs, key=lambda r: r["job_id"]):
        job = modules["job"].Job(record["job_id"], MODELS.index(record["model"]) + 1, None)
        job.arrv_time = record["arrival_slot"]
        job.model = record["model"]
        job.epoch_size = record["samples_per_epoch_unit"]
        job.resr_worker = numpy.array([record["worker_demand"]["cpu"], record["worker_demand"]["gpu"]])
        job.resr_ps = numpy.array([record["ps_demand"]["cpu"], record["ps_demand"]["gpu"]])
        job.speed_func = speed_funcs[record["model"]]
        total = record["total_epochs"]
        job.num_epochs = int(total) if total == int(total) else total
        job.real_num_epochs = float(record["real_epochs"])
        trace.setdefault(job.arrv_time, []).append(job)
    return trace


def skip_recorder(label_job_id, role="worker"):
    """Stands in for their `Scheduler._state` (SL samples): nothing a heuristic decides depends on it."""


def run_to_end(modules, name, trace, record_samples=False):
    module, environment, their_name = ENVIRONMENTS[name]
    logger = logging.getLogger("authors_driver")
    logger.setLevel(logging.INFO)  # as their default LOG_MODE: their debug lines are built but not written
    env = getattr(modules[module], environment)(their_name, trace, logger)
    if not record_samples:
        env._state = skip_recorder
    tick, cpu = time.time(), cpu_s()
    while not env.end:
        env.step()
    return env, time.time() - tick, cpu_s() - cpu


def cpu_s():
    times = os.times()
    return times[0] + times[1]


def time_scheduler(modules, name, traces, repeat):
    best_s, best_cpu_s, walls, results = float("inf"), float("inf"), [], []
    for _ in range(repeat):
        walls, cpus, results = [], [], []
        for trace in traces:
            env, wall_s, used_cpu_s = run_to_end(modules, name, trace)
            walls.append(wall_s)
            cpus.append(used_cpu_s)
            results.append(env.get_results())
        best_s, best_cpu_s = min(best_s, sum(walls)), min(best_cpu_s, sum(cpus))
    return {
        "scheduler": name,
        "repeat": repeat,
        "best_s": best_s,
        "best_cpu_s": best_cpu_s,
        "last_wall_s": walls,
        "avg_jct_slots": [jct for _, jct, _, _ in results],
        "makespan_slots": [makespan for _, _, makespan, _ in results],
    }


def check_recorder(modules, name, trace):
    without, without_s, _ = run_to_end(modules, name, trace)
    jcts_without = without.get_job_jcts()
    with_recorder, with_s, _ = run_to_end(modules, name, trace, record_samples=True)
    jcts_with = with_recorder.get_job_jcts()
    return {
        "identical_job_jcts": jcts_with == jcts_without,
        "without_s": without_s,
        "with_s": with_s,
        "avg_jct_slots_without": without.get_results()[1],
        "avg_jct_slots_with": with_recorder.get_results()[1],
    }


if __name__ == "__main__":
    main()
