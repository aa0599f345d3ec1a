"""A watch on one object (the SchedulerPolicy, the simulated clock) that survives what API servers do to watches.

A daemon thread lists the object (by `metadata.name`), then watches from the list's resourceVersion and keeps the
latest copy. A watch that ends (the server's timeout, a dropped connection, a restarting server) resumes from the
last version seen; `410 Gone` (the version was compacted away) starts over with a list; any other failure backs
off exponentially with jitter. `changed` is set on every new version, so the slot loop wakes up on it.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable
from typing import Any

from dl2.kube.metrics import Metrics


class ObjectWatcher:
    def __init__(
        self,
        list_function: Callable[..., Any],
        args: tuple[Any, ...],
        name: str,
        metrics: Metrics,
        operation: str,
        watch_timeout_s: int = 60,
        max_backoff_s: float = 5.0,
        seed: int = 0,
        wake: threading.Event | None = None,
    ) -> None:
        """`list_function(*args, field_selector=..., ...)`: a list call of the official client that can watch;
        `wake` is set with `changed` (one event can wait on several watchers)."""
        self.list_function = list_function
        self.args = args
        self.name = name
        self.metrics = metrics
        self.operation = operation
        self.watch_timeout_s = watch_timeout_s
        self.max_backoff_s = max_backoff_s
        self.rng = random.Random(seed)
        self.changed = threading.Event()
        self.wake = wake
        self.restarts = 0
        """Watches that had to be opened again (ended, dropped, expired or failed)."""
        self._lock = threading.Lock()
        self._object: dict[str, Any] | None = None
        self._exists = False
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._watch: Any = None
        self._thread = threading.Thread(target=self._run, name=f"dl2-watch-{name}", daemon=True)

    @property
    def latest(self) -> dict[str, Any] | None:
        """The object as last seen (None: it does not exist)."""
        with self._lock:
            return self._object

    def start(self) -> ObjectWatcher:
        self._thread.start()
        return self

    def wait_synced(self, timeout_s: float) -> bool:
        return self._synced.wait(timeout_s)

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        self._thread.join(5)

    def _set(self, obj: dict[str, Any] | None) -> None:
        with self._lock:
            self._object = obj
        self._synced.set()
        self.changed.set()
        if self.wake is not None:
            self.wake.set()

    def _list(self) -> str:
        from kubernetes.client.exceptions import ApiException

        try:
            listed = self.list_function(
                *self.args, field_selector=f"metadata.name={self.name}", _request_timeout=10, _preload_content=False
            )
        except ApiException as error:
            self.metrics.api_errors.labels(self.operation, str(error.status)).inc()
            raise
        data = json.loads(listed.data)
        items = data.get("items") or []
        self._set(items[0] if items else None)
        return str((data.get("metadata") or {}).get("resourceVersion") or "")

    def _run(self) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        version: str | None = None
        failures = 0
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._list()
                self._watch = watch.Watch()  # type: ignore[no-untyped-call]
                for event in self._watch.stream(
                    self.list_function,
                    *self.args,
                    field_selector=f"metadata.name={self.name}",
                    resource_version=version,
                    timeout_seconds=self.watch_timeout_s,
                    allow_watch_bookmarks=True,
                    deserialize=False,
                ):
                    obj = event.get("object") or {}
                    version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                    if event.get("type") == "DELETED":
                        self._set(None)
                    elif event.get("type") in ("ADDED", "MODIFIED"):
                        self._set(obj)
                    failures = 0
                    if self._stop.is_set():
                        return
                self.restarts += 1
            except ApiException as error:
                self.restarts += 1
                self.metrics.api_errors.labels(f"watch {self.operation}", str(error.status)).inc()
                if error.status == 410:
                    version = None  # compacted: list again
                    continue
                failures += 1
            except Exception as error:  # dropped connections, timeouts, a server going away
                self.restarts += 1
                self.metrics.api_errors.labels(f"watch {self.operation}", type(error).__name__).inc()
                failures += 1
            if failures:
                delay = min(self.max_backoff_s, 0.05 * 2**failures) * (0.5 + self.rng.random() / 2)
                self._stop.wait(delay)
