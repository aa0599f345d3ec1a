"""`dl2 extender`: Harmony's placer as a kube-scheduler extender (`filter`, `prioritize`) for managed jobs' pods."""

from __future__ import annotations

import argparse
import ssl
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dl2.cli.common import UsageError

if TYPE_CHECKING:
    from dl2.kube.extender_http import ServerTLS


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "extender",
        help="serve Harmony's placer as a kube-scheduler extender",
        description="HTTPS filter and prioritize verbs of the scheduler-extender protocol under --prefix, for the "
        "second kube-scheduler profile of k8s/scheduler-extender.yaml (ignorable: kube-scheduler schedules without "
        "it when it is down or slow). Only a client with a certificate that --client-ca-file signed may call the "
        "verbs (kube-scheduler, with the client certificate of its extender tlsConfig); /healthz is open. The "
        "cluster's managed jobs, pods and nodes are watched, and the placer's view of them rebuilt every "
        "--refresh-s seconds off the request path.",
    )
    parser.add_argument("--placer", type=Path, required=True, help="a Harmony placer folder (models/harmony-placer-*)")
    parser.add_argument("--kubeconfig", type=Path, default=None, help="kubeconfig (default: in-cluster config)")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on")
    parser.add_argument("--port", type=int, default=8888)
    parser.add_argument("--prefix", default="/extender", help="the urlPrefix path of the scheduler's configuration")
    parser.add_argument("--refresh-s", type=float, default=2.0, help="seconds between rebuilds of the view")
    parser.add_argument("--tls-cert-file", type=Path, default=None, help="PEM serving certificate (HTTPS)")
    parser.add_argument("--tls-key-file", type=Path, default=None, help="PEM private key of --tls-cert-file")
    parser.add_argument(
        "--client-ca-file", type=Path, default=None, help="PEM CA whose client certificates may call the verbs"
    )
    parser.add_argument(
        "--insecure-http",
        action="store_true",
        help="plain HTTP and no authentication, for a test on one machine: anyone who reaches the port steers "
        "placement (the default, and a cluster's, is HTTPS with the three files above)",
    )
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
    tls = _tls(args)
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
    server = ExtenderServer(HarmonyExtender(placer, cache), args.host, args.port, args.prefix, tls)
    print(f"dl2 extender: {server.url} ({args.placer})", file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
    return 0


def _tls(args: argparse.Namespace) -> ServerTLS | None:
    """The serving certificate, its key and the client CA, all three, or none with --insecure-http."""
    from dl2.kube.extender_http import ServerTLS

    files = {"--tls-cert-file": args.tls_cert_file, "--tls-key-file": args.tls_key_file,
             "--client-ca-file": args.client_ca_file}  # fmt: skip
    given = [flag for flag, path in files.items() if path is not None]
    if args.insecure_http:
        if given:
            raise UsageError(f"--insecure-http serves plain HTTP: drop {', '.join(given)}")
        return None
    if len(given) < len(files):
        missing = ", ".join(flag for flag in files if flag not in given)
        raise UsageError(f"HTTPS needs {missing} (or --insecure-http for plain HTTP on a test machine)")
    for flag, path in files.items():
        if not path.is_file():
            raise UsageError(f"{flag} {path}: no such file")
    tls = ServerTLS(args.tls_cert_file, args.tls_key_file, args.client_ca_file)
    try:
        tls.context()
    except ssl.SSLError as error:  # not PEM, or a key that is not the certificate's
        raise UsageError(f"--tls-cert-file, --tls-key-file, --client-ca-file: {error}") from None
    return tls
