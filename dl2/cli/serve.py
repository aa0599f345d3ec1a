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

from dl2.cli.common import UsageError

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
        "replica holding the Lease writes. Refuses to start (exit status 2) when the decision log cannot be "
        "written and read back. Serves /metrics, /healthz and /readyz. Stops on SIGINT or SIGTERM.",
    )
    from dl2.kube.settings import LEASE_KEYS, SERVE_KEYS

    parser.add_argument("--kubeconfig", type=Path, default=None, help="kubeconfig (default: in-cluster config)")
    SERVE_KEYS.add_arguments(parser)
    parser.add_argument("--metrics-port", type=int, default=8080, help="port of /metrics, /healthz, /readyz (0: any)")
    parser.add_argument("--metrics-host", default="0.0.0.0", help="address of the metrics server")
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
    LEASE_KEYS.add_arguments(parser)
    parser.add_argument("--no-leader-election", action="store_true", help="always lead (one replica only)")
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
    from dl2.kube.controller import Controller
    from dl2.kube.leader import LeaseElector
    from dl2.kube.metrics import HealthServer, Metrics
    from dl2.kube.models import directory_loader, mlflow_loader
    from dl2.kube.settings import LEASE_KEYS, SERVE_KEYS, ControllerConfig

    if not 0 <= args.metrics_port <= 65535:
        raise UsageError(f"--metrics-port must be in 0..65535, got {args.metrics_port}")
    identity = args.identity or os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    base = ControllerConfig(identity=identity, crash_at=_crash_at())
    config = SERVE_KEYS.build(SERVE_KEYS.from_args(args), base=base, spelling=lambda key: key.flag)
    lease = LEASE_KEYS.build_from_args(args)
    if args.models_dir is not None:
        loader = directory_loader(args.models_dir)
    else:
        loader = mlflow_loader(args.model_cache, args.mlflow_uri)
    # the libraries' chatter (botocore's "Found credentials ...") only at DEBUG: a refusal at start stays one line
    logging.basicConfig(
        level=args.log_level if args.log_level == "DEBUG" else "WARNING",
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("dl2").setLevel(args.log_level)
    api = _api(args.kubeconfig)
    api.user_agent = f"dl2-serve/{identity}"
    metrics = Metrics()
    elector = None if args.no_leader_election else LeaseElector(api, identity, lease)
    controller = Controller(api, config, loader, metrics, elector)
    controller.log.probe(identity)  # an unwritable decision log stops the start with one line (exit status 2)
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
