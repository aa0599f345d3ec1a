"""The object store: current objects per resource, one global resource version, watch history and watchers.

Like etcd behind a real API server, every write takes the next global resource version, and the objects' and
lists' `resourceVersion` are that counter. Each resource keeps the last `history` change events so that a
watch can resume from a resource version (`since`); a version older than the retained window is answered
`410 Gone` by the caller, as after an etcd compaction.

Stored objects are never mutated once stored (writers build new dicts, sharing unchanged branches), so readers,
watch events and list responses can hold them without copying; each keeps its JSON encoding once computed.
Everything here runs on the server's event loop thread.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from dl2.kube.apiserver.resources import ResourceType
from dl2.kube.apiserver.selectors import FieldSelector, LabelSelector

ObjectKey = tuple[str, str]
"""(namespace, name); the namespace is "" for cluster-scoped objects."""


def encode(raw: dict[str, Any]) -> bytes:
    return json.dumps(raw, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class Stored:
    """One version of one object: the dict (never mutated), its resource version and its JSON, encoded the first
    time a response or a watch event needs it (a version that nobody reads, such as most of the simulated
    cluster's progress reports when no client lists jobs, is never encoded)."""

    __slots__ = ("_body", "raw", "rv")

    def __init__(self, raw: dict[str, Any], rv: int) -> None:
        self.raw = raw
        self.rv = rv
        self._body: bytes | None = None

    @property
    def body(self) -> bytes:
        if self._body is None:
            self._body = encode(self.raw)
        return self._body

    @property
    def key(self) -> ObjectKey:
        metadata = self.raw["metadata"]
        return metadata.get("namespace") or "", metadata["name"]


@dataclass(frozen=True, slots=True)
class Event:
    """A change: the object after it (for DELETED: its last state) and before it."""

    rv: int
    type: str
    obj: Stored
    old: Stored | None


class Watcher:
    """One open watch: a queue of the events that match its namespace and selectors, as a real API server sends them
    (an object that starts or stops matching a selector arrives as ADDED or DELETED)."""

    max_backlog = 200_000
    """Events a watcher may have queued; a consumer that falls further behind is dropped, as a real API server
    closes a watch that cannot keep up."""

    def __init__(
        self,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
    ) -> None:
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.queue: deque[tuple[str, Stored]] = deque()
        self.wakeup = asyncio.Event()
        self.dropped = False

    def matches(self, stored: Stored) -> bool:
        metadata = stored.raw["metadata"]
        if self.namespace is not None and metadata.get("namespace") != self.namespace:
            return False
        return self.labels.matches(metadata.get("labels")) and self.fields.matches(stored.raw)

    def offer(self, event: Event) -> None:
        now = self.matches(event.obj)
        before = event.old is not None and self.matches(event.old)
        if event.type == "MODIFIED":
            kind = "MODIFIED" if now and before else "ADDED" if now else "DELETED" if before else None
        else:
            kind = event.type if now else None
        if kind is None:
            return
        self.queue.append((kind, event.obj))
        if len(self.queue) > self.max_backlog:
            self.drop()
        self.wakeup.set()

    def drop(self) -> None:
        self.dropped = True
        self.wakeup.set()


@dataclass(slots=True)
class Bucket:
    """All objects of one resource (its versions share them) and its change history."""

    objects: dict[ObjectKey, Stored] = field(default_factory=dict)
    log: deque[Event] = field(default_factory=deque)
    window_start: int = 0
    """Watches from any resource version >= this can be replayed from `log`."""
    watchers: set[Watcher] = field(default_factory=set)
    sorted_keys: list[ObjectKey] | None = None
    """Keys in (namespace, name) order, as etcd lists them; rebuilt after a create or delete."""


class ObjectStore:
    def __init__(self, history: int = 1000) -> None:
        if history < 1:
            raise ValueError(f"history must be at least 1 event per resource, got {history}")
        self.history = history
        self.rv = 0
        self._buckets: dict[tuple[str, str], Bucket] = {}
        self.on_event: list[Callable[[ResourceType, Event], None]] = []
        """Hooks called after every change (the server installs CRDs created through the API with one)."""

    def bucket(self, resource: ResourceType) -> Bucket:
        bucket = self._buckets.get(resource.storage_key)
        if bucket is None:
            bucket = self._buckets[resource.storage_key] = Bucket()
        return bucket

    def get(self, resource: ResourceType, namespace: str, name: str) -> Stored | None:
        return self.bucket(resource).objects.get((namespace, name))

    def scan(self, resource: ResourceType, namespace: str | None = None) -> list[Stored]:
        """Objects in key order, of one namespace or of all (None)."""
        bucket = self.bucket(resource)
        if bucket.sorted_keys is None:
            bucket.sorted_keys = sorted(bucket.objects)
        objects = bucket.objects
        if namespace is None:
            return [objects[key] for key in bucket.sorted_keys]
        return [objects[key] for key in bucket.sorted_keys if key[0] == namespace]

    def namespaces_in_use(self, namespace: str) -> Iterable[tuple[tuple[str, str], ObjectKey]]:
        for storage_key, bucket in self._buckets.items():
            for key in bucket.objects:
                if key[0] == namespace:
                    yield storage_key, key

    def put(self, resource: ResourceType, raw: dict[str, Any], event_type: str, old: Stored | None) -> Stored:
        """Store `raw` (which the store now owns) under the next resource version."""
        self.rv += 1
        raw["metadata"] = {**raw["metadata"], "resourceVersion": str(self.rv)}
        stored = Stored(raw, self.rv)
        bucket = self.bucket(resource)
        if old is None:
            bucket.sorted_keys = None
        bucket.objects[stored.key] = stored
        self._record(resource, bucket, Event(self.rv, event_type, stored, old))
        return stored

    def remove(self, resource: ResourceType, old: Stored) -> Stored:
        """Delete an object; its DELETED event carries its last state under a new resource version."""
        self.rv += 1
        raw = {**old.raw, "metadata": {**old.raw["metadata"], "resourceVersion": str(self.rv)}}
        final = Stored(raw, self.rv)
        bucket = self.bucket(resource)
        del bucket.objects[old.key]
        bucket.sorted_keys = None
        self._record(resource, bucket, Event(self.rv, "DELETED", final, old))
        return final

    def _record(self, resource: ResourceType, bucket: Bucket, event: Event) -> None:
        if len(bucket.log) >= self.history:
            bucket.window_start = bucket.log.popleft().rv
        bucket.log.append(event)
        for watcher in bucket.watchers:
            watcher.offer(event)
        for hook in self.on_event:
            hook(resource, event)

    def events_since(self, resource: ResourceType, since: int) -> list[Event] | None:
        """Events after resource version `since`, or None when some of them are no longer retained."""
        bucket = self.bucket(resource)
        if since < bucket.window_start:
            return None
        return [event for event in bucket.log if event.rv > since]

    def compact(self) -> None:
        """Forget all history (like an etcd compaction): watches from any earlier resource version get 410."""
        for bucket in self._buckets.values():
            bucket.log.clear()
            bucket.window_start = self.rv

    def watch(self, resource: ResourceType, watcher: Watcher) -> None:
        self.bucket(resource).watchers.add(watcher)

    def unwatch(self, resource: ResourceType, watcher: Watcher) -> None:
        self.bucket(resource).watchers.discard(watcher)

    def watchers(self) -> list[tuple[tuple[str, str], Watcher]]:
        return [(key, watcher) for key, bucket in self._buckets.items() for watcher in bucket.watchers]
