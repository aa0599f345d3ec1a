"""Prometheus metrics and the health endpoints of `dl2 serve`: `/metrics`, `/healthz`, `/readyz` on one port.

`/healthz` says the slot loop is alive (it has ticked within `stale_s`); `/readyz` says the replica can serve:
it has read a valid SchedulerPolicy and, unless the mode is off, holds a loaded model (a standby replica is
ready too: it keeps the model warm and takes over when it gets the Lease), and its slots complete (`Health`).

Every labelled counter starts at 0 for the label values it is known to take, so that `rate()` and `increase()`
see its first increment rather than a series that appears with it.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

SLOT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
MODES = ("shadow", "canary", "active")
"""The modes that decide (`dl2.kube.policy.Mode` but off): the labels of `dl2_decisions_total`."""
FALLBACK_REASONS = ("no-model", "input-out-of-range", "model-error", "invalid-output")
"""Why the incumbent stood in (the reasons of `dl2.kube.models.PolicyRuntime.decide`): `dl2_fallbacks_total`."""
JOB_KINDS = ("PyTorchJob", "Job")
"""The kinds the controller resizes (Kubeflow's PyTorchJob, Volcano's Job): `dl2_resizes_total`."""
LOAD_RESULTS = ("loaded", "failed")
"""`dl2_model_loads_total`."""


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
        self.quarantined = Gauge(
            "dl2_quarantined_jobs", "Jobs left alone because their inputs are out of range, per reason", ["reason"],
            registry=r,
        )  # fmt: skip
        self.last_slot = Gauge("dl2_last_slot", "The last slot this replica ran", registry=r)
        self.progress_query_failures = Counter(
            "dl2_progress_query_failures", "Jobs' progress queries Prometheus did not answer with a number", registry=r
        )
        self.slot_failures = Counter(
            "dl2_slot_failures", "Attempts of a slot that failed (the API or the record store), retried", registry=r
        )
        self.last_slot_completed = Gauge(
            "dl2_last_slot_completed_timestamp_seconds",
            "Unix time this replica last completed a slot, or began to lead or started, whichever is latest: "
            "where a stall counts from",
            registry=r,
        )
        self.last_slot_completed.set_to_current_time()
        self.slot_length = Gauge("dl2_slot_length_seconds", "Length of a slot (the stall alert counts in slots)",
                                 registry=r)  # fmt: skip
        for counter, values in ((self.decisions, MODES), (self.fallbacks, FALLBACK_REASONS),
                                (self.resizes, JOB_KINDS), (self.model_loads, LOAD_RESULTS)):  # fmt: skip
            for value in values:
                counter.labels(value)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class Health:
    """What the probes report; the controller updates it.

    `ready` and `reason` are the policy's side (a valid spec, its model loaded). The slot loop's side is kept
    apart: once `failures_to_stall` attempts of a slot in a row have failed (the record store unwritable, the API
    unreachable past its retries), the leader is not ready until a slot completes, whatever the policy says; and a
    replica whose Lease attempts get no answer from the API server (`unreachable`) can neither lead nor take over,
    so it is not ready either. Liveness (`alive`) stays about the loop turning: a restart mends neither a store nor
    an API server that is down, and would drop the warm model and the Lease, so a pod is not killed for an outage;
    readiness, the SchedulerPolicy's `Ready` condition and the `Dl2SlotsStalled` alert report it instead."""

    def __init__(self, stale_s: float = 120.0, failures_to_stall: int = 2) -> None:
        self.stale_s = stale_s
        self.failures_to_stall = failures_to_stall
        self.ready = False
        self.reason = "starting"
        self.failures = 0
        """Attempts of a slot that failed since the last slot completed."""
        self.failure = ""
        """The last of them: the error's type and message."""
        self.failing_since = ""
        """When the first of them failed (UTC, RFC 3339)."""
        self.unreachable: str | None = None
        """Why the API server does not answer this replica (`LeaseElector.unreachable`); None: it does."""
        self._beat = time.monotonic()

    def beat(self) -> None:
        self._beat = time.monotonic()

    def alive(self) -> bool:
        return time.monotonic() - self._beat < self.stale_s

    def slot_failed(self, error: BaseException) -> None:
        if self.failures == 0:
            self.failing_since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.failures += 1
        self.failure = f"{type(error).__name__}: {error}"

    def clear_failures(self) -> None:
        """A slot completed, or this replica stopped leading (a standby runs no slot): the failures so far no
        longer say anything about it."""
        self.failures, self.failure, self.failing_since = 0, "", ""

    def stalled(self) -> str | None:
        """Why slots do not complete, once `failures_to_stall` attempts in a row have failed; else None."""
        if self.failures < self.failures_to_stall:
            return None
        return f"{self.failures} attempts of the slot loop in a row failed since {self.failing_since}: {self.failure}"

    def readiness(self) -> tuple[bool, str]:
        """What `/readyz` answers: ready or not, and why."""
        stalled = self.stalled()
        if stalled is not None:
            return False, f"SlotsFailing: {stalled}"
        if self.unreachable is not None:
            return False, f"ApiUnreachable: {self.unreachable}"
        return self.ready, self.reason


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
                ready, reason = health.readiness()
                self._send(200 if ready else 503, f"{reason}\n".encode())
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
