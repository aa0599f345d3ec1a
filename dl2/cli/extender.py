"""`dl2 extender`: Harmony's placer as a kube-scheduler extender (`filter`, `prioritize`) for managed jobs' pods."""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from typing import Any

from dl2.cli.common import UsageError


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "extender",
        help="serve Harmony's placer as a kube-scheduler extender",
        description="HTTP filter and prioritize verbs of the scheduler-extender protocol under --prefix, for the "
        "second kube-scheduler profile of k8s/scheduler-extender.yaml (ignorable: kube-scheduler schedules without "
        "it when it is down or slow). The cluster's managed jobs, pods and nodes are watched, and the placer's view "
        "of them rebuilt every --refresh-s seconds off the request path.",
    )
    parser.add_argument("--placer", type=Path, required=True, help="a Harmony placer folder (models/harmony-placer-*)")
    parser.add_argument("--kubeconfig", type=Path, default=None, help="kubeconfig (default: in-cluster config)")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on")
    parser.add_argument("--port", type=int, default=8888)
    parser.add_argument("--prefix", default="/extender", help="the urlPrefix path of the scheduler's configuration")
    parser.add_argument("--refresh-s", type=float, default=2.0, help="seconds between rebuilds of the view")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from dl2.cli.serve import _api
    from dl2.kube.cache import ClusterCache
    from dl2.kube.extender import HarmonyExtender, SnapshotCache
    from dl2.kube.extender_http import ExtenderServer
    from dl2.kube.metrics import Metrics
    from dl2.kube.rest import Rest
    from dl2.placement.policy import HarmonyPlacer
    from dl2.resolve import placer_factory

    if not args.refresh_s > 0:
        raise UsageError(f"--refresh-s must be positive, got {args.refresh_s}")
    if not 0 <= args.port < 65536:
        raise UsageError(f"--port must be a TCP port, got {args.port}")
    make_placer = placer_factory(str(args.placer))
    placer = make_placer() if make_placer is not None else None
    if not isinstance(placer, HarmonyPlacer):
        raise UsageError(f"--placer {args.placer}: not a Harmony placer folder")
    api = _api(args.kubeconfig)
    api.user_agent = "dl2-extender"
    informers = ClusterCache(Rest(api), Metrics())
    cache = SnapshotCache(informers.read)
    stop = threading.Event()

    def refresh() -> None:
        while not stop.is_set():
            try:
                cache.refresh()
            except Exception as error:
                print(f"dl2 extender: reading the cluster failed: {error}", file=sys.stderr)
            stop.wait(args.refresh_s)

    threading.Thread(target=refresh, name="dl2-extender-refresh", daemon=True).start()
    server = ExtenderServer(HarmonyExtender(placer, cache), args.host, args.port, args.prefix)
    print(f"dl2 extender: {server.url} ({args.placer})", file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
    return 0
