"""The controller (`dl2 serve`) measured: slot latency under load, kills, and JCTs on a Philly slice.

Everything runs on the real control plane (`testbed.controlplane`: etcd, kube-apiserver with RBAC, kube-controller-
manager, kube-scheduler, kwok) with the cluster twin (`testbed.twin`), the controller as its ServiceAccount.

1. Load (`--part load`): the first N jobs of the Philly week (N = 40, 400, 2,000) submitted at once on the 352-node
   Philly cluster; the control plane and the twin run in a subprocess pinned to one core, the controller in this
   process pinned to the other (`--cores shared`: neither pinned), in active mode with the trained policy
   `models/dl2-philly` and DRF as the incumbent. Reported per size: the median and p99 wall time of a slot (observe
   from the informers' caches once they reach the clock's barrier, decide, journal, resize, status:
   `Controller.run_slot`) over `--slots` slots, the share of it the policy takes, and the API requests per slot
   (resizes and the status: the reads come from watches).
2. Kills (`--part kills`): `dl2 serve` as a process on the twin in lock step, SIGKILLed at `--kills` random points
   of its slot loop (seeded draws over `CRASH_POINTS` and the run's slots) and restarted each time; counted from
   the API server's audit log: resize requests sent twice in a slot; from the decision log: records lost, added
   or duplicated against the same run by a controller that is never killed; and whether the JCTs are the same.
   Also measured: leader failover with two replicas (`--part failover`), the time from the leader's SIGKILL to
   the standby's first slot.
3. JCTs (`--part philly`): a Philly slice (first `--philly-jobs` jobs on the first `--philly-nodes` nodes, bin
   packing), through the API in active mode with DRF deciding (the incumbent as the policy) and with
   `models/dl2-philly`, next to `dl2 simulate`'s run of the same workload with the same scheduler.

    .venv/bin/python benchmarks/kube_controller.py [--part load,kills,failover,philly]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from common import environment, print_table, write_json
from controller_cpu import GcClock

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "models" / "dl2-philly"
CONFIG_SEED = 0
TWIN = """
import json, sys
from dataclasses import replace
from pathlib import Path
from dl2.sim.config import SimConfig
from testbed.twin.local import LocalCluster
from testbed.twin.workloads import first_jobs
from dl2.workload.registry import load_workloads

import time
philly = first_jobs(load_workloads("philly")[0], int(sys.argv[1]))
burst = replace(philly, jobs=tuple(replace(j, spec=replace(j.spec, arrival_s=0.0)) for j in philly.jobs))
started = time.perf_counter()
with LocalCluster(Path(sys.argv[2]), burst, SimConfig.realistic(seed=0)) as local:
    local.create_policy("active", 1, "drf", guardrails=json.loads(sys.argv[3]))
    ready = {"kubeconfig": str(local.serve_kubeconfig), "admin": str(local.admin_kubeconfig),
             "start_s": time.perf_counter() - started}
    print(json.dumps(ready), flush=True)
    for line in sys.stdin:
        status = local.twin.advance()
        print(json.dumps({"done": status["done"], "twin_s": local.twin.slot_seconds[-1]}), flush=True)
"""
"""The control plane and the twin, in a process of their own: one line out when up, one line in per slot."""


def models_root(folder: Path, model: Path = MODEL) -> Path:
    """`<folder>/dl2-policy/1` -> `model` (models/dl2-philly), as `dl2 serve --models-dir` reads versions."""
    (folder / "dl2-policy").mkdir(parents=True, exist_ok=True)
    link = folder / "dl2-policy" / "1"
    if not link.exists():
        link.symlink_to(model.resolve())
    return folder


def policy(mode: str = "active") -> dict[str, Any]:
    return {
        "apiVersion": "dl2.io/v1alpha1",
        "kind": "SchedulerPolicy",
        "metadata": {"name": "default"},
        "spec": {"mode": mode, "model": {"name": "dl2-policy", "version": "1"}, "incumbent": "drf"},
    }


# -- 1. load ------------------------------------------------------------------------------------------------


def shipped_guardrails() -> dict[str, int]:
    """The guardrails of the sample policy `k8s/schedulerpolicy.yaml`."""
    import yaml

    guardrails: dict[str, int] = yaml.safe_load((ROOT / "k8s" / "schedulerpolicy.yaml").read_text())["spec"][
        "guardrails"
    ]
    return guardrails


def load_size(
    num_jobs: int,
    slots: int,
    folder: Path,
    guardrails: dict[str, int] | None = None,
    placement: str = "split",
    model: Path = MODEL,
) -> dict[str, Any]:
    """One size; `guardrails` those of the policy (None: none, every proposal applied); `placement`: `split` pins the
    control plane with the twin to one core and the controller to the other, `shared` lets both use every core
    (as a control plane with more than one core would serve the controller's writes); `model`: the folder served."""
    from kubernetes import config as kube_config

    from dl2.kube.controller import Controller, ControllerConfig
    from dl2.kube.models import directory_loader
    from dl2.kube.policy import POLICIES
    from dl2.kube.rest import Rest
    from testbed.harness import clock

    cores = sorted(os.sched_getaffinity(0))
    plane_cores, controller_cores = ({cores[-1]}, {cores[0]}) if placement == "split" else (set(cores), set(cores))
    twin = subprocess.Popen(
        [sys.executable, "-c", TWIN, str(num_jobs), str(folder / f"cluster-{num_jobs}-{bool(guardrails)}"),
         json.dumps(guardrails or {})], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True, cwd=ROOT, preexec_fn=lambda: os.sched_setaffinity(0, plane_cores),
    )  # fmt: skip
    try:
        started = json.loads(twin.stdout.readline())
        os.sched_setaffinity(0, controller_cores)
        api = kube_config.new_client_from_config(started["kubeconfig"])
        api.configuration.retries = False
        api.user_agent = "dl2-serve/bench"
        config = ControllerConfig(
            "bench", decision_log=folder / f"decisions-{num_jobs}-{bool(guardrails)}", clock="cluster",
            request_timeout_s=60.0, cache_timeout_s=120.0,
        )  # fmt: skip
        controller = Controller(api, config, directory_loader(models_root(folder / "load-models", model)))
        admin = Rest(kube_config.new_client_from_config(started["admin"]))  # the bench's reads, not the controller's
        controller.refresh_policy(admin.get(POLICIES, None, "default"))
        walls, calls, decide, jobs, resizes, phases, twin_s, gc_s, watches = [], [], [], [], [], [], [], [], []
        gc_after: list[float] = []
        """Per slot, the collector's seconds from its end to the next slot's start (its idle time: `Controller.run_slot`
        holds automatic collections off within a slot)."""
        model = controller.runtime.current.scheduler
        original = model.schedule

        def timed(view: Any) -> Any:
            started = time.perf_counter()
            allocation = original(view)
            decide.append(time.perf_counter() - started)
            return allocation

        model.schedule = timed  # type: ignore[method-assign]
        collector = GcClock()
        gc.callbacks.append(collector)
        for _ in range(slots):
            now = clock(admin)
            collector.seconds = 0.0
            report = controller.run_slot(now.slot, now.time_s, now.slot_s, dict(now.resource_versions))
            gc_s.append(collector.seconds)
            watches.append({i.resource.key: [i.restarts, i.relists] for i in controller.cache.informers})
            walls.append(report.seconds)
            calls.append(report.api_calls)
            jobs.append(report.jobs)
            resizes.append(report.resizes)
            phases.append(report.phases)
            twin.stdin.write("advance\n")
            twin.stdin.flush()
            advanced = json.loads(twin.stdout.readline())
            twin_s.append(advanced["twin_s"])
            gc_after.append(collector.seconds - gc_s[-1])
            if advanced["done"]:
                break
        gc.callbacks.remove(collector)
        controller.cache.stop()
        controller.events.stop()
    finally:
        twin.stdin.close()
        twin.wait(120)
        os.sched_setaffinity(0, set(cores))
    steady = slice(1, None)  # the first slot resizes every job from its request at once
    return {
        "jobs": num_jobs,
        "guardrails": guardrails or {},
        "cores": placement,
        "slots": len(walls),
        "active_jobs_median": float(np.median(jobs)),
        "first_slot_s": walls[0],
        "median_slot_s": float(np.median(walls[steady])),
        "p99_slot_s": float(np.percentile(walls[steady], 99)),
        "median_policy_s": float(np.median(decide[steady])),
        **{f"median_{name}_s": float(np.median([p[name] for p in phases[steady]])) for name in phases[0]},
        "median_gc_s": float(np.median(gc_s[steady])),
        "max_gc_s": float(max(gc_s[steady])),
        "max_gc_between_slots_s": float(max(gc_after[steady])),
        "median_api_calls_per_slot": float(np.median(calls[steady])),
        "max_api_calls_per_slot": int(max(calls[steady])),
        "first_slot_api_calls": calls[0],
        "median_resizes_per_slot": float(np.median(resizes[steady])),
        "per_slot": [
            {
                "seconds": wall,
                "api_calls": call,
                "resizes": resized,
                "gc_s": collected,
                "gc_after_s": after,
                **phase,
                "watch_restarts_relists": watched,
            }
            for wall, call, resized, collected, after, phase, watched in zip(
                walls, calls, resizes, gc_s, gc_after, phases, watches, strict=True
            )
        ],
        "twin_start_s": started["start_s"],
        "median_twin_slot_s": float(np.median(twin_s)),
    }


# -- 2. kills -----------------------------------------------------------------------------------------------


@contextmanager
def kube_env(folder: Path) -> Iterator[Any]:
    """A fresh control plane with dl2 installed, as the tests' `kube` fixture gives one."""
    from testbed.harness import KubeEnv
    from testbed.twin.local import LocalCluster

    with LocalCluster(folder) as local:
        assert local.identities is not None
        yield KubeEnv(local.plane, local.identities)


@contextmanager
def record_store(kind: str, folder: Path) -> Iterator[str]:
    """Where `dl2 serve` keeps its records: a folder, or `s3`: a bucket of versitygw (a real S3 server), the
    store a managed cluster's replicas share; its endpoint and credentials in the environment, as a pod's."""
    if kind == "folder":
        yield str(folder / "decisions")
        return
    from testbed.controlplane.objectstore import object_store

    with object_store(folder / "s3", folder / "s3-logs") as store, store.exported():
        yield f"{store.bucket('dl2')}/decisions"


def kills(
    num_kills: int, seed: int, folder: Path, num_jobs: int, num_nodes: int, store: str = "folder"
) -> dict[str, Any]:
    from dl2.kube.controller import CRASH_POINTS
    from dl2.kube.models import directory_loader
    from dl2.sim.config import SimConfig
    from dl2.sim.decision_log import read_store_log
    from dl2.sim.record_store import RecordStore
    from dl2.workload.registry import load_workloads
    from testbed.harness import Policies, ServeUnderKills, run_uninterrupted, running_twin
    from testbed.twin.workloads import first_jobs, first_nodes

    workload = first_nodes(first_jobs(load_workloads("philly")[0], num_jobs), num_nodes).denser(50)
    sim = SimConfig.realistic(seed=CONFIG_SEED)
    models = models_root(folder / "models")
    with kube_env(folder / "cluster") as kube:
        reference, reference_jct, resized = run_uninterrupted(
            kube, workload, sim, folder / "reference", directory_loader(models)
        )
        slots = max(resized) + 1
        # a quarter of the points in the middle of a slot's resizes (after its first or second one, in slots that
        # resize), the rest at any other point of any slot; twice as many points as kills, at distinct slots (a
        # point its slot never reaches does not fire; arming stops after `num_kills` kills)
        rng = random.Random(seed)
        acting = [slot for slot, count in sorted(resized.items()) if count and slot > 0]
        middle = sorted(rng.sample(acting, min(len(acting), num_kills // 2)))
        others = sorted(
            rng.sample(
                [s for s in range(1, slots) if s not in middle],
                min(2 * num_kills - len(middle), slots - 1 - len(middle)),
            )
        )
        plan = sorted(
            [(f"resized-{rng.randint(1, min(2, resized[s]))}", s) for s in middle]
            + [(rng.choice((*CRASH_POINTS[:3], "acted", "status")), s) for s in others],
            key=lambda kill: kill[1],
        )  # fmt: skip
        started = time.perf_counter()
        with record_store(store, folder) as log, running_twin(kube, workload, sim) as cluster:
            Policies(kube).create("active")
            run = ServeUnderKills(kube, cluster, folder, models, plan, limit=num_kills, decision_log=log)
            run.run(slot_timeout_s=300)
            through_api = {j.job_id: j.finish_s for j in cluster.result().jobs}
            resizes = run.resizes()
            wall = time.perf_counter() - started
            records = read_store_log(RecordStore(log).child("dl2-local"))
    keys = Counter((r.time_s, r.job_id) for r in records)
    reference_keys = {(r.time_s, r.job_id) for r in reference}
    return {
        "record_store": store,
        "jobs": num_jobs,
        "nodes": num_nodes,
        "slots": slots,
        "planned_kills": len(plan),
        "kills": len(run.kills),
        "kill_points": dict(Counter(point for point, _ in run.kills)),
        "starts": run.starts,
        "resize_requests": sum(resizes.values()),
        "reference_resizes": sum(resized.values()),
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


def failover(
    folder: Path, trials: int, lease_s: float = 15.0, renew_s: float = 10.0, retry_s: float = 2.0, store: str = "folder"
) -> dict:
    """Two `dl2 serve` replicas with the Deployment's Lease timing on the twin in lock step; the leader is
    SIGKILLed `trials` times at seeded slots; measured: seconds from the kill to the standby's first slot report."""
    import signal

    from dl2.kube.models import directory_loader  # noqa: F401  (the replicas load the same folder)
    from dl2.sim.config import SimConfig
    from dl2.workload.registry import load_workloads
    from testbed.harness import Policies, running_twin
    from testbed.twin.lockstep import clock_slot, reported_slot
    from testbed.twin.workloads import first_jobs, first_nodes

    workload = first_nodes(first_jobs(load_workloads("philly")[0], 30), 4)
    models = models_root(folder / "models")
    times: list[float] = []
    with (
        kube_env(folder / "cluster") as kube,
        record_store(store, folder) as decisions,
        running_twin(kube, workload, SimConfig.realistic(seed=CONFIG_SEED)) as cluster,
    ):
        Policies(kube).create("active")
        kubeconfig = kube.kubeconfig(folder / "kubeconfig", token=kube.identities.controller)
        replicas: dict[str, subprocess.Popen[bytes]] = {}

        def start(identity: str) -> None:
            command = [
                sys.executable, "-m", "dl2.cli.main", "serve", "--kubeconfig", str(kubeconfig), "--clock", "cluster",
                "--decision-log", decisions, "--models-dir", str(models), "--metrics-port", "0",
                "--metrics-host", "127.0.0.1", "--identity", identity, "--lease-s", str(lease_s),
                "--renew-deadline-s", str(renew_s), "--retry-s", str(retry_s), "--log-level", "WARNING",
            ]  # fmt: skip
            log = open(folder / f"{identity}.log", "ab")  # noqa: SIM115 (the process writes it)
            replicas[identity] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)

        def leader() -> str | None:
            from dl2.kube.rest import Resource

            lease = cluster.rest.get(Resource("coordination.k8s.io", "v1", "leases"), "dl2-system", "dl2-scheduler")
            return (lease.get("spec") or {}).get("holderIdentity")

        def advance_when_done(timeout_s: float) -> None:
            deadline = time.monotonic() + timeout_s
            while (reported_slot(cluster.rest) or -1) < clock_slot(cluster.rest):
                assert time.monotonic() < deadline, "no replica reported the slot"
                time.sleep(0.05)
            cluster.advance()

        try:
            start("replica-a")
            start("replica-b")
            for trial in range(trials):
                for _ in range(3):
                    advance_when_done(120)
                holder = leader()
                assert holder in replicas, holder
                slot = clock_slot(cluster.rest)
                killed = time.monotonic()
                os.kill(replicas[holder].pid, signal.SIGKILL)
                replicas[holder].wait()
                cluster.advance()  # the next slot: only the standby can report it
                deadline = killed + 4 * lease_s
                while (reported_slot(cluster.rest) or -1) < slot + 1:
                    assert time.monotonic() < deadline, f"trial {trial}: no failover within {4 * lease_s:g} s"
                    time.sleep(0.05)
                times.append(time.monotonic() - killed)
                start(holder)  # the killed pod is restarted, as its Deployment would
        finally:
            for process in replicas.values():
                if process.poll() is None:
                    process.terminate()
                    process.wait(30)
    return {
        "trials": trials,
        "lease_s": lease_s,
        "renew_deadline_s": renew_s,
        "retry_s": retry_s,
        "failover_s": times,
        "median_failover_s": float(np.median(times)),
        "max_failover_s": float(max(times)),
    }


# -- 3. JCTs on a Philly slice ------------------------------------------------------------------------------


def philly(num_jobs: int, num_nodes: int, folder: Path) -> list[dict[str, Any]]:
    from dl2.kube.controller import Controller, ControllerConfig
    from dl2.kube.models import directory_loader
    from dl2.rl.learned import LearnedScheduler
    from dl2.schedulers.registry import make_scheduler
    from dl2.sim.config import Mode, SimConfig
    from dl2.sim.metrics import summarize
    from dl2.sim.run import interference_model, speed_model
    from dl2.sim.simulator import simulate
    from testbed.harness import Policies, heuristic_loader, run_clock_slot, running_twin
    from testbed.twin.workloads import first_jobs, first_nodes

    workload = first_nodes(first_jobs(load_philly(), num_jobs), num_nodes)
    sim = SimConfig.realistic(seed=CONFIG_SEED)
    speed = speed_model(Mode.REALISTIC)
    rows = []
    runs = [
        ("drf", heuristic_loader("drf", placer="binpack"), lambda: make_scheduler("drf", speed, False, "binpack")),
        ("dl2-philly", directory_loader(models_root(folder / "models")),
         lambda: LearnedScheduler.from_dir(MODEL, compat=False)),
    ]  # fmt: skip
    with kube_env(folder / "cluster") as kube:
        for name, loader, direct in runs:
            started = time.perf_counter()
            policies = Policies(kube)
            policies.create("active")
            config = ControllerConfig(name, decision_log=folder / f"philly-{name}", clock="cluster", placer="binpack")
            controller = Controller(kube.controller_api(name), config, loader)
            with running_twin(kube, workload, sim, "binpack") as cluster:
                controller.refresh_policy(policies.read())
                slots = fallbacks = calls = 0
                while True:
                    report = run_clock_slot(controller, cluster.rest)
                    fallbacks += report.fallback is not None and report.decided
                    calls += report.api_calls
                    slots += 1
                    if cluster.done:
                        break
                    cluster.advance()
                through_api = summarize(cluster.result(name))
                jct_api = {j.job_id: j.jct_s for j in cluster.result(name).jobs}
            controller.cache.stop()
            controller.events.stop()
            kube.reset()
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
                    "api_calls_per_slot": calls / slots,
                    "wall_s_api": api_s,
                }
            )
    return rows


def load_philly() -> Any:
    from dl2.workload.registry import load_workloads

    return load_workloads("philly")[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", default="load,kills,failover,philly", help="which parts to run (comma-separated)")
    parser.add_argument("--failovers", type=int, default=5, help="failover: leader SIGKILLs")
    parser.add_argument("--jobs", default="40,400,2000", help="load: workload sizes")
    parser.add_argument("--slots", type=int, default=20, help="load: slots timed per size")
    parser.add_argument(
        "--guarded", default="2000", help="load: sizes also run with the sample policy's guardrails ('' for none)"
    )
    parser.add_argument(
        "--cores",
        choices=("split", "shared"),
        default="split",
        help="load: split pins the control plane and the twin to one core, the controller to another; shared pins "
        "nothing",
    )
    parser.add_argument("--kills", type=int, default=20, help="kills: SIGKILLs of dl2 serve")
    parser.add_argument("--kill-jobs", type=int, default=30, help="kills: Philly jobs of the run")
    parser.add_argument("--kill-nodes", type=int, default=4, help="kills: Philly nodes of the run")
    parser.add_argument("--seed", type=int, default=0, help="kills: seed of the kill points")
    parser.add_argument(
        "--record-store",
        choices=("folder", "s3"),
        default="s3",
        help="kills, failover: where dl2 serve keeps its records (s3: a bucket of versitygw, a real S3 server)",
    )
    parser.add_argument("--philly-jobs", type=int, default=100)
    parser.add_argument("--philly-nodes", type=int, default=16)
    parser.add_argument(
        "--out",
        default="kube_controller.json",
        help="file name under benchmarks/results/ (docs/results.md names "
        "kube_controller_load.json for --part load, kube_controller_kills_philly.json for the rest)",
    )
    parser.add_argument(
        "--model", type=Path, default=MODEL, help="load: the model folder served (one naming a lookahead runs in it)"
    )
    args = parser.parse_args()
    parts = set(args.part.split(","))
    results: dict[str, Any] = {"environment": environment(), "arguments": {**vars(args), "model": str(args.model)}}
    with tempfile.TemporaryDirectory(prefix="dl2-bench-") as scratch:
        folder = Path(scratch)
        if "load" in parts:
            sizes = [
                load_size(int(n), args.slots, folder, None, args.cores, args.model) for n in args.jobs.split(",") if n
            ]
            sizes += [
                load_size(int(n), args.slots, folder, shipped_guardrails(), args.cores, args.model)
                for n in args.guarded.split(",")
                if n
            ]
            results["load"] = sizes
            print_table(
                f"slot latency: Philly's first N jobs at once on 352 nodes, {args.model.name} active "
                f"({args.slots} slots)",
                ["jobs", "guardrails", "cores", "active", "first slot (s)", "median (ms)", "p99 (ms)", "observe",
                 "of it wait", "decide", "of it policy", "record", "act", "gc", "API calls/slot", "max",
                 "resizes/slot"],
                [[str(s["jobs"]), "shipped" if s["guardrails"] else "none", s["cores"],
                  f"{s['active_jobs_median']:.0f}", f"{s['first_slot_s']:.2f}",
                  f"{1000 * s['median_slot_s']:.1f}", f"{1000 * s['p99_slot_s']:.1f}",
                  f"{1000 * s['median_observe_s']:.0f}", f"{1000 * s['median_wait_s']:.0f}",
                  f"{1000 * s['median_decide_s']:.0f}",
                  f"{1000 * s['median_policy_s']:.0f}", f"{1000 * s['median_record_s']:.0f}",
                  f"{1000 * s['median_act_s']:.0f}", f"{1000 * s['median_gc_s']:.0f}",
                  f"{s['median_api_calls_per_slot']:.0f}",
                  str(s["max_api_calls_per_slot"]), f"{s['median_resizes_per_slot']:.0f}"] for s in sizes],
            )  # fmt: skip
        if "kills" in parts:
            outcome = kills(args.kills, args.seed, folder / "kills", args.kill_jobs, args.kill_nodes, args.record_store)
            results["kills"] = outcome
            print_table(
                "dl2 serve SIGKILLed at random points of its slot loop, restarted each time "
                f"(records: {args.record_store})",
                ["kills", "slots", "resize requests", "duplicate resizes", "records", "lost", "added",
                 "duplicated", "identical to no kills", "wall (s)"],
                [[str(outcome["kills"]), str(outcome["slots"]), str(outcome["resize_requests"]),
                  str(outcome["duplicate_resizes"]), str(outcome["records"]), str(outcome["lost_records"]),
                  str(outcome["added_records"]), str(outcome["duplicated_records"]),
                  str(outcome["records_identical"] and outcome["jcts_identical_to_the_run_without_kills"]),
                  f"{outcome['wall_s']:.0f}"]],
            )  # fmt: skip
        if "failover" in parts:
            outcome = failover(folder / "failover", args.failovers, store=args.record_store)
            results["failover"] = outcome
            print_table(
                "leader failover: two dl2 serve replicas (Lease 15 s, renew deadline 10 s, retry 2 s), the leader "
                "SIGKILLed",
                ["trials", "median (s)", "max (s)", "each (s)"],
                [[str(outcome["trials"]), f"{outcome['median_failover_s']:.1f}", f"{outcome['max_failover_s']:.1f}",
                  ", ".join(f"{t:.1f}" for t in outcome["failover_s"])]],
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
