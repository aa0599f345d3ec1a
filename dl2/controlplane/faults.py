"""Injectable faults: errors, slow responses and dropped watches, per (verb, resource) or for every request.

A `Fault` matches requests by RBAC verb, resource (`pods`, `pytorchjobs/scale`), group, namespace and a substring
of the user agent (any field left out matches everything), and fires for the next `count` matching requests
(None: until removed) with a `probability` drawn from the injector's seeded generator:

- `error`: answer `code` instead of serving (409 Conflict, 429 TooManyRequests with `Retry-After`, 500
  InternalError, 503, 504 ...); nothing is written;
- `delay`: serve after `delay_s` seconds (a slow API server; with a client timeout, a timeout);
- `drop-watch`: accept a watch, then close it after `delay_s` seconds, as a restarting API server or a proxy
  does. `FaultInjector` users can also drop every open watch at once (`LocalApiServer.drop_watches`).

Faults are set from Python (`LocalApiServer.faults`) or on a running server through the admin endpoint
`/dl2/faults` (see `dl2.kube.apiserver.admin`).
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, fields
from enum import StrEnum
from typing import Any

from dl2.controlplane.errors import ApiError
from dl2.controlplane.recording import RequestRecord

REASONS = {
    409: "Conflict",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class FaultKind(StrEnum):
    ERROR = "error"
    DELAY = "delay"
    DROP_WATCH = "drop-watch"


@dataclass(frozen=True, slots=True)
class Fault:
    kind: FaultKind
    code: int = 500
    """HTTP status of an `error` fault."""
    verb: str | None = None
    """RBAC verb (get, list, watch, create, update, patch, delete, deletecollection); None: any."""
    resource: str | None = None
    """`plural` or `plural/subresource`; None: any request, discovery included."""
    group: str | None = None
    namespace: str | None = None
    user_agent: str | None = None
    """Only requests whose User-Agent contains this."""
    count: int | None = None
    """Fire for the next `count` matching requests; None: every matching request until removed."""
    probability: float = 1.0
    delay_s: float = 0.0
    """`delay`: how long to wait; `drop-watch`: how long the watch stays open."""
    retry_after_s: int = 1
    """`Retry-After` of a 429."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"probability must be in [0, 1], got {self.probability}")
        if self.count is not None and self.count < 1:
            raise ValueError(f"count must be at least 1 (or absent for every request), got {self.count}")
        if not (math.isfinite(self.delay_s) and self.delay_s >= 0):
            raise ValueError(f"delay_s must be a non-negative number of seconds, got {self.delay_s}")
        if self.kind is FaultKind.ERROR and not 400 <= self.code <= 599:
            raise ValueError(f"an error fault needs a 4xx or 5xx code, got {self.code}")
        if self.kind is FaultKind.DROP_WATCH and self.verb not in (None, "watch"):
            raise ValueError("a drop-watch fault applies to watches only")

    def matches(self, record: RequestRecord) -> bool:
        if self.kind is FaultKind.DROP_WATCH and record.verb != "watch":
            return False
        return (
            (self.verb is None or self.verb == record.verb)
            and (self.resource is None or self.resource == record.rbac_resource)
            and (self.group is None or self.group == record.api_group)
            and (self.namespace is None or self.namespace == record.namespace)
            and (self.user_agent is None or self.user_agent in record.user_agent)
        )

    def to_json_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json_dict(cls, data: Any) -> Fault:
        """A fault from JSON (the admin endpoint); ValueError names what is wrong."""
        if not isinstance(data, dict):
            raise ValueError("a fault must be a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown fault field(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        if "kind" not in data:
            raise ValueError("a fault needs 'kind' (error, delay or drop-watch)")
        try:
            kind = FaultKind(data["kind"])
        except ValueError:
            raise ValueError(f"unknown fault kind {data['kind']!r}; known: error, delay, drop-watch") from None
        return cls(**{**data, "kind": kind})


@dataclass(frozen=True, slots=True)
class Decision:
    """What the faults do to one request."""

    delay_s: float = 0.0
    error: ApiError | None = None
    drop_after_s: float | None = None


NO_FAULT = Decision()


class FaultInjector:
    """The active faults, in the order they were added; one seeded generator draws every probability."""

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)
        self._faults: dict[int, list[Any]] = {}  # id -> [fault, remaining count or None]
        self._next_id = 1

    def add(self, fault: Fault) -> int:
        fault_id = self._next_id
        self._next_id += 1
        self._faults[fault_id] = [fault, fault.count]
        return fault_id

    def remove(self, fault_id: int) -> bool:
        return self._faults.pop(fault_id, None) is not None

    def clear(self) -> None:
        self._faults.clear()

    def active(self) -> list[dict[str, Any]]:
        return [
            {"id": fault_id, "fault": fault.to_json_dict(), "remaining": remaining}
            for fault_id, (fault, remaining) in self._faults.items()
        ]

    def decide(self, record: RequestRecord) -> Decision:
        """Delays add up; the first error that fires answers the request; a dropped watch closes at the earliest."""
        if not self._faults:
            return NO_FAULT
        delay, error, drop = 0.0, None, None
        for fault_id, entry in list(self._faults.items()):
            fault, remaining = entry
            if not fault.matches(record):
                continue
            if fault.kind is FaultKind.ERROR and error is not None:
                continue
            if fault.probability < 1.0 and self._rng.random() >= fault.probability:
                continue
            if remaining is not None:
                entry[1] = remaining - 1
                if entry[1] <= 0:
                    del self._faults[fault_id]
            if fault.kind is FaultKind.DELAY:
                delay += fault.delay_s
            elif fault.kind is FaultKind.DROP_WATCH:
                drop = fault.delay_s if drop is None else min(drop, fault.delay_s)
            else:
                error = _error(fault)
        return Decision(delay, error, drop)


def _error(fault: Fault) -> ApiError:
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
