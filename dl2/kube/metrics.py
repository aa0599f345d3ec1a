"""Prometheus metrics and the health endpoints of `dl2 serve`: `/metrics`, `/healthz`, `/readyz` on one port.

`/healthz` says the slot loop is alive (it has ticked within `stale_s`); `/readyz` says the replica can serve:
it has read a valid SchedulerPolicy and, unless the mode is off, holds a loaded model (a standby replica is
ready too: it keeps the model warm and takes over when it gets the Lease).
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

SLOT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    """The controller's metrics, in a registry of their own (several controllers may share a process in tests)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.decisions = Counter("dl2_decisions", "Decision records made, per mode", ["mode"], registry=r)
        self.resizes = Counter("dl2_resizes", "Jobs resized, per job kind", ["kind"], registry=r)
        self.fallbacks = Counter(
            "dl2_fallbacks", "Slots the incumbent decided instead of the model, per reason", ["reason"], registry=r
        )
        self.slot_seconds = Histogram(
            "dl2_slot_duration_seconds", "Time to run one slot (read, decide, record, act)", buckets=SLOT_BUCKETS,
            registry=r,
        )  # fmt: skip
        self.api_errors = Counter(
            "dl2_api_errors", "Failed Kubernetes API requests, per operation and status", ["operation", "code"],
            registry=r,
        )  # fmt: skip
        self.records_written = Counter("dl2_records_written", "Decision records written to the log", registry=r)
        self.records_dropped = Counter(
            "dl2_records_dropped", "Draft records dropped because their outcome was never observed", registry=r
        )
        self.model_loads = Counter("dl2_model_loads", "Model loads, per result", ["result"], registry=r)
        self.leader = Gauge("dl2_leader", "1 while this replica holds the Lease", registry=r)
        self.model_version = Gauge(
            "dl2_model_version", "The model this replica serves: 1 for its name and version (an info metric)",
            ["name", "version"], registry=r,
        )  # fmt: skip
        self.slot_overruns = Counter(
            "dl2_slot_overruns", "Slots whose run took longer than the slot itself", registry=r
        )
        self.fallback_active = Gauge("dl2_fallback_active", "1 while the incumbent stands in for the model", registry=r)
        self.last_slot = Gauge("dl2_last_slot", "The last slot this replica ran", registry=r)
        self.progress_query_failures = Counter(
            "dl2_progress_query_failures", "Jobs' progress queries Prometheus did not answer with a number", registry=r
        )

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class Health:
    """What the probes report; the controller updates it."""

    def __init__(self, stale_s: float = 120.0) -> None:
        self.stale_s = stale_s
        self.ready = False
        self.reason = "starting"
        self._beat = time.monotonic()

    def beat(self) -> None:
        self._beat = time.monotonic()

    def alive(self) -> bool:
        return time.monotonic() - self._beat < self.stale_s


class HealthServer:
    """`/metrics`, `/healthz` and `/readyz` over HTTP from a daemon thread (port 0: a free one)."""

    def __init__(self, metrics: Metrics, health: Health, host: str = "0.0.0.0", port: int = 8080) -> None:
        handler = _handler(metrics, health)
        self.server = ThreadingHTTPServer((host, port), handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, name="dl2-health", daemon=True)

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler(metrics: Metrics, health: Health) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # the http.server API
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, metrics.exposition(), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                alive = health.alive()
                self._send(200 if alive else 503, b"ok\n" if alive else b"the slot loop is stuck\n")
            elif path == "/readyz":
                self._send(200 if health.ready else 503, f"{health.reason}\n".encode())
            else:
                self._send(404, b"not found\n")

        def _send(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # probes every few seconds: keep the log quiet
            return

    return Handler
