"""The `kubernetes` Service for pods on real nodes: what lets a pod (the dl2 controller, in-cluster) reach the API
server, which listens on loopback.

A pod reaches the API as every in-cluster client does: `KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT`, the
`default/kubernetes` Service's ClusterIP and port, which the kubelet puts in every container's environment, with
the ServiceAccount token and the cluster's CA the kubelet mounts. In a cluster kube-proxy routes that address to
the API server; the test bed runs no kube-proxy, so `ApiService` does it for this one Service: the ClusterIP is
added to the nodes' bridge (a pod's packets to it go to its gateway, the bridge, and the host takes them as its
own), and a forwarder on it passes each connection to the API server on loopback, bytes as they are (TLS end to
end: the API server's certificate names the ClusterIP, as kubeadm's does). The address goes with the bridge.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import subprocess
import threading
from typing import Any

from dl2.kube.rest import Resource, Rest
from testbed.controlplane.cluster import ControlPlane
from testbed.controlplane.nodes.layout import NodeLayout

SERVICES = Resource("", "v1", "services")
CHUNK = 65_536


class _Forward(socketserver.BaseRequestHandler):
    """One connection, copied both ways to the API server until either side closes."""

    server: _Forwarder

    def handle(self) -> None:
        with socket.create_connection(self.server.upstream, timeout=10) as upstream:
            upstream.settimeout(None)
            back = threading.Thread(target=_copy, args=(upstream, self.request), daemon=True)
            back.start()
            _copy(self.request, upstream)
            back.join()


class _Forwarder(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        super().__init__(address, _Forward)


def _copy(source: socket.socket, target: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(CHUNK):
            target.sendall(data)
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


class ApiService:
    """The `kubernetes` Service's ClusterIP on `node`'s bridge, forwarded to `plane`'s API server; a context
    manager (`start()`, `stop()`)."""

    def __init__(self, plane: ControlPlane, node: NodeLayout) -> None:
        self.plane = plane
        self.node = node
        self.address = ""
        self.port = 0
        self._server: _Forwarder | None = None
        self._thread: threading.Thread | None = None
        self._added = False

    def start(self) -> ApiService:
        service: dict[str, Any] = Rest(self.plane.admin_client()).get(SERVICES, "default", "kubernetes")
        self.address = str(service["spec"]["clusterIP"])
        self.port = int(service["spec"]["ports"][0]["port"])
        try:
            self._ip("add")
            self._added = True
            self._server = _Forwarder((self.address, self.port), ("127.0.0.1", self.plane.port))
            self._thread = threading.Thread(target=self._server.serve_forever, name="dl2-api-service", daemon=True)
            self._thread.start()
        except BaseException:
            self.stop()
            raise
        return self

    def _ip(self, verb: str) -> None:
        command = ["ip", "addr", verb, f"{self.address}/32", "dev", self.node.bridge]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()}")

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._added:
            with contextlib.suppress(RuntimeError):  # the bridge may be gone already, and the address with it
                self._ip("del")
            self._added = False

    def __enter__(self) -> ApiService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
