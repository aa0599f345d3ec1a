"""Request paths and methods in Kubernetes terms: which resource, namespace, name and subresource, and the RBAC verb
(what the fault proxy matches faults on: `testbed.controlplane.faults`).

The API server's own rules: `/api/v1/namespaces/{name}` is the Namespace object itself (its `status` and
`finalize` are subresources of it), `/api/v1/namespaces/{ns}/{plural}/...` is a namespaced resource; a GET is
`get` with a name, `list` without, `watch` with `?watch=true`.
"""

from __future__ import annotations

from dataclasses import dataclass

NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
"""Subresources of the Namespace kind itself (`/api/v1/namespaces/{name}/status`)."""


@dataclass(frozen=True, slots=True)
class ApiPath:
    """A path under `/api/v1` or `/apis/{group}/{version}`; `plural` is None for the group-version root."""

    group: str
    """API group, "" for the core group."""
    version: str
    plural: str | None = None
    namespace: str | None = None
    """The namespace in the path (None for cluster-scoped requests and for lists across all namespaces)."""
    name: str | None = None
    subresource: str | None = None


def parse_api_path(path: str) -> ApiPath | None:
    """The resource a path addresses, or None for paths outside the resource API (discovery roots, /version)."""
    parts = [part for part in path.split("/") if part]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if not rest:
        return ApiPath(group, version)
    if rest[0] == "namespaces" and len(rest) >= 3 and not (len(rest) == 3 and rest[2] in NAMESPACE_SUBRESOURCES):
        namespace, rest = rest[1], rest[2:]
    else:
        namespace = None
    if len(rest) > 3:
        return None
    plural = rest[0]
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else None
    return ApiPath(group, version, plural, namespace, name, subresource)


def is_watch(params: dict[str, str]) -> bool:
    return params.get("watch", "").lower() in ("true", "1")


def rbac_verb(method: str, path: ApiPath | None, params: dict[str, str]) -> str:
    """The verb RBAC checks for this request (non-resource requests: the lower-case HTTP method)."""
    method = method.upper()
    if path is None or path.plural is None:
        return method.lower()
    if method == "GET":
        if is_watch(params):
            return "watch"
        return "get" if path.name is not None else "list"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if path.name is not None else "deletecollection"
    return method.lower()
