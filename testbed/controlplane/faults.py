"""Injectable faults: errors, slow responses, dropped and expired watches, per (verb, resource) or for every
request, for the fault proxy in front of the real API server (`testbed.controlplane.proxy`).

A `Fault` matches requests by RBAC verb, resource (`pods`, `schedulerpolicies/status`), group, namespace and a
substring of the user agent (any field left out matches everything), and fires for the next `count` matching
requests (None: until removed) with a `probability` drawn from the injector's seeded generator:

- `error`: answer `code` with a `Status` body instead of forwarding (409 Conflict, 429 TooManyRequests with
  `Retry-After`, 500 InternalError, 503, 504 ...), after `delay_s`; nothing reaches the server;
- `delay`: forward after `delay_s` seconds (a slow API server; with a client timeout, a timeout);
- `drop-watch`: forward a watch, then end it after `delay_s` seconds, as a restarting API server does (`abrupt`:
  cut the connection mid-stream instead, as a crashed server or a broken network does);
- `expire-watch`: answer a watch as a server answers one from a compacted resourceVersion, after `delay_s`: a 200
  stream with one ERROR event, `410 Expired`, so that the client must list again.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from enum import StrEnum

from testbed.controlplane.errors import ApiError
from testbed.controlplane.recording import RequestRecord

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
"""The `reason` a Kubernetes API server gives with each code (`metav1.StatusReason`)."""
VERBS = frozenset(
    {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "post", "put", "head"}
)
"""RBAC's resource verbs, and the lower-case methods of non-resource requests (`/version`, discovery)."""


class FaultKind(StrEnum):
    ERROR = "error"
    DELAY = "delay"
    DROP_WATCH = "drop-watch"
    EXPIRE_WATCH = "expire-watch"


WATCH_KINDS = frozenset({FaultKind.DROP_WATCH, FaultKind.EXPIRE_WATCH})
"""Kinds that only make sense for a watch: they match no other request."""


@dataclass(frozen=True, slots=True)
class Fault:
    kind: FaultKind
    """What the fault does (a `FaultKind` or its value, "error", "delay", ...)."""
    code: int = 500
    """HTTP status of an `error` fault."""
    verb: str | None = None
    """RBAC verb (get, list, watch, create, update, patch, delete, deletecollection); None: any."""
    resource: str | None = None
    """`plural` or `plural/subresource`; None: any request, discovery included."""
    group: str | None = None
    """API group ("" for the core group); None: any."""
    namespace: str | None = None
    """The namespace in the path ("" for cluster-scoped requests and lists across namespaces); None: any."""
    user_agent: str | None = None
    """Only requests whose User-Agent contains this."""
    count: int | None = None
    """Fire for the next `count` matching requests; None: every matching request until removed."""
    probability: float = 1.0
    """Chance that a matching request fires it (a draw that misses leaves `count` as it was)."""
    delay_s: float = 0.0
    """`drop-watch`: how long the watch stays open; any other kind: how long to wait before acting."""
    retry_after_s: int = 1
    """`Retry-After` of a 429."""
    abrupt: bool = False
    """`drop-watch`: cut the connection without ending the chunked stream (the client sees a broken response)."""

    def __post_init__(self) -> None:
        try:
            # a plain string is accepted: frozen, so the normalised kind is set the dataclass way
            object.__setattr__(self, "kind", FaultKind(self.kind))
        except ValueError:
            known = ", ".join(kind.value for kind in FaultKind)
            raise ValueError(f"unknown fault kind {self.kind!r}; known: {known}") from None
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"probability must be in [0, 1], got {self.probability}")
        if self.count is not None and self.count < 1:
            raise ValueError(f"count must be at least 1 (or absent for every request), got {self.count}")
        if not (math.isfinite(self.delay_s) and self.delay_s >= 0):
            raise ValueError(f"delay_s must be a non-negative number of seconds, got {self.delay_s}")
        if self.retry_after_s < 0:
            raise ValueError(f"retry_after_s must not be negative, got {self.retry_after_s}")
        if self.kind is FaultKind.ERROR and not 400 <= self.code <= 599:
            raise ValueError(f"an error fault needs a 4xx or 5xx code, got {self.code}")
        if self.verb is not None and self.verb not in VERBS:
            raise ValueError(f"unknown verb {self.verb!r}; known: {', '.join(sorted(VERBS))}")
        if self.kind in WATCH_KINDS and self.verb not in (None, "watch"):
            raise ValueError(f"a {self.kind.value} fault applies to watches only, not to {self.verb!r}")
        if self.abrupt and self.kind is not FaultKind.DROP_WATCH:
            raise ValueError("only a drop-watch fault can be abrupt")

    def matches(self, record: RequestRecord) -> bool:
        if self.kind in WATCH_KINDS and record.verb != "watch":
            return False
        return (
            (self.verb is None or self.verb == record.verb)
            and (self.resource is None or self.resource == record.rbac_resource)
            and (self.group is None or self.group == record.api_group)
            and (self.namespace is None or self.namespace == record.namespace)
            and (self.user_agent is None or self.user_agent in record.user_agent)
        )


@dataclass(frozen=True, slots=True)
class Decision:
    """What the faults do to one request."""

    delay_s: float = 0.0
    """Wait this long first."""
    error: ApiError | None = None
    """Then answer this instead of forwarding."""
    drop_after_s: float | None = None
    """Forward, and end the watch after this long."""
    abrupt: bool = False
    """End it by cutting the connection."""
    expire: bool = False
    """Answer the watch with a 410 Expired event instead of forwarding."""


NO_FAULT = Decision()


@dataclass(frozen=True, slots=True)
class ActiveFault:
    fault_id: int
    fault: Fault
    remaining: int | None
    """How many more times it fires; None: until removed."""


class FaultInjector:
    """The active faults, in the order they were added; one seeded generator draws every probability, so the
    same requests in the same order meet the same faults."""

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)
        self._faults: dict[int, ActiveFault] = {}
        self._next_id = 1

    def add(self, fault: Fault) -> int:
        fault_id = self._next_id
        self._next_id += 1
        self._faults[fault_id] = ActiveFault(fault_id, fault, fault.count)
        return fault_id

    def remove(self, fault_id: int) -> bool:
        return self._faults.pop(fault_id, None) is not None

    def clear(self) -> None:
        self._faults.clear()

    def active(self) -> list[ActiveFault]:
        return list(self._faults.values())

    def decide(self, record: RequestRecord) -> Decision:
        """Delays add up; the first error (or expiry) that fires answers the request; a dropped watch ends at the
        earliest time asked."""
        if not self._faults:
            return NO_FAULT
        delay, error, drop, abrupt, expire = 0.0, None, None, False, False
        for entry in list(self._faults.values()):
            fault = entry.fault
            if not fault.matches(record):
                continue
            answers = fault.kind in (FaultKind.ERROR, FaultKind.EXPIRE_WATCH)
            if answers and (error is not None or expire):
                continue  # the request is answered already: a second answer would use up a count in vain
            if fault.probability < 1.0 and self._rng.random() >= fault.probability:
                continue
            if entry.remaining is not None:
                if entry.remaining <= 1:
                    del self._faults[entry.fault_id]
                else:
                    self._faults[entry.fault_id] = ActiveFault(entry.fault_id, fault, entry.remaining - 1)
            if fault.kind is FaultKind.DROP_WATCH:
                if drop is None or fault.delay_s < drop:
                    drop, abrupt = fault.delay_s, fault.abrupt
                continue
            delay += fault.delay_s
            if fault.kind is FaultKind.ERROR:
                error = injected_error(fault)
            elif fault.kind is FaultKind.EXPIRE_WATCH:
                expire = True
        return Decision(delay, error, drop, abrupt, expire)


def injected_error(fault: Fault) -> ApiError:
    """The error an `error` fault answers, with the reason a real server gives for its code."""
    reason = REASONS.get(fault.code, "InternalError" if fault.code >= 500 else "BadRequest")
    message = f"injected fault: {fault.code} {reason}"
    if fault.code == 429:
        return ApiError(
            429,
            reason,
            f"{message}; retry after {fault.retry_after_s}s",
            {"retryAfterSeconds": fault.retry_after_s},
            {"Retry-After": str(fault.retry_after_s)},
        )
    return ApiError(fault.code, reason, message, {"causes": [{"reason": "InjectedFault", "message": message}]})
