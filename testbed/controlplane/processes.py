"""Running the control plane's binaries: free ports, a process per component with its log, readiness probes."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

PR_SET_PDEATHSIG = 1


def free_port() -> int:
    """A port no one listens on now (the component binds it a moment later; on loopback nothing else races)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the process that started it dies, so that a killed test run or
    `dl2 cluster` leaves no etcd or API server behind. Not SIGTERM: kube-apiserver's graceful shutdown waits on
    an etcd that died too and can outlive its parent; a normal stop is graceful anyway (`Component.stop`)."""
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class Component:
    """One binary of the control plane as a child process; its output goes to `<logs>/<name>.log`."""

    def __init__(self, name: str, command: Sequence[str], logs: Path) -> None:
        self.name = name
        self.command = list(command)
        self.log_path = logs / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Component:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=environment(),
                preexec_fn=_die_with_parent,
            )
        return self

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def check(self) -> None:
        """RuntimeError naming the component and the end of its log if it has exited."""
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.process.returncode}: {self.tail()}")

    def tail(self, lines: int = 12) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:])

    def stop(self, timeout_s: float = 10.0) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout_s)


def wait_until(
    condition: Callable[[], bool], timeout_s: float, what: str, watched: Sequence[Component] = (), poll_s: float = 0.1
) -> None:
    """Poll `condition` until it holds; TimeoutError naming `what` (RuntimeError at once if a watched component
    exits meanwhile)."""
    deadline = time.monotonic() + timeout_s
    while True:
        for component in watched:
            component.check()
        try:
            if condition():
                return
        except (OSError, urllib.error.URLError, ssl.SSLError):
            pass
        if time.monotonic() > deadline:
            logs = "".join(f"\n--- {c.name} ---\n{c.tail()}" for c in watched)
            raise TimeoutError(f"{what} not within {timeout_s:g} s{logs}")
        time.sleep(poll_s)


def https_ok(url: str, context: ssl.SSLContext) -> bool:
    """GET `url` answers 200 (a `/readyz` probe)."""
    try:
        with urllib.request.urlopen(url, context=context, timeout=2) as response:
            return int(response.status) == 200
    except urllib.error.HTTPError:
        return False


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status) == 200
    except urllib.error.HTTPError:
        return False


def client_context(ca: Path, cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    context.load_cert_chain(str(cert), str(key))
    return context


def environment() -> dict[str, str]:
    """The components' environment: ours, without proxies (everything is on loopback)."""
    return {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
