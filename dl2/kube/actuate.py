"""Writing to the cluster: resizes and the SchedulerPolicy status, each request retried with backoff.

`ApiCaller` retries what a busy or restarting API server answers (409 on a patch without a precondition, 429,
5xx, timeouts, refused connections) with exponential backoff and seeded jitter, counting each failure in the
metrics; what a retry cannot fix (400, 403, 404, 422) is raised at once. Every write is idempotent (a merge
patch to an absolute size, a status patch), so repeating one that did reach the server changes nothing.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from dl2.kube import contract as c
from dl2.kube.metrics import Metrics
from dl2.kube.observe import RESIZED_SLOT, ManagedJob
from dl2.kube.policy import POLICIES
from dl2.kube.rest import MERGE_PATCH, PYTORCHJOBS, VOLCANO_JOBS, Rest

T = TypeVar("T")
RETRIED = frozenset({409, 429, 500, 502, 503, 504})


class ApiUnavailable(RuntimeError):
    """A request still failed after every retry."""


class ResizeRefused(RuntimeError):
    """The API server refused a resize (403): RBAC, where the resize is not bound in the job's namespace, or the
    admission policy (`k8s/admission.yaml`). Only that job keeps its size; the message is the server's."""


class ApiCaller:
    def __init__(
        self,
        metrics: Metrics,
        attempts: int = 6,
        base_s: float = 0.05,
        max_s: float = 2.0,
        seed: int = 0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.metrics = metrics
        self.attempts = attempts
        self.base_s = base_s
        self.max_s = max_s
        self.rng = random.Random(seed)
        self.sleep = sleep
        self.calls = 0
        """Requests sent (retries included)."""
        self._lock = threading.Lock()

    def __call__(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`function(*args, **kwargs)`, retried; `_operation=` names it in the metrics (default: its name)."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        operation = str(kwargs.pop("_operation", None) or getattr(function, "__name__", "request"))
        for attempt in range(self.attempts):
            with self._lock:
                self.calls += 1
            try:
                return function(*args, **kwargs)
            except ApiException as error:
                self.metrics.api_errors.labels(operation, str(error.status)).inc()
                if error.status not in RETRIED or attempt == self.attempts - 1:
                    raise
                delay = _retry_after(error)
            except (HTTPError, OSError) as error:  # timeouts, refused or reset connections
                self.metrics.api_errors.labels(operation, type(error).__name__).inc()
                if attempt == self.attempts - 1:
                    raise ApiUnavailable(f"{operation}: {error}") from error
                delay = None
            backoff = min(self.max_s, self.base_s * 2**attempt)
            with self._lock:
                jitter = 0.5 + self.rng.random() / 2
            self.sleep(delay if delay is not None else backoff * jitter)
        raise AssertionError("unreachable")


def _message(error: Any) -> str:
    """The message of the API server's Status in an error's body, or the error itself."""
    try:
        return str(json.loads(error.body)["message"])
    except (TypeError, ValueError, KeyError):
        return str(error)


def _retry_after(error: Any) -> float | None:
    headers = getattr(error, "headers", None) or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return min(float(value), 10.0) if value is not None else None
    except ValueError:
        return None


class Actuator:
    """Resizes jobs (following the job contract) and patches the SchedulerPolicy's status."""

    def __init__(self, rest: Rest, call: ApiCaller) -> None:
        self.rest = rest
        self.call = call

    def resize(self, job: ManagedJob, workers: int, ps: int, slot: int) -> None:
        """Set a job's size and stamp the slot on it (its cooldown counts from there), in one request: a merge
        patch of a PyTorchJob, a JSON patch of a Volcano Job (the size and the stamp land together or not at all).
        `ResizeRefused` when the API server forbids it."""
        from kubernetes.client.exceptions import ApiException

        try:
            self._resize(job, workers, ps, slot)
        except ApiException as error:
            if error.status != 403:
                raise
            raise ResizeRefused(f"{job.key}: {_message(error)}") from error

    def _resize(self, job: ManagedJob, workers: int, ps: int, slot: int) -> None:
        resource = PYTORCHJOBS if c.kind_of(job.obj) == c.PYTORCHJOB else VOLCANO_JOBS
        _, content_type, body = c.resize(job.obj, workers, ps)
        stamp = str(slot)
        if resource is PYTORCHJOBS:
            body = {**body, "metadata": {"annotations": {RESIZED_SLOT: stamp}}}
            self.call(
                self.rest.patch, resource, job.namespace, job.name, body, content_type, _operation="patch pytorchjobs"
            )
            return
        path = "/metadata/annotations/" + RESIZED_SLOT.replace("~", "~0").replace("/", "~1")
        operations = [*body, {"op": "add", "path": path, "value": stamp}]
        self.call(self.rest.patch, resource, job.namespace, job.name, operations, content_type, _operation="patch jobs")

    def patch_status(self, name: str, status: dict[str, Any]) -> None:
        self.call(
            self.rest.patch, POLICIES, None, name, {"status": status}, MERGE_PATCH, "status",
            _operation="patch schedulerpolicies/status",
        )  # fmt: skip
