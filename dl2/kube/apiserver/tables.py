"""Server-side printing: the `meta.k8s.io/v1 Table` that `kubectl get` asks for (`Accept: ...;as=Table`).

Custom resources get a Name column plus their CRD's `additionalPrinterColumns` (JSONPath subset: fields,
`[n]`, `[-1:]`; `date` columns printed as ages, as the apiextensions server does); the core kinds get the
columns kubectl users know (pods: Ready, Status, Restarts, Age, Node).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable
from typing import Any

from dl2.kube.apiserver.resources import PrinterColumn, ResourceType

Row = Callable[[dict[str, Any]], list[Any]]


def wants_table(accept: str) -> bool:
    return "as=Table" in accept


def human_age(timestamp: Any, now: datetime.datetime | None = None) -> str:
    """Kubernetes' `duration.HumanDuration` of the time since `timestamp` ('<unknown>' if unreadable)."""
    try:
        then = datetime.datetime.fromisoformat(str(timestamp).replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    now = now or datetime.datetime.now(tz=datetime.UTC)
    seconds = int((now - then).total_seconds())
    if seconds < 0:
        return "<invalid>"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 730:
        return f"{days}d"
    return f"{days // 365}y{days % 365}d"


_TOKEN = re.compile(r"\.([A-Za-z0-9_-]+)|\[(-?\d+)(:?)\]")


def json_path(obj: Any, path: str) -> Any:
    """The value at a simple JSONPath (`.status.conditions[-1:].type`), or None."""
    current = obj
    position = 0
    for match in _TOKEN.finditer(path):
        if match.start() != position:
            return None
        position = match.end()
        field, index, _ = match.groups()
        if field is not None:
            if not isinstance(current, dict) or field not in current:
                return None
            current = current[field]
        else:
            if not isinstance(current, list) or not current:
                return None
            i = int(index)
            if not -len(current) <= i < len(current):
                return None
            current = current[i]
    if position != len(path):
        return None
    return current


def _metadata(raw: dict[str, Any]) -> dict[str, Any]:
    metadata: dict[str, Any] = raw.get("metadata") or {}
    return metadata


def _age(raw: dict[str, Any]) -> str:
    return human_age(_metadata(raw).get("creationTimestamp"))


def _pod_row(raw: dict[str, Any]) -> list[Any]:
    containers = (raw.get("spec") or {}).get("containers") or []
    statuses = (raw.get("status") or {}).get("containerStatuses") or []
    ready = sum(1 for status in statuses if status.get("ready"))
    restarts = sum(int(status.get("restartCount") or 0) for status in statuses)
    phase = (raw.get("status") or {}).get("phase") or "Pending"
    node = (raw.get("spec") or {}).get("nodeName") or "<none>"
    return [_metadata(raw).get("name"), f"{ready}/{len(containers)}", phase, restarts, _age(raw), node]


def _node_row(raw: dict[str, Any]) -> list[Any]:
    conditions = (raw.get("status") or {}).get("conditions") or []
    ready = next((c.get("status") for c in conditions if c.get("type") == "Ready"), "Unknown")
    version = ((raw.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion") or ""
    return [_metadata(raw).get("name"), "Ready" if ready == "True" else "NotReady", "<none>", _age(raw), version]


def _event_row(raw: dict[str, Any]) -> list[Any]:
    involved = raw.get("involvedObject") or {}
    target = f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}"
    seen = raw.get("lastTimestamp") or raw.get("eventTime") or _metadata(raw).get("creationTimestamp")
    return [human_age(seen), raw.get("type") or "", raw.get("reason") or "", target, raw.get("message") or ""]


_CORE_COLUMNS: dict[str, tuple[tuple[tuple[str, str, int], ...], Row]] = {
    "pods": (
        (
            ("Name", "string", 0),
            ("Ready", "string", 0),
            ("Status", "string", 0),
            ("Restarts", "integer", 0),
            ("Age", "string", 0),
            ("Node", "string", 1),
        ),
        _pod_row,
    ),
    "nodes": (
        (
            ("Name", "string", 0),
            ("Status", "string", 0),
            ("Roles", "string", 0),
            ("Age", "string", 0),
            ("Version", "string", 0),
        ),
        _node_row,
    ),
    "namespaces": (
        (("Name", "string", 0), ("Status", "string", 0), ("Age", "string", 0)),
        lambda raw: [_metadata(raw).get("name"), (raw.get("status") or {}).get("phase") or "Active", _age(raw)],
    ),
    "configmaps": (
        (("Name", "string", 0), ("Data", "integer", 0), ("Age", "string", 0)),
        lambda raw: [_metadata(raw).get("name"), len(raw.get("data") or {}), _age(raw)],
    ),
    "leases": (
        (("Name", "string", 0), ("Holder", "string", 0), ("Age", "string", 0)),
        lambda raw: [_metadata(raw).get("name"), (raw.get("spec") or {}).get("holderIdentity") or "", _age(raw)],
    ),
    "events": (
        (
            ("Last Seen", "string", 0),
            ("Type", "string", 0),
            ("Reason", "string", 0),
            ("Object", "string", 0),
            ("Message", "string", 0),
        ),
        _event_row,
    ),
}


def _custom_cell(raw: dict[str, Any], column: PrinterColumn) -> Any:
    value = json_path(raw, column.json_path)
    if value is None:
        return None
    if column.type == "date":
        return human_age(value)
    return value


def table_of(rt: ResourceType, items: list[dict[str, Any]], resource_version: str) -> dict[str, Any]:
    if not rt.custom and rt.plural in _CORE_COLUMNS:
        names, row = _CORE_COLUMNS[rt.plural]
        columns = [
            {"name": n, "type": t, "format": "name" if n == "Name" else "", "description": n, "priority": p}
            for n, t, p in names
        ]
        rows = [row(raw) for raw in items]
    else:
        printer = rt.printer_columns or (PrinterColumn("Age", ".metadata.creationTimestamp", "date"),)
        columns = [{"name": "Name", "type": "string", "format": "name", "description": "Name", "priority": 0}]
        columns += [
            {
                "name": c.name,
                "type": "string" if c.type == "date" else c.type,
                "format": "",
                "description": c.name,
                "priority": c.priority,
            }
            for c in printer
        ]
        rows = [[_metadata(raw).get("name"), *(_custom_cell(raw, c) for c in printer)] for raw in items]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": columns,
        "rows": [
            {
                "cells": cells,
                "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": _metadata(raw)},
            }
            for cells, raw in zip(rows, items, strict=True)
        ],
    }
