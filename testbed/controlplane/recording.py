"""A request in Kubernetes RBAC terms: what the fault proxy matches faults on, and counts.

(verb, API group, resource, subresource, namespace, name) as RBAC checks them (`get`, `list`, `watch`, `create`,
`update`, `patch`, `delete`, `deletecollection`; `pods/binding`, `schedulerpolicies/status`), with the client's
user agent and the response code. Requests outside the resource API (discovery, `/version`) carry their path as
`non_resource_url`. (What the API server itself judged is in its audit log: `testbed.controlplane.cluster`.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from testbed.controlplane.paths import parse_api_path, rbac_verb


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
    """HTTP status of the response (0 while it is not known yet)."""
    non_resource_url: str = ""

    @property
    def rbac_resource(self) -> str:
        """`resource/subresource` as RBAC rules name it."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    @property
    def resource_key(self) -> str:
        """`pods`, `pytorchjobs.kubeflow.org`: the resource with its group (how `dl2.kube.rest.Resource.key` names
        it)."""
        return f"{self.resource}.{self.api_group}" if self.api_group else self.resource


def request_record(method: str, path: str, query: Mapping[str, str], user_agent: str, code: int = 0) -> RequestRecord:
    """The record of a request: its path and method in RBAC terms."""
    parsed = parse_api_path(path)
    verb = rbac_verb(method, parsed, dict(query))
    if parsed is None or parsed.plural is None:
        return RequestRecord(verb, "", "", "", "", "", user_agent, code, non_resource_url=path)
    return RequestRecord(
        verb,
        parsed.group,
        parsed.plural,
        parsed.subresource or "",
        parsed.namespace or "",
        parsed.name or "",
        user_agent,
        code,
    )
