"""`dl2 cluster`: a Kubernetes API server on 127.0.0.1, optionally running a workload as a simulated cluster."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

from dl2.cli.common import UsageError, add_sim_options, check_range, check_seed, sim_config
from dl2.core.limits import MAX_JOBS, MAX_NODES, MAX_TIME_S
from dl2.io import print_json, write_json_atomic
from dl2.schedulers.registry import PLACERS
from dl2.sim.config import Mode

DEFAULT_KUBECONFIG = Path("work/dl2-cluster.kubeconfig")
FINAL_SLOT_WAIT_S = 60.0
"""In lock step, how long the cluster waits, once done, for the controller to report the final slot."""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "cluster",
        help="run a local Kubernetes API server (optionally a simulated cluster)",
        description="Serve the Kubernetes API on 127.0.0.1 (kmock with resource versions, watches, status and scale "
        "subresources, leases, conflicts, faults and request recording), with the third-party CRDs installed, and "
        "write a kubeconfig for kubectl and the official client. With --simulate, a workload's jobs are submitted "
        "at their arrival times as PyTorchJobs and Volcano Jobs and run on its nodes by dl2's simulator (realistic "
        "mode), one slot per tick. Admin endpoints (faults, records, the simulated clock) are under /dl2/. Stops on "
        "SIGINT or SIGTERM and prints the JCT of every finished job.",
    )
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: a free one)")
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        default=DEFAULT_KUBECONFIG,
        help=f"kubeconfig to write (default {DEFAULT_KUBECONFIG})",
    )
    parser.add_argument(
        "--crd", type=Path, action="append", default=[], help="another CRD file to install (repeatable)"
    )
    parser.add_argument("--record", type=Path, default=None, help="append every request (RBAC terms) to this JSONL")
    parser.add_argument("--history", type=int, default=1000, help="changes per resource a watch can resume across")
    parser.add_argument("--bookmark-interval-s", type=float, default=60.0, help="bookmarks on idle watches")
    parser.add_argument("--simulate", metavar="WORKLOAD", default=None, help="run this workload (name or file)")
    parser.add_argument("--jobs", type=int, default=None, help="take the workload's first N jobs")
    parser.add_argument("--nodes", type=int, default=None, help="take the cluster's first N nodes")
    parser.add_argument(
        "--allreduce-fraction",
        type=float,
        default=0.0,
        help="make this share of the jobs all-reduce PyTorchJobs (the workload then differs from dl2 simulate's)",
    )
    parser.add_argument(
        "--tick-s", type=float, default=1.0, help="wall seconds per simulated slot (0: POST /dl2/cluster/advance)"
    )
    parser.add_argument("--namespaces", default="team-a,team-b", help="managed namespaces, comma-separated")
    parser.add_argument("--kueue-fraction", type=float, default=0.0, help="share of jobs submitted to Kueue")
    add_sim_options(parser)
    parser.add_argument("--seed", type=int, default=0, help="seed of the workload, the simulation and the server")
    parser.add_argument(
        "--reference", default=None, metavar="SCHEDULER", help="at the end, also run this heuristic on the workload"
    )
    parser.add_argument(
        "--lockstep",
        action="store_true",
        help="advance a slot only once the controller (dl2 serve --clock cluster) has reported it done in the "
        "SchedulerPolicy's status (installs the SchedulerPolicy CRD)",
    )
    parser.add_argument("--exit-when-done", action="store_true", help="stop once every job has finished")
    parser.add_argument("--out", type=Path, default=None, help="write the final report (JSON) here")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    check_range("--port", args.port, 0, 65535)
    check_range("--tick-s", args.tick_s, 0, MAX_TIME_S)
    check_range("--history", args.history, 1, 1_000_000)
    check_range("--bookmark-interval-s", args.bookmark_interval_s, 0.001, MAX_TIME_S)
    check_range("--allreduce-fraction", args.allreduce_fraction, 0, 1)
    check_range("--kueue-fraction", args.kueue_fraction, 0, 1)
    if args.jobs is not None:
        check_range("--jobs", args.jobs, 1, MAX_JOBS)
    if args.nodes is not None:
        check_range("--nodes", args.nodes, 1, MAX_NODES)
    if args.simulate is None and (
        any(value is not None for value in (args.jobs, args.nodes, args.reference)) or args.lockstep
    ):
        raise UsageError("--jobs, --nodes, --reference and --lockstep need --simulate")
    check_seed(args.seed)
    return asyncio.run(_serve(args))


def _workload(args: argparse.Namespace) -> Any:
    from dl2.cli.common import load
    from dl2.twin.workloads import first_jobs, first_nodes, with_allreduce

    workloads = load(args.simulate, args.seed)
    if len(workloads) != 1:
        raise UsageError(f"{args.simulate} holds {len(workloads)} workloads; a simulated cluster runs one")
    workload = workloads[0]
    try:
        if args.nodes is not None:
            workload = first_nodes(workload, args.nodes)
        if args.jobs is not None:
            workload = first_jobs(workload, args.jobs)
        return with_allreduce(workload, args.allreduce_fraction, args.seed)
    except ValueError as error:
        raise UsageError(str(error)) from None


async def _serve(args: argparse.Namespace) -> int:
    from dl2.kube.apiserver import THIRD_PARTY_CRDS, LocalApiServer

    workload = config = None
    if args.simulate is not None:
        config = sim_config(args, args.seed)
        if config.mode is not Mode.REALISTIC:
            raise UsageError("a simulated cluster runs --mode realistic (pods have nodes: placement matters)")
        workload = _workload(args)
    from dl2.paths import REPO_ROOT

    policy_crd = [REPO_ROOT / "k8s" / "crd-schedulerpolicy.yaml"] if args.lockstep else []
    server = LocalApiServer(
        port=args.port,
        crd_files=[*THIRD_PARTY_CRDS, *policy_crd, *args.crd],
        record_path=args.record,
        seed=args.seed,
        history=args.history,
        bookmark_interval_s=args.bookmark_interval_s,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with server.serving():
        server.write_kubeconfig(args.kubeconfig)
        cluster = None
        if workload is not None and config is not None:
            cluster = _start_cluster(server, workload, config, args)
        print_json({"url": server.url, "kubeconfig": str(args.kubeconfig), "admin": f"{server.url}/dl2/"})
        sys.stdout.flush()
        print(
            f"dl2 cluster: Kubernetes API on {server.url} (kubectl --kubeconfig {args.kubeconfig} get pods -A); "
            "Ctrl-C stops it",
            file=sys.stderr,
        )
        ticker = None
        if cluster is not None and args.tick_s > 0:
            ready = _controller_done(server) if args.lockstep else None
            ticker = asyncio.create_task(_tick(cluster, args.tick_s, stop if args.exit_when_done else None, ready))
        await stop.wait()
        if ticker is not None:
            ticker.cancel()
    if cluster is not None:
        _report(cluster, workload, config, args)
    return 0


def _start_cluster(server: Any, workload: Any, config: Any, args: argparse.Namespace) -> Any:
    from dl2.twin import ClusterOptions, simulate_cluster

    namespaces = tuple(name.strip() for name in args.namespaces.split(",") if name.strip())
    try:
        options = ClusterOptions(namespaces=namespaces, kueue_fraction=args.kueue_fraction, seed=args.seed)
    except ValueError as error:
        raise UsageError(str(error)) from None
    return simulate_cluster(server, workload, config, _heuristic_placer(args), options).cluster


def _heuristic_placer(args: argparse.Namespace) -> str:
    """The simulated cluster's placer: a heuristic by name (a learned placer plugs in as a scheduler extender)."""
    placer: str = args.placer or "load-balance"
    if placer not in PLACERS:
        raise UsageError(f"dl2 cluster places with a heuristic ({', '.join(sorted(PLACERS))}), got '{placer}'")
    return placer


def _controller_done(server: Any) -> Any:
    from dl2.twin.lockstep import controller_done

    return lambda: controller_done(server)


async def _tick(cluster: Any, tick_s: float, stop_when_done: asyncio.Event | None, ready: Any = None) -> None:
    """One slot per tick (in lock step: per tick once `ready()`, i.e. the controller reported the slot done)."""
    from tqdm import tqdm

    from dl2.core import Dl2Error

    progress = tqdm(total=len(cluster.jobs), desc="jobs finished", unit="job", file=sys.stderr)
    try:
        while not cluster.done:
            await asyncio.sleep(tick_s)
            if ready is not None and not ready():
                continue
            try:
                status = cluster.advance(1)
            except Dl2Error as error:  # e.g. a controller that starves every job for stall_slots slots
                print(f"dl2 cluster: the simulation stopped: {error}", file=sys.stderr)
                return
            progress.update(status["finished"] - progress.n)
        waited = 0.0
        while ready is not None and not ready() and waited < FINAL_SLOT_WAIT_S:  # the last records are written
            await asyncio.sleep(tick_s)  # at the slot after the last one: let the controller complete them
            waited += tick_s
        if stop_when_done is not None:
            stop_when_done.set()
    finally:
        progress.close()


def _report(cluster: Any, workload: Any, config: Any, args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    from dl2.sim.metrics import summarize
    from dl2.twin import reference_result

    results = cluster.job_results()
    report: dict[str, Any] = {"status": cluster.status(), "jobs": results}
    finished = [r["jct_s"] for r in results if r["jct_s"] is not None]
    table = Table(title=f"{workload.name} through the API ({len(finished)} of {len(results)} jobs finished)")
    table.add_column("run")
    table.add_column("avg JCT (s)", justify="right")
    table.add_column("jobs", justify="right")
    if finished:
        table.add_row("through the API", f"{sum(finished) / len(finished):,.1f}", str(len(finished)))
    if cluster.done and not report["status"]["cancelled"]:
        report["metrics"] = summarize(cluster.result()).to_json_dict()
    if args.reference is not None:
        reference = summarize(reference_result(workload, args.reference, config, _heuristic_placer(args)))
        report["reference"] = reference.to_json_dict()
        table.add_row(f"simulator, {args.reference}", f"{reference.avg_jct_s:,.1f}", str(reference.num_jobs))
    Console(stderr=True).print(table)  # stdout carries JSON lines only
    if args.out is not None:
        write_json_atomic(args.out, report)
    else:
        sys.stdout.write(json.dumps({"final": report["status"], "finished_jobs": len(finished)}) + "\n")
