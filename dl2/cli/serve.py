"""`dl2 serve`: the Kubernetes controller that runs the promoted policy (`dl2.kube.controller`)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any

from dl2.cli.common import UsageError, check_range, check_seed
from dl2.core.limits import MAX_TIME_S
from dl2.schedulers.registry import PLACERS

CRASH_ENV = "DL2_SERVE_CRASH_AT"
"""Test hook: `point@slot[,point@slot...]` (`dl2.kube.controller.CRASH_POINTS`): the process SIGKILLs itself at the
first of them it reaches."""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the Kubernetes controller that resizes elastic training jobs with the pinned policy",
        description="Watch the SchedulerPolicy (dl2.io/v1alpha1) and, every slot, observe the PyTorchJobs and "
        "Volcano Jobs of namespaces labelled dl2.io/managed=true, ask the pinned model version (or the incumbent "
        "heuristic when the model cannot be used), clamp to the guardrails, write one decision record per job "
        "to the decision log and resize jobs where the mode allows (off, shadow, canary, active). Only the "
        "replica holding the Lease writes. Serves /metrics, /healthz and /readyz. Stops on SIGINT or SIGTERM.",
    )
    parser.add_argument("--kubeconfig", type=Path, default=None, help="kubeconfig (default: in-cluster config)")
    parser.add_argument("--policy-name", default="default", help="the SchedulerPolicy object (cluster-scoped)")
    parser.add_argument(
        "--decision-log",
        default="work/decisions",
        help="root of the decision logs: a folder, or object storage shared by the replicas (s3://bucket/prefix; "
        "credentials and endpoint from the AWS_* variables or workload identity)",
    )
    parser.add_argument(
        "--cluster-name", default="dl2-local", help="name of this cluster in the records (its log folder)"
    )
    parser.add_argument("--metrics-port", type=int, default=8080, help="port of /metrics, /healthz, /readyz (0: any)")
    parser.add_argument("--metrics-host", default="0.0.0.0", help="address of the metrics server")
    parser.add_argument("--slot-s", type=float, default=600.0, help="slot length on the wall clock (seconds)")
    parser.add_argument(
        "--clock",
        choices=("wall", "cluster"),
        default="wall",
        help="where slots come from: the wall clock, or a simulated cluster's dl2-system/dl2-clock ConfigMap",
    )
    parser.add_argument("--identity", default=None, help="Lease holder identity (default: $POD_NAME or the host)")
    parser.add_argument(
        "--mlflow-uri", default=None, help="MLflow tracking/registry URI (default: $MLFLOW_TRACKING_URI)"
    )
    parser.add_argument(
        "--models-dir", type=Path, default=None, help="read versions from <dir>/<name>/<version> instead of MLflow"
    )
    parser.add_argument(
        "--model-cache", type=Path, default=Path("work/model-cache"), help="where MLflow versions are downloaded"
    )
    parser.add_argument("--placer", choices=sorted(PLACERS), default="load-balance", help="the incumbent's placement")
    parser.add_argument("--lease-name", default="dl2-scheduler", help="the Lease (in --lease-namespace)")
    parser.add_argument("--lease-namespace", default="dl2-system")
    parser.add_argument("--lease-s", type=float, default=15.0, help="lease duration")
    parser.add_argument("--renew-deadline-s", type=float, default=10.0, help="lead no longer than this unrenewed")
    parser.add_argument("--retry-s", type=float, default=2.0, help="renewal and acquisition interval")
    parser.add_argument("--no-leader-election", action="store_true", help="always lead (one replica only)")
    parser.add_argument("--request-timeout-s", type=float, default=10.0, help="timeout of each API request")
    parser.add_argument("--seed", type=int, default=0, help="seed of the retry jitter")
    parser.add_argument(
        "--prometheus-url",
        default=None,
        help="Prometheus answering the jobs' dl2.io/progress-query annotations (progress from the metrics a job "
        "exports; without it, progress is the dl2.io/progress-epochs annotation only)",
    )
    parser.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    parser.set_defaults(run=run)


def _crash_at() -> tuple[tuple[str, int], ...]:
    from dl2.kube.controller import CRASH_POINTS

    points = []
    for text in filter(None, os.environ.get(CRASH_ENV, "").split(",")):
        point, _, slot = text.partition("@")
        if point not in CRASH_POINTS or not slot.isdigit():
            raise UsageError(
                f"{CRASH_ENV} must be POINT@SLOT,... with POINT in {', '.join(CRASH_POINTS)}, got {text!r}"
            )
        points.append((point, int(slot)))
    return tuple(points)


def _api(kubeconfig: Path | None) -> Any:
    """A client of the cluster; urllib3's own retries are off, since the controller retries with backoff."""
    from kubernetes import client, config

    configuration = client.Configuration()
    if kubeconfig is not None:
        if not kubeconfig.is_file():
            raise UsageError(f"--kubeconfig {kubeconfig}: no such file")
        config.load_kube_config(str(kubeconfig), client_configuration=configuration)  # type: ignore[no-untyped-call]
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        raise UsageError("not in a cluster: give --kubeconfig")
    configuration.retries = False
    configuration.connection_pool_maxsize = 32  # five watches, parallel resizes, the Lease, Events
    return client.ApiClient(configuration)


def run(args: argparse.Namespace) -> int:
    from dl2.kube.controller import Controller, ControllerConfig
    from dl2.kube.leader import LeaseConfig, LeaseElector
    from dl2.kube.metrics import HealthServer, Metrics
    from dl2.kube.models import directory_loader, mlflow_loader

    check_seed(args.seed)
    if not 0 <= args.metrics_port <= 65535:
        raise UsageError(f"--metrics-port must be in 0..65535, got {args.metrics_port}")
    check_range("--slot-s", args.slot_s, 0.001, MAX_TIME_S)
    for flag in ("--request-timeout-s", "--lease-s", "--renew-deadline-s", "--retry-s"):
        check_range(flag, getattr(args, flag.removeprefix("--").replace("-", "_")), 0.001, 86_400)
    identity = args.identity or os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    try:
        config = ControllerConfig(
            identity=identity,
            policy_name=args.policy_name,
            decision_log=args.decision_log,
            cluster_name=args.cluster_name,
            clock=args.clock,
            slot_s=args.slot_s,
            placer=args.placer,
            request_timeout_s=args.request_timeout_s,
            seed=args.seed,
            prometheus_url=args.prometheus_url or None,
            crash_at=_crash_at(),
        )
        lease = LeaseConfig(args.lease_name, args.lease_namespace, args.lease_s, args.renew_deadline_s, args.retry_s)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if args.models_dir is not None:
        loader = directory_loader(args.models_dir)
    else:
        loader = mlflow_loader(args.model_cache, args.mlflow_uri)
    logging.basicConfig(
        level=args.log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    api = _api(args.kubeconfig)
    api.user_agent = f"dl2-serve/{identity}"
    metrics = Metrics()
    elector = None if args.no_leader_election else LeaseElector(api, identity, lease)
    controller = Controller(api, config, loader, metrics, elector)
    server = HealthServer(metrics, controller.health, args.metrics_host, args.metrics_port).start()
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    print(f"dl2 serve: {identity}, metrics on port {server.port}", file=sys.stderr, flush=True)
    try:
        controller.run(stop)
    finally:
        server.stop()
    return 0
