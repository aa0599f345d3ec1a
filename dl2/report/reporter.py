"""`ProgressReporter`: merge-patches `dl2.io/progress-epochs` on the job the process trains in.

Made for the inside of a training loop: only one process reports (rank 0), at most one PATCH every `interval_s`
(a final `flush()` writes the last value), values only grow, and nothing raises: an error is logged (each kind
once at WARNING, then at DEBUG) and counted, and the next write waits longer (up to `MAX_BACKOFF` intervals), so a
dead API server costs the loop one timeout now and then, not one per step. Requests are synchronous: at the
default interval a loop spends one round trip (milliseconds) a minute on them.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from dl2 import __version__
from dl2.report.target import (
    PROGRESS_EPOCHS,
    SERVICE_ACCOUNT,
    ApiServer,
    JobKind,
    JobRef,
    TargetError,
    interval_from,
    is_rank_zero,
    resolve_job,
    resolve_server,
)

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 60.0
"""A tenth of the controller's default slot (600 s): fresh progress every slot, 1/60 of a PATCH a second a job."""
DEFAULT_TIMEOUT_S = 5.0
MAX_BACKOFF = 16
"""After consecutive failures the wait between writes doubles, up to this many intervals."""
DECIMALS = 4
"""Epochs are written to 1e-4 (a ten-thousandth of an epoch; no exponent in the annotation)."""
MERGE_PATCH = "application/merge-patch+json"
RBAC_HINT = (
    "bind the ClusterRole dl2-progress-reporter (k8s/reporter-rbac.yaml) to this pod's ServiceAccount with a "
    "RoleBinding in the job's namespace (docs/reporting.md)"
)


class Transport(Protocol):
    """Sends one PATCH: (HTTP status, response text); raises OSError when no answer comes back."""

    def __call__(self, url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> tuple[int, str]: ...


class UrllibTransport:
    """HTTPS with the standard library, verifying the server against `ca_path` (else the system's CAs)."""

    def __init__(self, ca_path: Path | None) -> None:
        self.ca_path = ca_path
        self._context: ssl.SSLContext | None = None

    def __call__(self, url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> tuple[int, str]:
        if self._context is None:
            cafile = str(self.ca_path) if self.ca_path is not None else None
            self._context = ssl.create_default_context(cafile=cafile)
        request = urllib.request.Request(url, data=body, headers=headers, method="PATCH")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s, context=self._context) as response:
                response.read()
                return int(response.status), ""
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode("utf-8", "replace")


def format_epochs(epochs: float) -> str:
    """As dl2 writes its other decimal annotations (`repr` of a float), rounded to `DECIMALS`: `2.5`, `3.0`."""
    return repr(round(float(epochs), DECIMALS))


def _server_message(text: str) -> str:
    """The `message` of a Kubernetes Status, else the text's start."""
    try:
        message = json.loads(text).get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message) if message else text[:200]


class ProgressReporter:
    """Writes a job's training progress, in epochs, to its `dl2.io/progress-epochs` annotation.

    Every argument left out comes from the environment (`dl2.report.target`): the job from `DL2_JOB_NAME`,
    `DL2_JOB_KIND`, `DL2_JOB_NAMESPACE` (else the ServiceAccount's namespace file); the API server, token and CA
    from the pod's ServiceAccount; whether to report from `DL2_REPORT`/`RANK`. A reporter that cannot tell its
    job or server logs why once and reports nothing (`reason` says why); it never raises from `report`/`flush`.
    """

    def __init__(
        self,
        *,
        name: str | None = None,
        kind: str | JobKind | None = None,
        namespace: str | None = None,
        server: str | None = None,
        token: str | None = None,
        ca_path: str | Path | None = None,
        rank_zero: bool | None = None,
        interval_s: float | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        environ: Mapping[str, str] | None = None,
        service_account: Path = SERVICE_ACCOUNT,
        clock: Callable[[], float] = time.monotonic,
        transport: Transport | None = None,
    ) -> None:
        environ = os.environ if environ is None else environ
        self.interval_s = interval_from(environ, DEFAULT_INTERVAL_S) if interval_s is None else interval_s
        self.timeout_s = timeout_s
        self.clock = clock
        self.latest: float | None = None
        """The highest progress given so far (rounded as written)."""
        self.written: float | None = None
        """The highest progress the API server accepted."""
        self.requests = 0
        self.errors = 0
        """Failed writes and rejected values, each counted once."""
        self.job: JobRef | None = None
        self.server: ApiServer | None = None
        self.reason = ""
        """Why this reporter reports nothing ("" when it reports)."""
        self._next_s = -math.inf
        self._failures = 0
        self._warned: set[str] = set()
        self._lock = threading.Lock()
        if not (is_rank_zero(environ) if rank_zero is None else rank_zero):
            self.reason = "not rank 0"
            return
        try:
            self.job = resolve_job(name, kind, namespace, environ, service_account)
            self.server = resolve_server(server, token, ca_path, environ, service_account)
        except (TargetError, OSError) as error:
            self.job, self.reason = None, str(error)
            log.warning("dl2.report: progress is not reported: %s", error)
            return
        self.transport: Transport = transport or UrllibTransport(self.server.ca_path)

    @property
    def enabled(self) -> bool:
        return not self.reason

    def report(self, epochs: float) -> bool:
        """Record progress (epochs done, fractional); write it unless the last write was under `interval_s` ago.
        True when this call wrote it. Lower or equal values than already given are ignored."""
        if not self.enabled:
            return False
        try:
            with self._lock:
                if not self._accept(epochs) or self.clock() < self._next_s:
                    return False
                return self._send()
        except Exception as error:  # never into the training loop
            self._failed("unexpected", f"unexpected error: {error!r}")
            return False

    def flush(self) -> bool:
        """Write the latest progress now if the API server does not have it yet (end of training, exit)."""
        if not self.enabled:
            return False
        try:
            with self._lock:
                if self.latest is None or (self.written is not None and self.latest <= self.written):
                    return False
                return self._send()
        except Exception as error:
            self._failed("unexpected", f"unexpected error: {error!r}")
            return False

    def _accept(self, epochs: float) -> bool:
        try:
            value = round(float(epochs), DECIMALS)
        except (TypeError, ValueError, OverflowError):
            value = math.nan
        if not math.isfinite(value) or value < 0:
            self._failed("value", f"progress must be a finite, non-negative number of epochs, got {epochs!r}")
            return False
        if self.latest is not None and value <= self.latest:
            return False
        self.latest = value
        return True

    def _send(self) -> bool:
        assert self.job is not None and self.server is not None and self.latest is not None
        value, now = self.latest, self.clock()
        body = json.dumps({"metadata": {"annotations": {PROGRESS_EPOCHS: format_epochs(value)}}}).encode()
        headers = {"Content-Type": MERGE_PATCH, "Accept": "application/json", "User-Agent": f"dl2-report/{__version__}"}
        self.requests += 1
        try:
            bearer = self.server.bearer()
            if bearer:
                headers["Authorization"] = f"Bearer {bearer}"
            status, text = self.transport(self.server.url + self.job.path, body, headers, self.timeout_s)
        except Exception as error:  # no answer: refused, timed out, TLS, a garbled response, an unreadable token
            self._backoff(now)
            self._failed(type(error).__name__, f"no answer from the API server at {self.server.url}: {error!r}")
            return False
        if 200 <= status <= 299:
            self.written, self._failures, self._next_s = value, 0, now + self.interval_s
            log.debug("dl2.report: %s %s=%s", self.job, PROGRESS_EPOCHS, format_epochs(value))
            return True
        self._backoff(now)
        self._failed(str(status), self._explain(status, _server_message(text)))
        return False

    def _explain(self, status: int, message: str) -> str:
        if status == 403:
            return f"the API server refused to patch {self.job} (403 Forbidden: {message}); {RBAC_HINT}"
        if status == 404:
            return f"{self.job} not found (404): check DL2_JOB_NAME, DL2_JOB_KIND and DL2_JOB_NAMESPACE"
        return f"patching {self.job} failed with HTTP {status}: {message}"

    def _backoff(self, now: float) -> None:
        self._failures += 1
        self._next_s = now + self.interval_s * min(2 ** (self._failures - 1), MAX_BACKOFF)

    def _failed(self, kind: str, message: str) -> None:
        """Count an error; log its first occurrence of each kind at WARNING, the rest at DEBUG."""
        self.errors += 1
        level = logging.DEBUG if kind in self._warned else logging.WARNING
        self._warned.add(kind)
        log.log(level, "dl2.report: %s", message)


_default: ProgressReporter | None = None
_default_lock = threading.Lock()


def default_reporter() -> ProgressReporter:
    """The process's reporter from the environment, built on first use; its last progress is flushed at exit."""
    global _default
    with _default_lock:
        if _default is None:
            _default = ProgressReporter()
            atexit.register(_default.flush)
        return _default


def report_progress(epochs: float) -> bool:
    """Report `epochs` done (fractional: 2.5 is half-way through the third epoch) through `default_reporter()`.
    Safe to call every step: it writes at most once an interval and never raises."""
    return default_reporter().report(epochs)
