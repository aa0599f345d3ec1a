"""The controller (`dl2 serve`) measured: slot latency under load, kills, and JCTs on a Philly slice.

1. Load (`--part load`): the first N jobs of the Philly week (N = 40, 400, 2,000) submitted at once on the
   352-node Philly cluster; the local API server and its simulated cluster run in a subprocess (pinned to one
   core), the controller in this process (pinned to the other), in active mode with the trained policy
   `models/dl2-philly` and DRF as the incumbent. Reported per size: the median and p99 wall time of a slot
   (read, decide, journal, resize, status: `Controller.run_slot`) over `--slots` slots, the share of it the
   policy takes, and the API requests per slot (the reads are five lists whatever the size; the rest are
   resizes and the status).
2. Kills (`--part kills`): `dl2 serve` as a process on a simulated cluster in lock step, SIGKILLed at `--kills`
   random points of its slot loop (seeded draws over `CRASH_POINTS` and the run's slots) and restarted each time;
   counted: resize requests sent twice in a slot, and records lost, added or duplicated against the same run by a
   controller that is never killed; and whether the JCTs are the simulator's.
3. JCTs (`--part philly`): a Philly slice (first `--philly-jobs` jobs on the first `--philly-nodes` nodes, bin
   packing), through the API in active mode with DRF deciding (the incumbent as the policy) and with
   `models/dl2-philly`, next to `dl2 simulate`'s run of the same workload with the same scheduler.

    .venv/bin/python benchmarks/kube_controller.py [--part load,kills,philly]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from common import environment, print_table, write_json

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.kube_helpers: the kill harness the slow test uses too
MODEL = ROOT / "models" / "dl2-philly"
CONFIG_SEED = 0
SERVER = """
import json, sys
from dataclasses import replace
from dl2.kube.apiserver import THIRD_PARTY_CRDS, LocalApiServer
from dl2.twin import simulate_cluster
from dl2.twin.workloads import first_jobs
from dl2.paths import REPO_ROOT
from dl2.sim.config import SimConfig
from dl2.workload.registry import load_workloads

philly = first_jobs(load_workloads("philly")[0], int(sys.argv[1]))
burst = replace(philly, jobs=tuple(replace(j, spec=replace(j.spec, arrival_s=0.0)) for j in philly.jobs))
server = LocalApiServer(crd_files=[*THIRD_PARTY_CRDS, REPO_ROOT / "k8s" / "crd-schedulerpolicy.yaml"]).start()
simulate_cluster(server, burst, SimConfig.realistic(seed=0))
print(json.dumps({"url": server.url}), flush=True)
sys.stdin.read()
"""


def models_root(folder: Path) -> Path:
    """`<folder>/dl2-policy/1` -> models/dl2-philly, as `dl2 serve --models-dir` reads versions."""
    (folder / "dl2-policy").mkdir(parents=True, exist_ok=True)
    link = folder / "dl2-policy" / "1"
    if not link.exists():
        link.symlink_to(MODEL)
    return folder


def policy(mode: str = "active") -> dict[str, Any]:
    return {
        "apiVersion": "dl2.io/v1alpha1",
        "kind": "SchedulerPolicy",
        "metadata": {"name": "default"},
        "spec": {"mode": mode, "model": {"name": "dl2-policy", "version": "1"}, "incumbent": "drf"},
    }


# -- 1. load ------------------------------------------------------------------------------------------------


def load_size(num_jobs: int, slots: int, folder: Path) -> dict[str, Any]:
    from kubernetes import client

    from dl2.kube.controller import Controller, ControllerConfig
    from dl2.kube.models import directory_loader

    cores = sorted(os.sched_getaffinity(0))
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(num_jobs)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        cwd=ROOT, preexec_fn=lambda: os.sched_setaffinity(0, {cores[-1]}),
    )  # fmt: skip
    try:
        url = json.loads(server.stdout.readline())["url"]
        os.sched_setaffinity(0, {cores[0]})
        configuration = client.Configuration()
        configuration.host, configuration.retries = url, False
        api = client.ApiClient(configuration)
        api.user_agent = "dl2-serve/bench"
        client.CustomObjectsApi(api).create_cluster_custom_object("dl2.io", "v1alpha1", "schedulerpolicies", policy())
        config = ControllerConfig("bench", decision_log=folder / f"decisions-{num_jobs}", clock="cluster")
        controller = Controller(api, config, directory_loader(models_root(folder / "models")))
        controller.request_timeout_s = 60.0
        controller.call.timeout_s = 60.0
        controller.refresh_policy(
            client.CustomObjectsApi(api).get_cluster_custom_object("dl2.io", "v1alpha1", "schedulerpolicies", "default")
        )
        core = client.CoreV1Api(api)
        walls, calls, decide, jobs, resizes, phases = [], [], [], [], [], []
        model = controller.runtime.current.scheduler
        original = model.schedule

        def timed(view: Any) -> Any:
            started = time.perf_counter()
            allocation = original(view)
            decide.append(time.perf_counter() - started)
            return allocation

        model.schedule = timed  # type: ignore[method-assign]
        for _ in range(slots):
            data = core.read_namespaced_config_map("dl2-clock", "dl2-system").data
            report = controller.run_slot(int(data["slot"]), float(data["time_s"]), float(data["slot_s"]))
            walls.append(report.seconds)
            calls.append(report.api_calls)
            jobs.append(report.jobs)
            resizes.append(report.resizes)
            phases.append(report.phases)
            request = urllib.request.Request(f"{url}/dl2/cluster/advance", data=b"{}", method="POST")
            with urllib.request.urlopen(request, timeout=600) as response:
                if json.loads(response.read())["done"]:
                    break
    finally:
        server.stdin.close()
        server.wait(60)
        os.sched_setaffinity(0, set(cores))
    steady = slice(1, None)  # the first slot resizes every job from its request at once
    return {
        "jobs": num_jobs,
        "slots": len(walls),
        "active_jobs_median": float(np.median(jobs)),
        "first_slot_s": walls[0],
        "median_slot_s": float(np.median(walls[steady])),
        "p99_slot_s": float(np.percentile(walls[steady], 99)),
        "median_policy_s": float(np.median(decide[steady])),
        **{f"median_{name}_s": float(np.median([p[name] for p in phases[steady]])) for name in phases[0]},
        "median_api_calls_per_slot": float(np.median(calls[steady])),
        "max_api_calls_per_slot": int(max(calls[steady])),
        "first_slot_api_calls": calls[0],
        "median_resizes_per_slot": float(np.median(resizes[steady])),
    }


# -- 2. kills -----------------------------------------------------------------------------------------------


def kills(num_kills: int, seed: int, folder: Path, num_jobs: int, num_nodes: int) -> dict[str, Any]:
    from dl2.twin import simulate_cluster
    from dl2.twin.workloads import first_jobs, first_nodes
    from dl2.kube.controller import CRASH_POINTS
    from dl2.kube.models import directory_loader
    from dl2.sim.config import SimConfig
    from dl2.sim.decision_log import read_log
    from dl2.workload.registry import load_workloads
    from tests.kube_helpers import POLICIES, ServeUnderKills, kube_server, uninterrupted_run

    workload = first_nodes(first_jobs(load_workloads("philly")[0], num_jobs), num_nodes)
    workload = replace(workload, jobs=tuple(replace(j, spec=replace(j.spec, arrival_s=j.spec.arrival_s / 50))
                                            for j in workload.jobs))  # fmt: skip
    sim = SimConfig.realistic(seed=CONFIG_SEED)
    models = models_root(folder / "models")
    reference, reference_jct, resized = uninterrupted_run(workload, sim, folder / "reference", directory_loader(models))
    slots = max(resized) + 1
    # a quarter of the points in the middle of a slot's resizes (after its first or second one, in slots that
    # resize), the rest at any other point of any slot; twice as many points as kills, at distinct slots (a point
    # its slot never reaches does not fire; arming stops after `num_kills` kills)
    rng = random.Random(seed)
    acting = [slot for slot, count in sorted(resized.items()) if count and slot > 0]
    middle = sorted(rng.sample(acting, min(len(acting), num_kills // 2)))
    others = sorted(
        rng.sample(
            [s for s in range(1, slots) if s not in middle], min(2 * num_kills - len(middle), slots - 1 - len(middle))
        )
    )
    plan = sorted(
        [(f"resized-{rng.randint(1, min(2, resized[s]))}", s) for s in middle]
        + [(rng.choice((*CRASH_POINTS[:3], "acted", "status")), s) for s in others],
        key=lambda kill: kill[1],
    )  # fmt: skip
    started = time.perf_counter()
    with kube_server() as server:
        cluster = simulate_cluster(server, workload, sim)
        server.create(POLICIES, None, policy())
        run = ServeUnderKills(server, cluster, folder, models, plan, limit=num_kills)
        run.run(slot_timeout_s=300)
        through_api = {j.job_id: j.finish_s for j in cluster.result().jobs}
        resizes = run.resizes()
    wall = time.perf_counter() - started
    records = read_log(folder / "decisions" / "dl2-local")
    keys = Counter((r.time_s, r.job_id) for r in records)
    reference_keys = {(r.time_s, r.job_id) for r in reference}
    return {
        "jobs": num_jobs,
        "nodes": num_nodes,
        "slots": slots,
        "planned_kills": len(plan),
        "kills": len(run.kills),
        "kill_points": dict(Counter(point for point, _ in run.kills)),
        "starts": run.starts,
        "resize_requests": sum(resizes.values()),
        "duplicate_resizes": sum(count - 1 for count in resizes.values()),
        "records": len(records),
        "reference_records": len(reference),
        "lost_records": len(reference_keys - set(keys)),
        "added_records": len(set(keys) - reference_keys),
        "duplicated_records": sum(count - 1 for count in keys.values()),
        "records_identical": records == reference,
        "jcts_identical_to_the_run_without_kills": through_api == reference_jct,
        "wall_s": wall,
    }


# -- 3. JCTs on a Philly slice ------------------------------------------------------------------------------


def philly(num_jobs: int, num_nodes: int, folder: Path) -> list[dict[str, Any]]:
    from dl2.twin import simulate_cluster
    from dl2.twin.workloads import first_jobs, first_nodes
    from dl2.kube.controller import Controller, ControllerConfig
    from dl2.kube.models import directory_loader
    from dl2.rl.learned import LearnedScheduler
    from dl2.schedulers.registry import make_scheduler
    from dl2.sim.config import Mode, SimConfig
    from dl2.sim.metrics import summarize
    from dl2.sim.run import interference_model, speed_model
    from dl2.sim.simulator import simulate
    from tests.kube_helpers import POLICIES, clock, controller_api, heuristic_loader, kube_server

    workload = first_nodes(first_jobs(load_philly(), num_jobs), num_nodes)
    sim = SimConfig.realistic(seed=CONFIG_SEED)
    speed = speed_model(Mode.REALISTIC)
    rows = []
    runs = [
        ("drf", heuristic_loader("drf", placer="binpack"), lambda: make_scheduler("drf", speed, False, "binpack")),
        ("dl2-philly", directory_loader(models_root(folder / "models")),
         lambda: LearnedScheduler.from_dir(MODEL, compat=False)),
    ]  # fmt: skip
    for name, loader, direct in runs:
        started = time.perf_counter()
        with kube_server() as server:
            cluster = simulate_cluster(server, workload, sim, placer="binpack")
            server.create(POLICIES, None, policy())
            config = ControllerConfig(name, decision_log=folder / f"philly-{name}", clock="cluster", placer="binpack")
            controller = Controller(controller_api(server, name), config, loader)
            controller.refresh_policy(server.objects(POLICIES)["default"])
            slots = fallbacks = 0
            while True:
                report = controller.run_slot(*clock(server))
                fallbacks += report.fallback is not None and report.decided
                slots += 1
                if cluster.done:
                    break
                cluster.advance()
            through_api = summarize(cluster.result(name))
            jct_api = {j.job_id: j.jct_s for j in cluster.result(name).jobs}
        api_s = time.perf_counter() - started
        reference = simulate(workload, direct(), sim, speed, interference_model())
        jct_sim = {j.job_id: j.jct_s for j in reference.jobs}
        simulated = summarize(reference)
        rows.append(
            {
                "policy": name,
                "jobs": num_jobs,
                "nodes": num_nodes,
                "slots": slots,
                "avg_jct_h_api": through_api.avg_jct_s / 3600,
                "avg_jct_h_simulate": simulated.avg_jct_s / 3600,
                "p99_jct_h_api": through_api.p99_jct_s / 3600,
                "p99_jct_h_simulate": simulated.p99_jct_s / 3600,
                "identical_jobs": sum(jct_api[k] == jct_sim[k] for k in jct_sim),
                "fallback_slots": fallbacks,
                "wall_s_api": api_s,
            }
        )
    return rows


def load_philly() -> Any:
    from dl2.workload.registry import load_workloads

    return load_workloads("philly")[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", default="load,kills,philly", help="which parts to run (comma-separated)")
    parser.add_argument("--jobs", default="40,400,2000", help="load: workload sizes")
    parser.add_argument("--slots", type=int, default=20, help="load: slots timed per size")
    parser.add_argument("--kills", type=int, default=20, help="kills: SIGKILLs of dl2 serve")
    parser.add_argument("--kill-jobs", type=int, default=30, help="kills: Philly jobs of the run")
    parser.add_argument("--kill-nodes", type=int, default=4, help="kills: Philly nodes of the run")
    parser.add_argument("--seed", type=int, default=0, help="kills: seed of the kill points")
    parser.add_argument("--philly-jobs", type=int, default=100)
    parser.add_argument("--philly-nodes", type=int, default=16)
    parser.add_argument("--out", default="kube_controller.json", help="file name under benchmarks/results/")
    args = parser.parse_args()
    parts = set(args.part.split(","))
    results: dict[str, Any] = {"environment": environment(), "arguments": vars(args)}
    with tempfile.TemporaryDirectory(prefix="dl2-bench-") as scratch:
        folder = Path(scratch)
        if "load" in parts:
            sizes = [load_size(int(n), args.slots, folder) for n in args.jobs.split(",")]
            results["load"] = sizes
            print_table(
                f"slot latency: Philly's first N jobs at once on 352 nodes, dl2-philly active ({args.slots} slots)",
                ["jobs", "active", "first slot (s)", "median (ms)", "p99 (ms)", "observe", "decide", "of it policy",
                 "record", "act", "API calls/slot", "max", "resizes/slot"],
                [[str(s["jobs"]), f"{s['active_jobs_median']:.0f}", f"{s['first_slot_s']:.2f}",
                  f"{1000 * s['median_slot_s']:.1f}", f"{1000 * s['p99_slot_s']:.1f}",
                  f"{1000 * s['median_observe_s']:.0f}", f"{1000 * s['median_decide_s']:.0f}",
                  f"{1000 * s['median_policy_s']:.0f}", f"{1000 * s['median_record_s']:.0f}",
                  f"{1000 * s['median_act_s']:.0f}", f"{s['median_api_calls_per_slot']:.0f}",
                  str(s["max_api_calls_per_slot"]), f"{s['median_resizes_per_slot']:.0f}"] for s in sizes],
            )  # fmt: skip
        if "kills" in parts:
            outcome = kills(args.kills, args.seed, folder / "kills", args.kill_jobs, args.kill_nodes)
            results["kills"] = outcome
            print_table(
                "dl2 serve SIGKILLed at random points of its slot loop, restarted each time",
                ["kills", "slots", "resize requests", "duplicate resizes", "records", "lost", "added",
                 "duplicated", "identical to no kills", "wall (s)"],
                [[str(outcome["kills"]), str(outcome["slots"]), str(outcome["resize_requests"]),
                  str(outcome["duplicate_resizes"]), str(outcome["records"]), str(outcome["lost_records"]),
                  str(outcome["added_records"]), str(outcome["duplicated_records"]),
                  str(outcome["records_identical"] and outcome["jcts_identical_to_the_run_without_kills"]),
                  f"{outcome['wall_s']:.0f}"]],
            )  # fmt: skip
        if "philly" in parts:
            rows = philly(args.philly_jobs, args.philly_nodes, folder / "philly")
            results["philly"] = rows
            print_table(
                f"Philly's first {args.philly_jobs} jobs on {args.philly_nodes} nodes (binpack): through the API "
                "in active mode vs dl2 simulate",
                ["policy", "slots", "avg JCT API (h)", "avg JCT simulate (h)", "p99 API (h)", "p99 simulate (h)",
                 "jobs with the same JCT", "fallback slots", "wall (s)"],
                [[r["policy"], str(r["slots"]), f"{r['avg_jct_h_api']:.3f}", f"{r['avg_jct_h_simulate']:.3f}",
                  f"{r['p99_jct_h_api']:.2f}", f"{r['p99_jct_h_simulate']:.2f}",
                  f"{r['identical_jobs']}/{r['jobs']}", str(r["fallback_slots"]), f"{r['wall_s_api']:.0f}"]
                 for r in rows],
            )  # fmt: skip
    path = write_json(args.out, results)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
