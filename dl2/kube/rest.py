"""Requests as plain JSON over the official client's connection (its TLS, credentials and pool), without its model
classes: much faster for the thousands of objects a busy cluster lists and writes. Each write's resourceVersion is
kept per resource (what the simulated clock's barrier names: `dl2.kube.clock`). Used by the controller's caches
and by the cluster twin."""

from __future__ import annotations

import builtins
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
TOO_MANY_ATTEMPTS = 10
"""Tries of a request answered 429 Too Many Requests (client-go's number)."""


@dataclass(frozen=True, slots=True)
class Resource:
    group: str
    version: str
    plural: str
    namespaced: bool = True
    variant: str = ""
    """A part of the resource watched on its own (by a label selector), with its own version in the clock's
    barrier: `pods/kubeflow` (a filtered watch only advances with the objects it selects)."""

    @property
    def key(self) -> str:
        """`pods`, `pytorchjobs.kubeflow.org`, `pods/volcano`: how the clock's barrier names it."""
        key = f"{self.plural}.{self.group}" if self.group else self.plural
        return f"{key}/{self.variant}" if self.variant else key

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        parts = [root]
        if self.namespaced and namespace is not None:
            parts.append(f"/namespaces/{namespace}")
        parts.append(f"/{self.plural}")
        if name is not None:
            parts.append(f"/{name}")
        if subresource is not None:
            parts.append(f"/{subresource}")
        return "".join(parts)


NAMESPACES = Resource("", "v1", "namespaces", namespaced=False)
NODES = Resource("", "v1", "nodes", namespaced=False)
PODS = Resource("", "v1", "pods")
KUBEFLOW_PODS = Resource("", "v1", "pods", variant="kubeflow")
"""Pods of PyTorchJobs (label `training.kubeflow.org/job-name`, set by the training operator)."""
VOLCANO_PODS = Resource("", "v1", "pods", variant="volcano")
"""Pods of Volcano Jobs (label `volcano.sh/job-name`, set by Volcano's job controller)."""
CONFIGMAPS = Resource("", "v1", "configmaps")
SERVICEACCOUNTS = Resource("", "v1", "serviceaccounts")
PYTORCHJOBS = Resource("kubeflow.org", "v1", "pytorchjobs")
VOLCANO_JOBS = Resource("batch.volcano.sh", "v1alpha1", "jobs")
EVENTS = Resource("events.k8s.io", "v1", "events")
AUTOSCALERS = Resource("autoscaling", "v2", "horizontalpodautoscalers")


class Rest:
    """JSON requests through a `kubernetes.client.ApiClient`; thread-safe (its pool is)."""

    def __init__(self, api: Any, timeout_s: float = 30.0) -> None:
        """`timeout_s`: of each request (a watch's is its own)."""
        self.api = api
        self.timeout_s = timeout_s
        self.written: dict[str, int] = {}
        """Resource key -> the highest resourceVersion a write of this client returned."""
        self.requests = 0
        self._lock = threading.Lock()

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, Any] | None = None,
        content_type: str = JSON,
    ) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException

        method, url, headers, body, post = self.api.param_serialize(
            method,
            path,
            query_params=list((query or {}).items()),
            header_params={"Accept": JSON, "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
        )
        for attempt in range(TOO_MANY_ATTEMPTS):
            response = self.api.call_api(method, url, headers, body, post, _request_timeout=self.timeout_s)
            raw = response.read()
            with self._lock:
                self.requests += 1
            if response.status != 429 or attempt == TOO_MANY_ATTEMPTS - 1:
                break
            # the server sheds load (priority and fairness) or a resource's cache is initializing: as client-go
            # does, wait as long as it asks and try again
            time.sleep(min(float(response.headers.get("Retry-After") or 1), 10.0))
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=raw.decode("utf-8", "replace"), data=None)
        data: dict[str, Any] = json.loads(raw) if raw else {}
        return data

    def _wrote(self, resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            with self._lock:
                self.written[resource.key] = max(self.written.get(resource.key, 0), int(version))
        return obj

    def get(
        self, resource: Resource, namespace: str | None, name: str, subresource: str | None = None
    ) -> dict[str, Any]:
        return self.request("GET", resource.path(namespace, name, subresource))

    def list(self, resource: Resource, namespace: str | None = None, **query: Any) -> list[dict[str, Any]]:
        """Every item, page by page (`labelSelector=...` etc. as keywords)."""
        return self.list_at(resource, namespace, **query)[0]

    def list_at(
        self, resource: Resource, namespace: str | None = None, **query: Any
    ) -> tuple[builtins.list[dict[str, Any]], str]:
        """Every item and the list's resourceVersion (what a watch resumes from): the pages of one snapshot."""
        items: builtins.list[dict[str, Any]] = []
        token = None
        while True:
            page = dict(query, limit=500, **({"continue": token} if token else {}))
            data = self.request("GET", resource.path(namespace), query=page)
            items += data.get("items") or []
            metadata = data.get("metadata") or {}
            token = metadata.get("continue")
            if not token:
                return items, str(metadata.get("resourceVersion") or "")

    def create(self, resource: Resource, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        return self._wrote(resource, self.request("POST", resource.path(namespace), body))

    def merge_patch(
        self, resource: Resource, namespace: str | None, name: str, body: dict[str, Any], subresource: str | None = None
    ) -> dict[str, Any]:
        path = resource.path(namespace, name, subresource)
        return self._wrote(resource, self.request("PATCH", path, body, content_type=MERGE_PATCH))

    def patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        body: Any,
        content_type: str = MERGE_PATCH,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """A merge patch (or, with `content_type`, a JSON patch)."""
        path = resource.path(namespace, name, subresource)
        return self._wrote(resource, self.request("PATCH", path, body, content_type=content_type))

    def replace(self, resource: Resource, namespace: str | None, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._wrote(resource, self.request("PUT", resource.path(namespace, name), body))

    def delete_now(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        """Delete with no grace period (a pod is gone at once, as a kubelet confirming at once would make it); the
        answer carries the deletion's resourceVersion, the one its watch event has."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
        return self._wrote(resource, self.request("DELETE", resource.path(namespace, name), body))

    def watch(
        self, resource: Resource, namespace: str | None, resource_version: str, timeout_s: int = 300, **query: Any
    ) -> WatchStream:
        """A watch from `resource_version` that the server ends after `timeout_s` (bookmarks asked for)."""
        query = dict(query, resourceVersion=resource_version, timeoutSeconds=timeout_s)
        return WatchStream(self, resource, namespace, query, timeout_s + 30.0)

    def bind(self, namespace: str, name: str, node: str, resource: Resource = PODS) -> dict[str, Any]:
        """`pods/binding`, as a scheduler binds a pod; the answer is a Status, so the bound pod is read back for
        its version (recorded as a write of `resource`: the pods, or the part of them its watch selects)."""
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        self.request("POST", resource.path(namespace, name, "binding"), body)
        return self._wrote(resource, self.get(resource, namespace, name))


class WatchStream:
    """One open watch: events as dicts (`{"type": ..., "object": {...}}`) until the server ends the stream;
    `close()` from another thread ends it at once."""

    def __init__(self, rest: Rest, resource: Resource, namespace: str | None, query: dict[str, Any], timeout_s: float):
        from kubernetes.client.exceptions import ApiException

        api = rest.api
        method, url, headers, _, _ = api.param_serialize(
            "GET",
            resource.path(namespace),
            query_params=list(dict(query, watch="true", allowWatchBookmarks="true").items()),
            header_params={"Accept": JSON},
            auth_settings=["BearerToken"],
        )
        self._response = api.call_api(method, url, headers, _request_timeout=(10.0, timeout_s)).response
        with rest._lock:
            rest.requests += 1
        if not 200 <= self._response.status <= 299:
            body = self._response.read().decode("utf-8", "replace")
            raise ApiException(status=self._response.status, reason=self._response.reason, body=body)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        pending = b""
        for chunk in self._response.stream(amt=None, decode_content=True):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.strip():
                    yield json.loads(line)
        if pending.strip():
            yield json.loads(pending)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # already closed
            self._response.shutdown()
        self._response.release_conn()
