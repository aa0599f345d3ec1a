"""`dl2 cluster`: a real Kubernetes control plane on 127.0.0.1, optionally running a workload on the cluster twin."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from dl2.cli.common import UsageError, add_sim_options, add_truth_option, check_range, check_seed, sim_config
from dl2.core.limits import MAX_JOBS, MAX_NODES, MAX_TIME_S
from dl2.io import print_json, write_json_atomic
from dl2.schedulers.registry import PLACERS
from dl2.sim.config import Mode

DEFAULT_KUBECONFIG = Path("work/dl2-cluster.kubeconfig")
REAL_PREFIX = "dl2-real"
"""Real nodes are named dl2-real-0, dl2-real-1, ..."""
REAL_NODES_HELP = (
    "also start N real nodes (at most 16; `make real-nodes`, as root): a kubelet on its own containerd with runc "
    f"each, Nodes {REAL_PREFIX}-0.. labelled dl2.io/real-node=true. No registry: a pod runs an image imported into "
    "the nodes' containerd (dl2.local/hello:1 is; `ctr --address SOCKET --namespace k8s.io images import ARCHIVE` "
    "with the sockets printed, or RealNodes.import_image), with imagePullPolicy Never; not with --simulate"
)
"""Literal values (checked against `testbed.controlplane.nodes` by the tests): importing that package here would slow
every dl2 command's start."""
FINAL_SLOT_WAIT_S = 60.0
"""In lock step, how long the cluster waits, once done, for the controller to report the final slot."""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "cluster",
        help="run a local Kubernetes control plane (optionally a simulated cluster on it)",
        description="Start etcd, kube-apiserver (client certificates and ServiceAccount tokens, RBAC, an audit "
        "log), kube-controller-manager, kube-scheduler and kwok on 127.0.0.1 (built by `make kube-assets`), install "
        "the job operators' CRDs and dl2's CRD, namespace, ServiceAccounts and RBAC (k8s/), and write a cluster-admin "
        "kubeconfig for kubectl and one for `dl2 serve` as its ServiceAccount. With --simulate, a workload's jobs "
        "are submitted at their arrival times as PyTorchJobs and Volcano Jobs on kwok nodes and trained by dl2's "
        "simulator (the cluster twin, realistic mode), one slot per tick. With --real-nodes, real kubelets (each on "
        "its own containerd with runc) join it and run real pods. Stops on SIGINT or SIGTERM (real nodes and all "
        "they made are taken back) and prints the JCT of every finished job.",
    )
    parser.add_argument("--port", type=int, default=0, help="the API server's port on 127.0.0.1 (0: a free one)")
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        default=DEFAULT_KUBECONFIG,
        help=f"cluster-admin kubeconfig to write (default {DEFAULT_KUBECONFIG}); the one for `dl2 serve` goes "
        "beside it",
    )
    parser.add_argument(
        "--folder", type=Path, default=None, help="keep the control plane's files here (default: a temporary folder)"
    )
    parser.add_argument(
        "--crd", type=Path, action="append", default=[], help="another CRD file to install (repeatable)"
    )
    parser.add_argument("--real-nodes", type=int, default=0, metavar="N", help=REAL_NODES_HELP)
    parser.add_argument(
        "--training-operator",
        action="store_true",
        help="also run Kubeflow's training operator (make training-operator), which makes and removes PyTorchJobs' "
        "pods on the real nodes; needs --real-nodes",
    )
    parser.add_argument("--simulate", metavar="WORKLOAD", default=None, help="run this workload (name or file)")
    parser.add_argument("--jobs", type=int, default=None, help="take the workload's first N jobs")
    parser.add_argument("--nodes", type=int, default=None, help="take the cluster's first N nodes")
    parser.add_argument(
        "--allreduce-fraction",
        type=float,
        default=0.0,
        help="make this share of the jobs all-reduce PyTorchJobs (the workload then differs from dl2 simulate's)",
    )
    parser.add_argument("--tick-s", type=float, default=1.0, help="wall seconds per simulated slot")
    parser.add_argument("--namespaces", default="team-a,team-b", help="managed namespaces, comma-separated")
    parser.add_argument("--kueue-fraction", type=float, default=0.0, help="share of jobs submitted to Kueue")
    add_sim_options(parser)
    add_truth_option(parser)
    parser.add_argument("--seed", type=int, default=0, help="seed of the workload and the simulation")
    parser.add_argument(
        "--reference", default=None, metavar="SCHEDULER", help="at the end, also run this heuristic on the workload"
    )
    parser.add_argument(
        "--lockstep",
        action="store_true",
        help="advance a slot only once the controller (dl2 serve --clock cluster) has reported it done in the "
        "SchedulerPolicy's status",
    )
    parser.add_argument("--exit-when-done", action="store_true", help="stop once every job has finished")
    parser.add_argument("--out", type=Path, default=None, help="write the final report (JSON) here")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    check_range("--port", args.port, 0, 65535)
    check_range("--tick-s", args.tick_s, 0.001, MAX_TIME_S)
    check_range("--allreduce-fraction", args.allreduce_fraction, 0, 1)
    check_range("--kueue-fraction", args.kueue_fraction, 0, 1)
    check_real_nodes(args.real_nodes, args.simulate)
    if args.training_operator:
        check_training_operator(args.real_nodes)
    if args.jobs is not None:
        check_range("--jobs", args.jobs, 1, MAX_JOBS)
    if args.nodes is not None:
        check_range("--nodes", args.nodes, 1, MAX_NODES)
    if args.simulate is None and (
        any(value is not None for value in (args.jobs, args.nodes, args.reference)) or args.lockstep
    ):
        raise UsageError("--jobs, --nodes, --reference and --lockstep need --simulate")
    if args.simulate is None and args.truth is not None:
        raise UsageError("--truth is how a simulated cluster's jobs behave: give --simulate a workload")
    for path in args.crd:
        if not path.is_file():
            raise UsageError(f"--crd {path}: no such file")
    check_seed(args.seed)
    return _serve(args)


def check_real_nodes(count: int, simulate: str | None) -> None:
    """UsageError, naming --real-nodes, for a count out of range, with --simulate, or where real nodes cannot run
    (`make real-nodes` has not run, or not root)."""
    from testbed.controlplane.nodes.layout import MAX_NODES as MAX_REAL_NODES
    from testbed.controlplane.nodes.layout import missing

    check_range("--real-nodes", count, 0, MAX_REAL_NODES)
    if count and simulate is not None:
        raise UsageError(
            "--real-nodes runs real pods; --simulate's jobs are trained by the simulator on kwok nodes: give one or "
            "the other"
        )
    absent = missing() if count else []
    if absent:
        raise UsageError(f"--real-nodes: real nodes cannot run here, missing: {'; '.join(absent)}")


def check_training_operator(real_nodes: int) -> None:
    """UsageError, naming --training-operator, without real nodes or where the operator is not built."""
    from testbed.controlplane.assets import TRAINING_OPERATOR

    if not real_nodes:
        raise UsageError("--training-operator makes pods that run on real nodes: give --real-nodes N too")
    absent = TRAINING_OPERATOR.missing()
    if absent:
        raise UsageError(f"--training-operator: {', '.join(absent)} not built (make training-operator)")


def _workload(args: argparse.Namespace) -> Any:
    from dl2.cli.common import load
    from testbed.twin.workloads import first_jobs, first_nodes, with_allreduce

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


def _serve(args: argparse.Namespace) -> int:
    from testbed.controlplane.apply import install_crds
    from testbed.controlplane.assets import AssetsMissing
    from testbed.controlplane.nodes import HELLO_IMAGE, NODE_LABEL, RealNodes
    from testbed.controlplane.nodes.service import ApiService
    from testbed.controlplane.operator import TrainingOperator
    from testbed.twin import TwinOptions
    from testbed.twin.local import LocalCluster

    workload = config = options = None
    if args.simulate is not None:
        config = sim_config(args, args.seed)
        if config.mode is not Mode.REALISTIC:
            raise UsageError("a simulated cluster runs --mode realistic (pods have nodes: placement matters)")
        workload = _workload(args)
        namespaces = tuple(name.strip() for name in args.namespaces.split(",") if name.strip())
        try:
            options = TwinOptions(namespaces=namespaces, kueue_fraction=args.kueue_fraction, seed=args.seed)
        except ValueError as error:
            raise UsageError(str(error)) from None
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        local = LocalCluster(args.folder, workload, config, _heuristic_placer(args), options, args.port, args.truth)
    except AssetsMissing as error:
        raise UsageError(str(error)) from None
    with local, contextlib.ExitStack() as stack:
        # entered after the cluster, so left before it: the nodes delete their pods through the API on the way out
        nodes = (
            stack.enter_context(RealNodes(local.plane, args.real_nodes, prefix=REAL_PREFIX))
            if args.real_nodes
            else None
        )
        # pods reach the API server at the `kubernetes` Service, as in-cluster clients do
        service = stack.enter_context(ApiService(local.plane, nodes.nodes[0])) if nodes is not None else None
        if args.training_operator:
            stack.enter_context(TrainingOperator(local.plane))
        if args.crd:
            install_crds(local.admin(), *args.crd)
        kubeconfig = local.plane.write_kubeconfig(args.kubeconfig)
        serve_kubeconfig = local.plane.write_kubeconfig(
            args.kubeconfig.with_name(f"{args.kubeconfig.stem}-serve{args.kubeconfig.suffix}"),
            token=local.identities.controller if local.identities else None,
        )
        print_json(
            {
                "url": local.url,
                "kubeconfig": str(kubeconfig),
                "serve_kubeconfig": str(serve_kubeconfig),
                "folder": str(local.folder),
                "audit_log": str(local.plane.audit_log),
                "startup_s": round(local.plane.startup_s, 1),
                **({} if nodes is None else {"real_nodes": _real_nodes(nodes)}),
                **({} if service is None else {"kubernetes_service": f"{service.address}:{service.port}"}),
                **({"training_operator": True} if args.training_operator else {}),
            }
        )
        sys.stdout.flush()
        if nodes is not None:
            print(
                f"dl2 cluster: real nodes {', '.join(nodes.names)} Ready (nodeSelector {NODE_LABEL}=true); no "
                f"registry: pods run images imported into every node's containerd ({HELLO_IMAGE} is), with "
                "imagePullPolicy: Never",
                file=sys.stderr,
            )
        print(
            f"dl2 cluster: Kubernetes API on {local.url} (kubectl --kubeconfig {kubeconfig} get pods -A); "
            "Ctrl-C stops it",
            file=sys.stderr,
        )
        if local.twin is not None:
            _tick(local, args.tick_s, stop, args.lockstep, args.exit_when_done)
        else:
            stop.wait()
        if local.twin is not None:
            _report(local.twin, workload, config, args)
    return 0


def _real_nodes(nodes: Any) -> list[dict[str, str]]:
    """What a user of each real node needs: its name, its InternalIP, and its containerd's socket (images are
    imported there: `ctr --address SOCKET --namespace k8s.io images import ARCHIVE`)."""
    return [
        {"name": node.name, "address": node.address, "containerd": str(node.socket), "folder": str(node.folder)}
        for node in nodes.nodes
    ]


def _heuristic_placer(args: argparse.Namespace) -> str:
    """The twin's placer: a heuristic by name (a learned placer plugs in as a scheduler extender)."""
    placer: str = getattr(args, "placer", None) or "load-balance"
    if placer not in PLACERS:
        raise UsageError(f"dl2 cluster places with a heuristic ({', '.join(sorted(PLACERS))}), got '{placer}'")
    return placer


def _tick(local: Any, tick_s: float, stop: threading.Event, lockstep: bool, exit_when_done: bool) -> None:
    """One slot per tick (in lock step: per tick once the controller reported the slot done) until stopped."""
    from tqdm import tqdm

    from dl2.core import Dl2Error
    from testbed.twin.lockstep import controller_done

    twin = local.twin
    rest = twin.rest
    progress = tqdm(total=len(twin.jobs), desc="jobs finished", unit="job", file=sys.stderr)
    try:
        while not twin.done and not stop.wait(tick_s):
            if lockstep and not controller_done(rest):
                continue
            try:
                status = twin.advance(1)
            except Dl2Error as error:  # e.g. a controller that starves every job for stall_slots slots
                print(f"dl2 cluster: the simulation stopped: {error}", file=sys.stderr)
                return
            progress.update(status["finished"] - progress.n)
        deadline = time.monotonic() + FINAL_SLOT_WAIT_S
        while lockstep and not controller_done(rest) and time.monotonic() < deadline and not stop.is_set():
            stop.wait(tick_s)  # the last records are written at the slot after the last one: let them be
        if not exit_when_done:
            stop.wait()
    finally:
        progress.close()


def _report(cluster: Any, workload: Any, config: Any, args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    from dl2.sim.metrics import summarize
    from testbed.twin import reference_result

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
        reference = summarize(reference_result(workload, args.reference, config, _heuristic_placer(args), args.truth))
        report["reference"] = reference.to_json_dict()
        table.add_row(f"simulator, {args.reference}", f"{reference.avg_jct_s:,.1f}", str(reference.num_jobs))
    Console(stderr=True).print(table)  # stdout carries JSON lines only
    if args.out is not None:
        write_json_atomic(args.out, report)
    else:
        sys.stdout.write(json.dumps({"final": report["status"], "finished_jobs": len(finished)}) + "\n")
