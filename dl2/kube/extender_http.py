"""The extender over HTTP: the server kube-scheduler calls, and the client the simulated cluster's scheduler uses.

Server (`ExtenderServer`): `POST <prefix>/filter` and `POST <prefix>/prioritize` take an `ExtenderArgs` JSON body
and answer an `ExtenderFilterResult` and a `HostPriorityList`; `GET /healthz`. A body that is not `ExtenderArgs`
gets 400 (for `filter`, with the reason in the result's `Error`, where kube-scheduler reads it).

Client (`ExtenderClient`): the calls kube-scheduler makes, with its `httpTimeout`; any failure (refused, timed out,
an HTTP error, a body of the wrong shape) raises `ExtenderUnavailable`, which an `ignorable` extender's caller
treats as "no opinion" (kube-scheduler then schedules without it).
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from dl2.core import InputError
from dl2.kube.extender import FILTER_VERB, PRIORITIZE_VERB, ExtenderArgs, HarmonyExtender, filter_result

MAX_BODY_BYTES = 64 * 1024 * 1024
"""Largest request accepted (a NodeList of a few thousand nodes fits)."""


class ExtenderServer:
    """A threaded HTTP server for one `HarmonyExtender` (`start()`, `url`, `stop()`; also a context manager)."""

    def __init__(self, extender: HarmonyExtender, host: str = "127.0.0.1", port: int = 0, prefix: str = "/extender"):
        self.extender = extender
        self.prefix = "/" + prefix.strip("/")
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return  # one line per request would swamp a busy scheduler's logs

            def do_GET(self) -> None:
                if self.path == "/healthz":
                    self._send(200, {"status": "ok"})
                else:
                    self._send(404, {"error": f"no route {self.path}"})

            def do_POST(self) -> None:
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

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}{self.prefix}"

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
    ) -> None:
        self.url_prefix = url_prefix.rstrip("/")
        self.timeout_s = timeout_s
        self.filter_verb = filter_verb
        self.prioritize_verb = prioritize_verb

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
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return json.loads(response.read())
        except (urllib.error.URLError, OSError, ValueError) as error:  # refused, timed out, HTTP error, not JSON
            raise ExtenderUnavailable(f"{verb}: {error}") from None


__all__ = [
    "ExtenderClient",
    "ExtenderServer",
    "ExtenderUnavailable",
    "filter_result",
]
