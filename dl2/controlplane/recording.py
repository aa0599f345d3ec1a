"""Every request the server answers, in Kubernetes RBAC terms: what a least-privilege ClusterRole must grant.

A record is (verb, API group, resource, subresource, namespace, name) as RBAC checks them (`get`, `list`, `watch`,
`create`, `update`, `patch`, `delete`, `deletecollection`; `pods/binding`, `pytorchjobs/scale`,
`schedulerpolicies/status`), with the client's user agent and the response code. Requests outside the resource
API (discovery, `/version`) carry their path as `non_resource_url`. With a JSONL path, every record is also
appended to that file as one line, so the requests of a whole test suite (several servers, several processes)
can be collected and checked against the shipped ClusterRole.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from dl2.core import InputError


@dataclass(frozen=True, slots=True)
class RequestRecord:
    verb: str
    api_group: str
    resource: str
    """Plural resource name; "" for a non-resource request."""
    subresource: str
    namespace: str
    """The namespace in the path; "" for cluster-scoped requests and lists across namespaces."""
    name: str
    user_agent: str
    code: int
    """HTTP status of the response (200 for a watch that was opened)."""
    non_resource_url: str = ""

    @property
    def rbac_resource(self) -> str:
        """`resource/subresource` as RBAC rules name it."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    @property
    def permission(self) -> tuple[str, str, str]:
        """(api group, resource[/subresource], verb): one entry of what a Role must grant."""
        return self.api_group, self.rbac_resource, self.verb

    def to_json_dict(self) -> dict[str, Any]:
        return asdict(self)


class RequestRecorder:
    """Keeps the latest records in memory (`keep` of them: a long-running server stays bounded) and, optionally,
    appends every one to a JSONL file."""

    def __init__(self, jsonl_path: Path | None = None, keep: int = 200_000) -> None:
        self.records: list[RequestRecord] = []
        self.keep = keep
        self.jsonl_path = jsonl_path
        self._fd: int | None = None
        if jsonl_path is not None:
            jsonl_path.parent.mkdir(parents=True, exist_ok=True)
            # O_APPEND: each record is one write, so lines from several servers and processes never interleave
            self._fd = os.open(jsonl_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def add(self, record: RequestRecord) -> None:
        self.records.append(record)
        if len(self.records) > 2 * self.keep:
            del self.records[: -self.keep]
        if self._fd is not None:
            os.write(self._fd, (json.dumps(record.to_json_dict(), sort_keys=True) + "\n").encode("utf-8"))

    def clear(self) -> None:
        self.records.clear()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def permissions(records: list[RequestRecord], user_agent: str | None = None) -> set[tuple[str, str, str]]:
    """The (group, resource[/subresource], verb) triples used by resource requests (of one client, if named by a
    substring of its user agent)."""
    return {
        record.permission
        for record in records
        if record.resource and (user_agent is None or user_agent in record.user_agent)
    }


def load_records(path: Path) -> list[RequestRecord]:
    """Records from a JSONL file written by `RequestRecorder` (a missing file has none)."""
    if not path.exists():
        return []
    names = {f.name for f in fields(RequestRecord)}
    records = []
    for row, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            records.append(RequestRecord(**{key: value for key, value in data.items() if key in names}))
        except (ValueError, TypeError) as error:
            raise InputError(str(path), f"not a request record ({error})", row=row) from None
    return records
