"""Kubernetes Events (`events.k8s.io/v1`) about what the controller did, on the objects concerned, so that
`kubectl describe` and `kubectl get events` show them: a resize on the job, a promotion, a fallback to the
incumbent, a refused spec and a model that failed to load on the SchedulerPolicy.

Events are sent from a background thread, like client-go's event broadcaster: a slot never waits for them (and,
held while a slot runs, they do not compete with its resizes for the API server), and when the API server is
down they are dropped after a few attempts rather than queued forever (`max_queue`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dl2.kube.rest import EVENTS, Rest

log = logging.getLogger("dl2.serve")
REPORTING_CONTROLLER = "dl2.io/scheduler"
CLUSTER_SCOPED_NAMESPACE = "default"
"""Where events about cluster-scoped objects (the SchedulerPolicy) go, as kube-controller-manager puts them."""


@dataclass(frozen=True, slots=True)
class ObjectRef:
    api_version: str
    kind: str
    name: str
    namespace: str = ""
    uid: str = ""

    @classmethod
    def of(cls, obj: dict[str, Any]) -> ObjectRef:
        metadata = obj.get("metadata") or {}
        return cls(
            str(obj.get("apiVersion", "")),
            str(obj.get("kind", "")),
            str(metadata.get("name", "")),
            str(metadata.get("namespace") or ""),
            str(metadata.get("uid") or ""),
        )

    def to_json(self) -> dict[str, str]:
        ref = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            ref["namespace"] = self.namespace
        if self.uid:
            ref["uid"] = self.uid
        return ref


class EventRecorder:
    def __init__(self, rest: Rest, instance: str, attempts: int = 3, max_queue: int = 1000) -> None:
        """`instance`: this replica (the event's `reportingInstance`)."""
        self.rest = rest
        self.instance = instance
        self.attempts = attempts
        self.sent = 0
        self.dropped = 0
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(max_queue)
        self._thread: threading.Thread | None = None
        self._open = threading.Event()
        self._open.set()

    def hold(self) -> None:
        """Keep queued events until `release()` (the controller holds them while a slot runs)."""
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def start(self) -> EventRecorder:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="dl2-events", daemon=True)
            self._thread.start()
        return self

    def event(self, regarding: ObjectRef, kind: str, reason: str, action: str, note: str) -> None:
        """Queue an event (`kind` Normal or Warning); never blocks."""
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        namespace = regarding.namespace or CLUSTER_SCOPED_NAMESPACE
        body = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            # client-go's naming: the object's name and the time in hex (a generateName may not end in a dot)
            "metadata": {"name": f"{regarding.name}.{time.time_ns():x}", "namespace": namespace},
            "eventTime": now,
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": self.instance[:128],
            "action": action,
            "reason": reason,
            "regarding": regarding.to_json(),
            "note": note[:1024],
            "type": kind,
        }
        self.start()
        try:
            self._queue.put_nowait(body)
        except queue.Full:
            self.dropped += 1

    def flush(self, timeout_s: float = 10.0) -> None:
        """Wait until every queued event has been sent or dropped (tests; a clean shutdown); releases a hold."""
        self.release()
        done = threading.Event()

        def drain() -> None:
            self._queue.join()
            done.set()

        threading.Thread(target=drain, daemon=True).start()
        done.wait(timeout_s)

    def stop(self) -> None:
        if self._thread is not None:
            self.flush()
            self._queue.put(None)
            self._thread.join(5)
            self._thread = None

    def _run(self) -> None:
        while True:
            body = self._queue.get()
            try:
                if body is None:
                    return
                self._open.wait(30.0)  # held at most that long, whatever happens to the slot
                self._send(body)
            finally:
                self._queue.task_done()

    def _send(self, body: dict[str, Any]) -> None:
        namespace = body["metadata"]["namespace"]
        for attempt in range(self.attempts):
            try:
                self.rest.create(EVENTS, namespace, body)
                self.sent += 1
                return
            except Exception as error:  # the API is busy or down: events are best effort
                if attempt == self.attempts - 1:
                    self.dropped += 1
                    log.debug("event dropped: %s: %s", type(error).__name__, error)
                    return
                threading.Event().wait(0.2 * 2**attempt)
