"""The HTTP side: kmock's Kubernetes scaffold serving the verbs, discovery, watches, faults and request records.

kmock (`KubernetesScaffold` + `Server`) provides the aiohttp server on loopback, request parsing (method, query,
JSON body), `Status` rendering for unexpected errors and its request DSL for anything this handler does not
serve. Its in-memory emulator (`KubernetesEmulator`) is not used as the store: it merges patches shallowly,
keeps every version of every object, finds an object by scanning all of them and has no resource versions;
`dl2.kube.apiserver.store` and `verbs` replace it.

Each request is classified in RBAC terms (`recording.RequestRecord`), checked against the active faults, served
and recorded with its response code. Paths under `/dl2/` are the admin endpoints (`admin`), outside the
Kubernetes API and never recorded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp.web
import attrs
import kmock

from dl2.kube.apiserver import errors
from dl2.kube.apiserver.errors import ApiError
from dl2.kube.apiserver.faults import NO_FAULT, Decision, FaultInjector
from dl2.kube.apiserver.paths import ApiPath, parse_api_path, rbac_verb
from dl2.kube.apiserver.recording import RequestRecord, RequestRecorder
from dl2.kube.apiserver.resources import ResourceType
from dl2.kube.apiserver.selectors import FieldRequirement, FieldSelector, LabelSelector
from dl2.kube.apiserver.store import Stored, Watcher, encode
from dl2.kube.apiserver.tables import table_of, wants_table
from dl2.kube.apiserver.verbs import PATCH_TYPES, Verbs

VERSION_INFO = {
    "major": "1",
    "minor": "35",
    "gitVersion": "v1.35.0+dl2.local",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "n/a (dl2 local API server on kmock)",
    "compiler": "python",
    "platform": "linux/amd64",
}
KMOCK_REQUESTS_KEPT = 1000
"""kmock keeps every parsed request for its DSL's assertions; a long-running server keeps only the latest ones."""

AdminHandler = Callable[[kmock.Request], Awaitable[aiohttp.web.StreamResponse]]


def json_response(
    body: bytes | dict[str, Any], status: int = 200, headers: dict[str, str] | None = None
) -> aiohttp.web.Response:
    data = body if isinstance(body, bytes) else encode(body)
    return aiohttp.web.Response(body=data, status=status, content_type="application/json", headers=headers)


def error_response(error: ApiError) -> aiohttp.web.Response:
    return json_response(error.status(), error.code, error.headers or None)


def header(request: kmock.Request, name: str) -> str:
    lowered = name.lower()
    return next((value for key, value in request.headers.items() if key.lower() == lowered), "")


@attrs.define(kw_only=True)
class ApiHandler(kmock.KubernetesScaffold):
    verbs: Verbs
    recorder: RequestRecorder
    faults: FaultInjector
    bookmark_interval_s: float = 60.0
    """Idle watches that allow bookmarks get one this often (a real API server: about once a minute)."""
    server_address: str = ""
    admin: AdminHandler | None = None
    watchers: set[tuple[ResourceType, Watcher]] = attrs.field(factory=set)

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        """kmock's entry point, with this module's path parser: kmock 0.8 fails on `/api/v1/namespaces` before any
        handler runs (it reads `namespaces` as a namespace prefix)."""
        try:
            request = await _parse(raw_request, len(self._requests))
            self._requests.append(request)
            return await self._handle(request)
        except Exception as error:  # a bug here, not a refusal (those are ApiErrors): a 500 with the traceback
            return await self._render_error(error)

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        requests = self._requests  # kmock's own list of every request (for its DSL); keep it bounded
        if len(requests) > 2 * KMOCK_REQUESTS_KEPT:
            del requests[:-KMOCK_REQUESTS_KEPT]
        path_text = request.url.path
        if path_text.startswith("/dl2/") and self.admin is not None:
            return await self.admin(request)
        params = {key: str(value) for key, value in request.params.items()}
        path = parse_api_path(path_text)
        record = RequestRecord(
            verb=rbac_verb(str(request.method.value), path, params),
            api_group=path.group if path and path.plural else "",
            resource=(path.plural or "") if path else "",
            subresource=(path.subresource or "") if path else "",
            namespace=(path.namespace or "") if path else "",
            name=(path.name or "") if path else "",
            user_agent=header(request, "User-Agent"),
            code=0,
            non_resource_url="" if path and path.plural else path_text,
        )
        decision = self.faults.decide(record)
        if decision.delay_s > 0:
            await asyncio.sleep(decision.delay_s)
        if decision.error is not None:
            self.recorder.add(_with_code(record, decision.error.code))
            return error_response(decision.error)
        response: aiohttp.web.Response | None
        try:
            if path is not None and path.plural is not None:
                rt = self._resource_type(path)
                if record.verb == "watch":
                    return await self._watch(request, rt, path, params, decision)  # records itself
                response = self._serve(request, rt, path, params)
            else:
                response = self._discovery(path_text, path)
        except ApiError as error:
            response = error_response(error)
        if response is None:  # not a Kubernetes path: kmock's own reactions (404 unless a test added one)
            self.recorder.add(_with_code(record, 404))
            return await super()._handle(request)
        self.recorder.add(_with_code(record, response.status))
        return response

    # -- discovery ------------------------------------------------------------------------------------------

    def _discovery(self, text: str, path: ApiPath | None) -> aiohttp.web.Response | None:
        registry = self.verbs.registry
        stripped = text.rstrip("/") or "/"
        if stripped == "/version":
            return json_response(VERSION_INFO)
        if stripped in ("/healthz", "/livez", "/readyz"):
            return aiohttp.web.Response(text="ok")
        if stripped == "/":
            paths = ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version"]
            for group, versions in registry.groups().items():
                paths += [f"/apis/{group}", *(f"/apis/{group}/{version}" for version in versions)]
            return json_response({"paths": sorted(paths)})
        if stripped == "/api":
            return json_response(registry.api_versions(self.server_address))
        if stripped == "/apis":
            return json_response(registry.api_group_list())
        if path is None and stripped.startswith("/apis/") and stripped.count("/") == 2:
            document = registry.api_group(stripped.split("/")[2])
            if document is None:
                raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
            return json_response(document)
        if path is not None and path.plural is None:
            document = registry.api_resource_list(path.group, path.version)
            if document is None:
                raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
            return json_response(document)
        return None

    # -- resources ------------------------------------------------------------------------------------------

    def _resource_type(self, path: ApiPath) -> ResourceType:
        assert path.plural is not None
        rt = self.verbs.registry.lookup(path.group, path.version, path.plural)
        if rt is None or (not rt.namespaced and path.namespace is not None):
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
        return rt

    def _serve(
        self, request: kmock.Request, rt: ResourceType, path: ApiPath, params: dict[str, str]
    ) -> aiohttp.web.Response:
        verbs, method, name, sub = self.verbs, request.method.value, path.name, path.subresource
        namespace = path.namespace
        if sub is not None and sub not in rt.subresources:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
        if sub == "scale":
            assert name is not None
            if method == "GET":
                return json_response(verbs.scale(rt, namespace, name))
            if method == "PUT":
                return json_response(verbs.replace_scale(rt, namespace, name, request.data))
            if method == "PATCH":
                return json_response(verbs.patch_scale(rt, namespace, name, _patch_type(request), request.data))
            raise errors.method_not_allowed(f"{method} is not allowed on {rt.plural}/scale")
        if sub == "binding":
            assert name is not None
            if method != "POST":
                raise errors.method_not_allowed(f"{method} is not allowed on pods/binding")
            verbs.bind(rt, namespace, name, request.data)
            return json_response(
                {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201
            )
        if name is None:
            if method == "GET":
                return self._list(request, rt, namespace, params)
            if method == "POST":
                return self._object(request, rt, verbs.create(rt, namespace, request.data), 201)
            if method == "DELETE":
                labels, fields = _selectors(params)
                deleted = verbs.delete_collection(rt, namespace, labels, fields)
                return self._list_body(rt, deleted, verbs.store.rv)
            raise errors.method_not_allowed(f"{method} is not allowed on a collection of {rt.plural}")
        if method == "GET":
            return self._object(request, rt, verbs.get(rt, namespace, name))
        if method == "PUT":
            return self._object(request, rt, verbs.replace(rt, namespace, name, request.data, sub))
        if method == "PATCH":
            patched = verbs.patch(rt, namespace, name, _patch_type(request), request.data, sub)
            return self._object(request, rt, patched)
        if method == "DELETE" and sub is None:
            return self._object(request, rt, verbs.delete(rt, namespace, name, request.data))
        raise errors.method_not_allowed(f"{method} is not allowed here")

    def _object(
        self, request: kmock.Request, rt: ResourceType, stored: Stored, status: int = 200
    ) -> aiohttp.web.Response:
        if wants_table(header(request, "Accept")):
            return json_response(table_of(rt, [stored.raw], str(stored.rv)), status)
        return json_response(stored.body, status)

    def _list(
        self, request: kmock.Request, rt: ResourceType, namespace: str | None, params: dict[str, str]
    ) -> aiohttp.web.Response:
        labels, fields = _selectors(params)
        limit = _int_param(params, "limit")
        result = self.verbs.list_objects(rt, namespace, labels, fields, limit, params.get("continue") or None)
        if wants_table(header(request, "Accept")):
            table = table_of(rt, [stored.raw for stored in result.items], str(result.rv))
            if result.continue_token:
                table["metadata"]["continue"] = result.continue_token
            return json_response(table)
        return self._list_body(rt, result.items, result.rv, result.continue_token, result.remaining)

    def _list_body(
        self,
        rt: ResourceType,
        items: list[Stored],
        rv: int,
        continue_token: str | None = None,
        remaining: int | None = None,
    ) -> aiohttp.web.Response:
        metadata: dict[str, Any] = {"resourceVersion": str(rv)}
        if continue_token:
            metadata["continue"] = continue_token
            metadata["remainingItemCount"] = remaining
        head = json.dumps({"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": metadata})
        body = head[:-1].encode() + b',"items":[' + b",".join(stored.body for stored in items) + b"]}"
        return json_response(body)

    # -- watch ----------------------------------------------------------------------------------------------

    async def _watch(
        self, request: kmock.Request, rt: ResourceType, path: ApiPath, params: dict[str, str], decision: Decision
    ) -> aiohttp.web.StreamResponse:
        record = RequestRecord(
            "watch", rt.group, rt.plural, "", path.namespace or "", path.name or "", header(request, "User-Agent"), 200
        )
        try:
            watcher, initial = self._open_watch(rt, path, params)
        except ApiError as error:
            self.recorder.add(_with_code(record, error.code))
            return error_response(error)
        self.recorder.add(record)
        raw_request = request._raw_request  # set by `_parse`: the aiohttp request to stream the answer on
        assert raw_request is not None
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        try:
            await response.prepare(raw_request)
            await response.write(initial)
            if watcher is not None:  # None: the answer was a 410 ERROR event
                timeout = _float_param(params, "timeoutSeconds")
                bookmarks = params.get("allowWatchBookmarks", "").lower() == "true"
                await self._stream(response, rt, watcher, timeout, bookmarks, decision)
            await response.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            pass  # the client went away
        finally:
            if watcher is not None:
                self.verbs.store.unwatch(rt, watcher)
                self.watchers.discard((rt, watcher))
        return response

    def _open_watch(self, rt: ResourceType, path: ApiPath, params: dict[str, str]) -> tuple[Watcher | None, bytes]:
        labels, fields = _selectors(params)
        if path.name is not None:
            fields = FieldSelector((*fields.requirements, FieldRequirement("metadata.name", False, path.name)))
        watcher = Watcher(path.namespace if rt.namespaced else None, labels, fields)
        since = params.get("resourceVersion") or "0"
        store = self.verbs.store
        initial = b""
        if params.get("sendInitialEvents", "").lower() == "true":
            # a streaming list (client-go's WatchList): the current objects, then a bookmark that says so
            listed = self.verbs.list_objects(rt, watcher.namespace, labels, fields).items
            end = {
                "kind": rt.kind,
                "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": str(store.rv), "annotations": {"k8s.io/initial-events-end": "true"}},
            }
            initial = b"".join(_event_line("ADDED", stored.body) for stored in listed)
            initial += _event_line("BOOKMARK", encode(end))
        elif since == "0":
            # no version: the current objects as ADDED events, then changes (a real server's "start at most recent")
            listed = self.verbs.list_objects(rt, watcher.namespace, labels, fields).items
            initial = b"".join(_event_line("ADDED", stored.body) for stored in listed)
        else:
            try:
                version = int(since)
            except ValueError:
                raise errors.bad_request(f"invalid resourceVersion {since!r}") from None
            events = store.events_since(rt, version)
            if events is None:
                window = store.bucket(rt).window_start
                status = errors.expired(f"too old resource version: {version} ({window + 1})").status()
                return None, _event_line("ERROR", encode(status))
            for event in events:
                watcher.offer(event)
        store.watch(rt, watcher)  # no await since the snapshot: no change can slip between the two
        self.watchers.add((rt, watcher))
        return watcher, initial

    async def _stream(
        self,
        response: aiohttp.web.StreamResponse,
        rt: ResourceType,
        watcher: Watcher,
        timeout: float | None,
        bookmarks: bool,
        decision: Decision,
    ) -> None:
        """Send queued events as they come, bookmarks when idle, until the timeout, a drop or a disconnect."""
        loop = asyncio.get_running_loop()
        deadlines = [loop.time() + t for t in (timeout, decision.drop_after_s) if t is not None]
        deadline = min(deadlines) if deadlines else None
        while True:
            if watcher.queue:
                batch = [_event_line(kind, stored.body) for kind, stored in watcher.queue]
                watcher.queue.clear()
                await response.write(b"".join(batch))
            if watcher.dropped:
                return
            watcher.wakeup.clear()
            wait = self.bookmark_interval_s if bookmarks else None
            if deadline is not None:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    if bookmarks:
                        await response.write(self._bookmark(rt))
                    return
                wait = remaining if wait is None else min(wait, remaining)
            try:
                await asyncio.wait_for(watcher.wakeup.wait(), wait)
            except TimeoutError:
                if bookmarks and not watcher.queue:
                    await response.write(self._bookmark(rt))

    def _bookmark(self, rt: ResourceType) -> bytes:
        """A BOOKMARK: every change up to the current version has been sent (events are queued as they happen)."""
        body = {
            "kind": rt.kind,
            "apiVersion": rt.api_version,
            "metadata": {"resourceVersion": str(self.verbs.store.rv)},
        }
        return _event_line("BOOKMARK", encode(body))

    def drop_watches(self, resource: str | None = None) -> int:
        """Close every open watch (of one resource: `plural` or `plural.group`); returns how many."""
        dropped = 0
        for rt, watcher in list(self.watchers):
            if resource is None or resource in (rt.plural, rt.qualified):
                watcher.drop()
                dropped += 1
        return dropped


async def _parse(raw_request: aiohttp.web.BaseRequest, number: int) -> kmock.Request:
    body = await raw_request.read()
    try:
        data = json.loads(body) if body else None
    except ValueError:
        data = None  # not JSON (e.g. an apply patch in YAML): the verbs refuse it by content type
    path = parse_api_path(raw_request.path)
    params = dict(raw_request.query)
    resource = None
    if path is not None:
        resource = kmock.resource(group=path.group, version=path.version, plural=path.plural)
    action = None
    if path is not None and path.plural is not None:
        verb = rbac_verb(raw_request.method, path, params)
        action = _ACTIONS.get(verb)
    return kmock.Request(
        id=number,
        raw_request=raw_request,
        url=raw_request.url,
        method=raw_request.method,
        params=params,
        headers=dict(raw_request.headers),
        body=body,
        text=body.decode("utf-8", errors="replace"),
        data=data,
        action=action,
        resource=resource,
        namespace=path.namespace if path else None,
        name=path.name if path else None,
        subresource=path.subresource if path else None,
    )


_ACTIONS = {
    "list": kmock.action.LIST,
    "watch": kmock.action.WATCH,
    "get": kmock.action.FETCH,
    "create": kmock.action.CREATE,
    "patch": kmock.action.UPDATE,
    "update": kmock.action.UPDATE,
    "delete": kmock.action.DELETE,
}


def _with_code(record: RequestRecord, code: int) -> RequestRecord:
    return dataclasses.replace(record, code=code)


def _event_line(kind: str, body: bytes) -> bytes:
    return b'{"type":"' + kind.encode() + b'","object":' + body + b"}\n"


def _selectors(params: dict[str, str]) -> tuple[LabelSelector, FieldSelector]:
    return LabelSelector.parse(params.get("labelSelector")), FieldSelector.parse(params.get("fieldSelector"))


def _int_param(params: dict[str, str], name: str) -> int | None:
    text = params.get(name)
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise errors.bad_request(f"{name} must be an integer, got {text!r}") from None


def _float_param(params: dict[str, str], name: str) -> float | None:
    text = params.get(name)
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise errors.bad_request(f"{name} must be a number, got {text!r}") from None
    return value if value > 0 else None


def _patch_type(request: kmock.Request) -> str:
    content_type = header(request, "Content-Type").split(";")[0].strip().lower()
    if content_type not in PATCH_TYPES:
        raise errors.unsupported_media_type(content_type or "(none)")
    return content_type


__all__ = ["NO_FAULT", "ApiHandler", "error_response", "json_response"]
