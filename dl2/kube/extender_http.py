"""The extender over HTTPS: the server kube-scheduler calls, and the client the simulated cluster's scheduler uses.

Server (`ExtenderServer`): `POST <prefix>/filter` and `POST <prefix>/prioritize` take an `ExtenderArgs` JSON body
and answer an `ExtenderFilterResult` and a `HostPriorityList`; `GET /healthz`. A body that is not `ExtenderArgs`
gets 400 (for `filter`, with the reason in the result's `Error`, where kube-scheduler reads it).

With `ServerTLS` it serves HTTPS and answers the verbs only to a client that presented a certificate its client CA
signed (kube-scheduler, whose extender `tlsConfig` carries one): whoever calls the verbs steers placement. A
certificate of another CA fails the handshake; a client with none gets 401, so that the kubelet's probes (which
present no certificate) still reach `/healthz`. Without `ServerTLS` it is plain HTTP with no authentication, for
tests and local runs only.

Client (`ExtenderClient`): the calls kube-scheduler makes, with its `httpTimeout`; any failure (refused, timed out,
an HTTP error, a body of the wrong shape) raises `ExtenderUnavailable`, which an `ignorable` extender's caller
treats as "no opinion" (kube-scheduler then schedules without it).
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from dl2.core import InputError
from dl2.kube.extender import FILTER_VERB, PRIORITIZE_VERB, ExtenderArgs, HarmonyExtender, filter_result

MAX_BODY_BYTES = 64 * 1024 * 1024
"""Largest request accepted (a NodeList of a few thousand nodes fits)."""
HANDSHAKE_TIMEOUT_S = 10.0
"""How long a connection may take to finish its TLS handshake and send its request (a slow client holds only its own
thread: the handshake runs there, not in the loop that accepts connections)."""


@dataclass(frozen=True, slots=True)
class ServerTLS:
    """The extender's HTTPS: its serving certificate and key, and the CA whose client certificates it accepts."""

    cert_file: Path
    """PEM serving certificate (its chain after it), for the names kube-scheduler's `urlPrefix` uses."""
    key_file: Path
    """PEM private key of `cert_file`."""
    client_ca_file: Path
    """PEM CA certificate(s): a client must present a certificate one of them signed to call the verbs."""

    def context(self) -> ssl.SSLContext:
        """A server context: TLS 1.2 or later, client certificates verified against the CA when presented."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        context.load_verify_locations(cafile=self.client_ca_file)
        # OPTIONAL, not REQUIRED: a certificate that is presented must verify (else the handshake fails), and one
        # that is not is refused per request (401) rather than per connection, so the kubelet's probes reach /healthz
        context.verify_mode = ssl.CERT_OPTIONAL
        return context


class _ReloadingContext:
    """The server's context, made again at a connection's handshake when a file of `tls` has changed since: the
    kubelet updates a mounted Secret in place when it is renewed (cert-manager), and a restart is not needed."""

    def __init__(self, tls: ServerTLS) -> None:
        self.tls = tls
        self._stamp = self._files()
        self.context = tls.context()
        self.context.sni_callback = self._on_hello
        self._current = self.context
        self._lock = threading.Lock()

    def _files(self) -> tuple[int, ...]:
        return tuple(
            os.stat(path).st_mtime_ns for path in (self.tls.cert_file, self.tls.key_file, self.tls.client_ca_file)
        )

    def _on_hello(self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: ssl.SSLContext) -> None:
        """Called at every handshake (with or without SNI): hand the connection the newest context."""
        with self._lock:
            try:
                stamp = self._files()
                if stamp != self._stamp:
                    self._current, self._stamp = self.tls.context(), stamp
            except (OSError, ssl.SSLError) as error:  # mid-update (a key that is not yet the certificate's): wait
                print(f"dl2 extender: keeping the certificates loaded before: {error}", file=sys.stderr)
            if self._current is not self.context:
                connection.context = self._current


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One line for a connection that failed (a handshake refused, plain HTTP on the TLS port), no traceback."""
        error = sys.exc_info()[1]
        print(f"dl2 extender: {client_address[0]}: {error}", file=sys.stderr)


class ExtenderServer:
    """A threaded HTTP(S) server for one `HarmonyExtender` (`start()`, `url`, `stop()`; also a context manager)."""

    def __init__(
        self,
        extender: HarmonyExtender,
        host: str = "127.0.0.1",
        port: int = 0,
        prefix: str = "/extender",
        tls: ServerTLS | None = None,
    ):
        self.extender = extender
        self.prefix = "/" + prefix.strip("/")
        self.tls = tls
        self.requests = 0
        self.refused = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            timeout = HANDSHAKE_TIMEOUT_S

            def setup(self) -> None:
                super().setup()
                if isinstance(self.request, ssl.SSLSocket):
                    self.request.do_handshake()

            def log_message(self, format: str, *args: Any) -> None:
                return  # one line per request would swamp a busy scheduler's logs

            def _authenticated(self) -> bool:
                """Plain HTTP, or a client certificate the client CA signed (the handshake verified it)."""
                return not isinstance(self.request, ssl.SSLSocket) or bool(self.request.getpeercert())

            def do_GET(self) -> None:
                if self.path == "/healthz":
                    self._send(200, {"status": "ok"})
                else:
                    self._send(404, {"error": f"no route {self.path}"})

            def do_POST(self) -> None:
                if not self._authenticated():
                    outer.refused += 1
                    self._send(401, {"error": "a client certificate signed by the extender's client CA is required"})
                    return
                outer.requests += 1
                verb = self.path.removeprefix(outer.prefix + "/") if self.path.startswith(outer.prefix + "/") else ""
                if verb not in (FILTER_VERB, PRIORITIZE_VERB):
                    self._send(404, {"error": f"no route {self.path}"})
                    return
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_BODY_BYTES:
                    self._send(413, {"error": f"request body over {MAX_BODY_BYTES} bytes"})
                    return
                try:
                    args = ExtenderArgs.from_json(json.loads(self.rfile.read(length) or b"null"))
                except (json.JSONDecodeError, UnicodeDecodeError, InputError) as error:
                    message = str(error) if isinstance(error, InputError) else f"not JSON ({error})"
                    body: Any = {"Nodes": None, "NodeNames": None, "FailedNodes": {}, "Error": message}
                    self._send(400, body if verb == FILTER_VERB else {"error": message})
                    return
                if verb == FILTER_VERB:
                    self._send(200, outer.extender.filter(args))
                else:
                    self._send(200, outer.extender.prioritize(args))

            def _send(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = _Server((host, port), Handler)
        if tls is not None:
            context = _ReloadingContext(tls).context
            self._server.socket = context.wrap_socket(
                self._server.socket, server_side=True, do_handshake_on_connect=False
            )
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{'https' if self.tls else 'http'}://{host!s}:{port}{self.prefix}"

    def start(self) -> ExtenderServer:
        self._thread = threading.Thread(target=self._server.serve_forever, name="dl2-extender", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> ExtenderServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ExtenderUnavailable(Exception):
    """The extender gave no usable answer (refused, timed out, an HTTP error, a body of the wrong shape)."""


class ExtenderClient:
    """kube-scheduler's side of the protocol: POST the verbs under `url_prefix`, each within `timeout_s`."""

    def __init__(
        self,
        url_prefix: str,
        timeout_s: float = 2.0,
        filter_verb: str = FILTER_VERB,
        prioritize_verb: str = PRIORITIZE_VERB,
        context: ssl.SSLContext | None = None,
    ) -> None:
        self.url_prefix = url_prefix.rstrip("/")
        self.timeout_s = timeout_s
        self.filter_verb = filter_verb
        self.prioritize_verb = prioritize_verb
        self.context = context
        """For an https `url_prefix`: the server's CA and the client certificate (`client_context`)."""

    def filter(self, args: ExtenderArgs) -> list[str]:
        """The node names that pass (an `Error` in the result counts as no answer)."""
        result = self._post(self.filter_verb, args.to_json())
        if not isinstance(result, dict) or result.get("Error"):
            raise ExtenderUnavailable(f"filter: {result.get('Error') if isinstance(result, dict) else result!r}")
        if args.nodes is not None:
            items = (result.get("Nodes") or {}).get("items")
            if not isinstance(items, list):
                raise ExtenderUnavailable("filter: no Nodes.items in the result")
            return [str(node["metadata"]["name"]) for node in items]
        names = result.get("NodeNames")
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            raise ExtenderUnavailable("filter: no NodeNames in the result")
        return names

    def prioritize(self, args: ExtenderArgs) -> dict[str, int]:
        """Host -> score."""
        result = self._post(self.prioritize_verb, args.to_json())
        if not isinstance(result, list):
            raise ExtenderUnavailable(f"prioritize: expected a HostPriorityList, got {type(result).__name__}")
        try:
            return {str(entry["Host"]): int(entry["Score"]) for entry in result}
        except (KeyError, TypeError, ValueError) as error:
            raise ExtenderUnavailable(f"prioritize: malformed HostPriority ({error})") from None

    def _post(self, verb: str, body: dict[str, Any]) -> Any:
        request = urllib.request.Request(
            f"{self.url_prefix}/{verb}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=self.context) as response:
                return json.loads(response.read())
        except (urllib.error.URLError, OSError, ValueError) as error:  # refused, timed out, HTTP error, not JSON
            raise ExtenderUnavailable(f"{verb}: {error}") from None


def client_context(ca_file: Path, cert_file: Path | None = None, key_file: Path | None = None) -> ssl.SSLContext:
    """What kube-scheduler's extender `tlsConfig` sets up: trust `ca_file` for the server (and check its name), and
    present `cert_file` (`key_file`) when given."""
    context = ssl.create_default_context(cafile=ca_file)
    if cert_file is not None:
        context.load_cert_chain(cert_file, key_file)
    return context


__all__ = [
    "ExtenderClient",
    "ExtenderServer",
    "ExtenderUnavailable",
    "ServerTLS",
    "client_context",
    "filter_result",
]
