"""Informers: a cache of one resource kept by a list and then a watch, as client-go's reflector keeps one.

A daemon thread lists the resource (optionally by label and field selectors), then watches from the list's
resourceVersion and applies every event to the cache. A watch that ends (the server's timeout, a dropped
connection, a restarting server) resumes from the last version seen; `410 Gone` (that version was compacted away)
lists again and replaces the cache; a resource the server does not serve (its CRD is not installed: 404) is an
empty cache, listed again every few seconds; any other failure backs off exponentially with seeded jitter. The
objects are the API's JSON, never mutated (a reader may hold one while the cache moves on).

`version` is the newest resourceVersion the cache reflects; `wait_for(version)` blocks until it reaches one (the
simulated clock's barrier, `dl2.kube.clock`). `changed_version` is the newest version of a change it applied (an
object added, modified or deleted): a bookmark moves `version` on, not `changed_version`. A barrier for another
informer of the same selection names `changed_version`: that informer sees the same changes, but a bookmark only
when the server sends it one (about once a minute), so a bookmark's version would hold it that long.

A resourceVersion is opaque to clients in general; here it is compared as a number, which is what etcd revisions
of one API server are, and only against versions this same server returned.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

from dl2.kube.metrics import Metrics
from dl2.kube.rest import Resource, Rest, WatchStream


def object_key(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    return f"{namespace}/{metadata.get('name')}" if namespace else str(metadata.get("name"))


def _version(obj: dict[str, Any]) -> int:
    text = (obj.get("metadata") or {}).get("resourceVersion")
    return int(text) if text and str(text).isdigit() else 0


class Informer:
    def __init__(
        self,
        rest: Rest,
        resource: Resource,
        metrics: Metrics,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        watch_timeout_s: int = 300,
        max_backoff_s: float = 5.0,
        seed: int = 0,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        """`on_change` is called (from the informer's thread) after every change of the cache."""
        self.rest = rest
        self.resource = resource
        self.metrics = metrics
        self.namespace = namespace
        self.query = {
            key: value
            for key, value in (("labelSelector", label_selector), ("fieldSelector", field_selector))
            if value is not None
        }
        self.watch_timeout_s = watch_timeout_s
        self.max_backoff_s = max_backoff_s
        self.rng = random.Random(seed)
        self.on_change = on_change
        self.restarts = 0
        """Watches that had to be opened again (ended, dropped, expired or failed)."""
        self.relists = 0
        self.served = True
        """False while the resource is not served (404 on its list): the cache is then empty."""
        self._objects: dict[str, dict[str, Any]] = {}
        self._version = 0
        self._changed_version = 0
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._changed = threading.Condition()
        self._stream: WatchStream | None = None
        self._thread = threading.Thread(target=self._run, name=f"dl2-informer-{resource.key}", daemon=True)

    @property
    def operation(self) -> str:
        return self.resource.key

    def start(self) -> Informer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.close()
        if self._thread.is_alive():
            self._thread.join(5)

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout_s: float) -> bool:
        return self._synced.wait(timeout_s)

    @property
    def version(self) -> int:
        with self._changed:
            return self._version

    @property
    def changed_version(self) -> int:
        with self._changed:
            return self._changed_version

    def wait_for(self, version: int, timeout_s: float) -> bool:
        """Block until the cache reflects `version` (or a later one); False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while self._version < version:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True

    def items(self) -> list[dict[str, Any]]:
        """The cached objects now (a new list; the objects themselves are shared and must not be changed)."""
        with self._changed:
            return list(self._objects.values())

    def get(self, key: str) -> dict[str, Any] | None:
        """An object by `namespace/name` (or `name`, cluster-scoped)."""
        with self._changed:
            return self._objects.get(key)

    # -- the reflector ----------------------------------------------------------------------------------------

    def _replace(self, items: list[dict[str, Any]], version: str) -> None:
        with self._changed:
            self._objects = {object_key(obj): obj for obj in items}
            self._version = max(self._version, int(version) if version.isdigit() else 0)
            self._changed_version = max([self._changed_version, *map(_version, items)])
            self._changed.notify_all()
        self._synced.set()
        if self.on_change is not None:
            self.on_change()

    def _apply(self, event: dict[str, Any]) -> str | None:
        """Apply one watch event; the version to resume from (None: list again)."""
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            code = int(obj.get("code") or 0)
            self.metrics.api_errors.labels(f"watch {self.operation}", str(code)).inc()
            if code == 410:
                return None
            raise RuntimeError(f"watch of {self.operation}: {obj.get('message', obj)}")
        version = _version(obj)
        with self._changed:
            if kind == "DELETED":
                self._objects.pop(object_key(obj), None)
            elif kind in ("ADDED", "MODIFIED"):
                self._objects[object_key(obj)] = obj
            self._version = max(self._version, version)
            if kind != "BOOKMARK":
                self._changed_version = max(self._changed_version, version)
            self._changed.notify_all()
        if kind != "BOOKMARK" and self.on_change is not None:
            self.on_change()
        return str(version)

    def _run(self) -> None:
        from kubernetes.client.exceptions import ApiException

        version: str | None = None
        failures = 0
        while not self._stop.is_set():
            verb = "list" if version is None else "watch"
            try:
                if version is None:
                    items, version = self.rest.list_at(self.resource, self.namespace, **self.query)
                    self.relists += 1
                    self.served = True
                    self._replace(items, version)
                    verb = "watch"
                self._stream = self.rest.watch(
                    self.resource, self.namespace, version, self.watch_timeout_s, **self.query
                )
                for event in self._stream:
                    resumed = self._apply(event)
                    if resumed is None:
                        version = None
                        break
                    version = resumed if resumed != "0" else version
                    failures = 0
                    if self._stop.is_set():
                        return
                self.restarts += 1
                continue
            except ApiException as error:
                self.restarts += 1
                self.metrics.api_errors.labels(f"{verb} {self.operation}", str(error.status)).inc()
                if error.status == 410:
                    version = None  # compacted: list again
                    continue
                if error.status == 404 and verb == "list":
                    # the resource is not served (a cluster without that operator's CRD): empty until it is
                    self.served = False
                    self._replace([], "0")
                    self._stop.wait(self.max_backoff_s)
                    continue
                failures += 1
            except Exception as error:  # dropped connections, timeouts, a server going away
                if self._stop.is_set():
                    return
                self.restarts += 1
                self.metrics.api_errors.labels(f"{verb} {self.operation}", type(error).__name__).inc()
                failures += 1
            finally:
                self._stream = None
            delay = min(self.max_backoff_s, 0.05 * 2**failures) * (0.5 + self.rng.random() / 2)
            self._stop.wait(delay)
