"""`FaultProxy`: a reverse proxy in front of the real API server that does to clients what API servers do to them.

    with FaultProxy(plane.url, plane.ca) as proxy:
        api = plane.client(token=token, server=proxy.url)       # a client behind the proxy
        proxy.add_fault(Fault(FaultKind.ERROR, code=409, verb="patch", resource="jobs", count=3))
        proxy.drop_watches()                                    # as a restarting API server does
        proxy.counts()[("patch", "jobs")]                       # what the clients sent

It serves plain HTTP on loopback and forwards every request unchanged (method, path and query, headers, body) to
the upstream over HTTPS, verifying the upstream's certificate against `ca_file`, and streams each response back
chunk by chunk as it arrives (a watch is one long chunked response). Faults (`testbed.controlplane.faults`) are
matched in RBAC terms (`testbed.controlplane.paths`) and decided before anything is forwarded.

TLS ends at the proxy, so a client certificate cannot reach the upstream: clients behind the proxy authenticate
with bearer tokens (ServiceAccount tokens, `ControlPlane.service_account_token`), which the upstream checks as it
checks anyone's: RBAC, admission and the audit log see the client, not the proxy. A client that sends no token
is anonymous upstream. Connection upgrades (exec, attach, port-forward) are not proxied.
"""

from __future__ import annotations

import asyncio
import collections
import json
import ssl
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from testbed.controlplane.errors import ApiError, expired
from testbed.controlplane.faults import ActiveFault, Decision, Fault, FaultInjector
from testbed.controlplane.recording import RequestRecord, request_record

T = TypeVar("T")

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
"""Headers about one connection rather than the message (RFC 9110 §7.6.1): each side has its own."""
NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length"}
"""Also set by the proxy's client for its own connection (the upstream's address, the body it sends)."""
AUTO_HEADERS = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")
"""Headers aiohttp's client adds to a request that lacks them: left out, so the upstream gets what the client sent
(no gzip it did not ask for, its own User-Agent or none)."""
MAX_BODY_BYTES = 16 * 1024 * 1024
"""The largest request body accepted (the API server itself refuses bodies over 3 MiB)."""
KEEP = 100_000
"""Requests remembered for `requests()` (the latest ones; `counts()` counts them all)."""


class _Watch:
    """A watch being streamed through the proxy; `drop()` (on the loop's thread) ends it."""

    __slots__ = ("abrupt", "dropped", "key")

    def __init__(self, key: str) -> None:
        self.key = key
        self.dropped = asyncio.Event()
        self.abrupt = False

    def drop(self, abrupt: bool) -> None:
        if not self.dropped.is_set():
            self.abrupt = abrupt
            self.dropped.set()


class FaultProxy:
    """The proxy, on its own asyncio loop in a daemon thread; every public method is called from other threads."""

    def __init__(self, upstream_url: str, ca_file: Path, seed: int = 0, host: str = "127.0.0.1", port: int = 0) -> None:
        """`upstream_url`: the API server (`https://127.0.0.1:PORT`); `ca_file`: the CA its certificate is checked
        against; `seed`: of the generator that draws probabilistic faults; `port` 0: a free one."""
        self.upstream = upstream_url.rstrip("/")
        self.ca_file = ca_file
        self.host = host
        self.port = port
        self.url = ""
        """`http://HOST:PORT` once started."""
        self._injector = FaultInjector(seed)
        self._lock = threading.Lock()  # the injector and the records, shared with the callers' threads
        self._records: collections.deque[RequestRecord] = collections.deque(maxlen=KEEP)
        self._counts: collections.Counter[tuple[str, str]] = collections.Counter()
        self._watches: set[_Watch] = set()  # the loop's thread only
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._session: aiohttp.ClientSession | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._failure: BaseException | None = None

    # -- running ----------------------------------------------------------------------------------------------

    def start(self, timeout_s: float = 15.0) -> FaultProxy:
        if self._thread is not None:
            raise RuntimeError("the fault proxy is running already")
        self._started.clear()
        self._failure = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), name="dl2-fault-proxy", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout_s) or self._failure is not None:
            self._thread = None
            raise RuntimeError(f"the fault proxy did not start: {self._failure or 'timed out'}")
        return self

    def stop(self, timeout_s: float = 15.0) -> None:
        """Ends the open watches (as at a server's graceful shutdown) and closes the proxy; idempotent."""
        thread, loop, stopping = self._thread, self._loop, self._stopping
        if thread is None or loop is None or stopping is None:
            return
        loop.call_soon_threadsafe(stopping.set)
        thread.join(timeout_s)
        self._thread = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _serve(self) -> None:
        try:
            self._loop = asyncio.get_running_loop()
            self._stopping = asyncio.Event()
            context = ssl.create_default_context(cafile=str(self.ca_file))
            # no total or read timeout: a watch is open for minutes; the client behind the proxy keeps its own
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
            connector = aiohttp.TCPConnector(ssl=context, limit=0)
            self._session = aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False)
            app = web.Application(client_max_size=MAX_BODY_BYTES)
            app.router.add_route("*", "/{path:.*}", self._handle)
            # handler_cancellation: a client that hangs up ends its request here too, and so the upstream watch
            runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=2.0)
            await runner.setup()
            await web.TCPSite(runner, self.host, self.port).start()
            self.port = int(runner.addresses[0][1])
            self.url = f"http://{self.host}:{self.port}"
        except BaseException as error:
            self._failure = error
            self._started.set()
            if self._session is not None:
                await self._session.close()
            return
        self._started.set()
        try:
            await self._stopping.wait()
        finally:
            for watch in self._watches:
                watch.drop(abrupt=False)
            await runner.cleanup()
            await self._session.close()

    def _in_loop(self, function: Callable[[], T]) -> T:
        """`function()` on the proxy's loop (what only that thread may touch), its result here."""
        loop = self._loop
        if self._thread is None or loop is None:
            raise RuntimeError("start() the fault proxy first")

        async def call() -> T:
            return function()

        return asyncio.run_coroutine_threadsafe(call(), loop).result(30)

    # -- faults -----------------------------------------------------------------------------------------------

    def add_fault(self, fault: Fault) -> int:
        """The fault applies to requests from now on; its id (for `remove_fault`)."""
        with self._lock:
            return self._injector.add(fault)

    def remove_fault(self, fault_id: int) -> bool:
        """False if it is gone already (removed, or its `count` used up)."""
        with self._lock:
            return self._injector.remove(fault_id)

    def clear_faults(self) -> None:
        with self._lock:
            self._injector.clear()

    def faults(self) -> list[ActiveFault]:
        """The active faults, with how many times each will still fire."""
        with self._lock:
            return self._injector.active()

    def drop_watches(self, resource: str | None = None, *, abrupt: bool = False) -> int:
        """End the open watches now (all, or those of one resource: `pods`, `pytorchjobs.kubeflow.org`), as a
        restarting API server does: the client sees its watch end and must watch again. `abrupt`: cut the
        connections mid-stream instead (a crashed server, a broken network). How many were open."""

        def drop() -> int:
            dropped = [watch for watch in self._watches if resource is None or watch.key == resource]
            for watch in dropped:
                watch.drop(abrupt)
            return len(dropped)

        return self._in_loop(drop)

    def open_watches(self, resource: str | None = None) -> int:
        """How many watches (of one resource) are streaming through the proxy now."""
        return self._in_loop(lambda: sum(1 for w in self._watches if resource is None or w.key == resource))

    # -- what clients sent ------------------------------------------------------------------------------------

    def requests(self) -> list[RequestRecord]:
        """The latest requests (`KEEP` of them), oldest first, each with the status it was answered (200 for a
        watch that opened)."""
        with self._lock:
            return list(self._records)

    def counts(self) -> dict[tuple[str, str], int]:
        """(verb, resource[/subresource]) -> how many such requests came (non-resource ones under their path)."""
        with self._lock:
            return dict(self._counts)

    def clear_requests(self) -> None:
        with self._lock:
            self._records.clear()
            self._counts.clear()

    def _seen(self, record: RequestRecord, code: int) -> None:
        with self._lock:
            self._records.append(replace(record, code=code))
            self._counts[(record.verb, record.rbac_resource or record.non_resource_url)] += 1

    # -- serving ----------------------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        record = request_record(request.method, request.path, request.query, request.headers.get("User-Agent", ""))
        with self._lock:
            decision = self._injector.decide(record)
        if decision.delay_s:
            await asyncio.sleep(decision.delay_s)
        if decision.error is not None:
            self._seen(record, decision.error.code)
            return _status_response(decision.error)
        if decision.expire:
            self._seen(record, 200)
            return _expired_watch(request.query.get("resourceVersion", ""))
        return await self._forward(request, record, decision)

    async def _forward(self, request: web.Request, record: RequestRecord, decision: Decision) -> web.StreamResponse:
        assert self._session is not None and self._loop is not None
        body = await request.read()
        headers = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in NOT_FORWARDED)
        try:
            upstream = await self._session.request(
                request.method,
                URL(self.upstream + request.raw_path, encoded=True),  # as the client encoded it
                headers=headers,
                data=body or None,
                allow_redirects=False,
                skip_auto_headers=AUTO_HEADERS,
            )
        except aiohttp.ClientError as error:
            unreachable = ApiError(503, "ServiceUnavailable", f"the fault proxy cannot reach the API server: {error}")
            self._seen(record, unreachable.code)
            return _status_response(unreachable)
        self._seen(record, upstream.status)
        reply = web.StreamResponse(
            status=upstream.status,
            reason=upstream.reason,
            headers=CIMultiDict((k, v) for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP),
        )
        watch = _Watch(record.resource_key) if record.verb == "watch" and upstream.status == 200 else None
        timer = None
        complete = False
        try:
            await reply.prepare(request)
            if watch is not None:
                self._watches.add(watch)
                if decision.drop_after_s is not None:
                    timer = self._loop.call_later(decision.drop_after_s, watch.drop, decision.abrupt)
            complete = await _copy(upstream, reply, watch)
            if watch is not None and watch.abrupt and request.transport is not None:
                # no chunked stream's terminator: the client reads a response broken off mid-way
                request.transport.close()
            else:
                await reply.write_eof()
        except ConnectionError:
            pass  # the client hung up
        except aiohttp.ClientError:
            # the upstream broke off: so does the client's response, rather than look complete
            if request.transport is not None:
                request.transport.close()
        finally:
            if timer is not None:
                timer.cancel()
            if watch is not None:
                self._watches.discard(watch)
            if complete:
                upstream.release()  # the connection goes back to the pool
            else:
                upstream.close()  # mid-stream: that connection cannot be reused
        return reply


async def _copy(upstream: aiohttp.ClientResponse, reply: web.StreamResponse, watch: _Watch | None) -> bool:
    """Each chunk of the upstream's body as it arrives, until it ends (True) or the watch is dropped (False)."""
    if watch is None:
        async for chunk in upstream.content.iter_any():
            await reply.write(chunk)
        return True
    dropped = asyncio.ensure_future(watch.dropped.wait())
    read: asyncio.Future[bytes] | None = None
    try:
        while not watch.dropped.is_set():
            read = asyncio.ensure_future(upstream.content.readany())
            await asyncio.wait((read, dropped), return_when=asyncio.FIRST_COMPLETED)
            if not read.done():
                return False
            chunk = read.result()
            if not chunk:
                return True
            await reply.write(chunk)
        return False
    finally:
        # also when the client hung up (the handler is cancelled): no read may outlive the upstream's connection
        dropped.cancel()
        if read is not None:
            read.cancel()


def _status_response(error: ApiError) -> web.Response:
    return web.json_response(error.status(), status=error.code, headers=error.headers)


def _expired_watch(resource_version: str) -> web.Response:
    """What the API server streams for a watch from a version it no longer has (etcd compacted it)."""
    status = expired(f"too old resource version: {resource_version or 0} (injected fault)").status()
    event = json.dumps({"type": "ERROR", "object": status}, separators=(",", ":")) + "\n"
    return web.Response(status=200, body=event.encode("utf-8"), content_type="application/json")
