"""Request paths in Kubernetes RBAC terms (what the fault proxy matches faults on)."""

from __future__ import annotations

import pytest

from testbed.controlplane.paths import ApiPath, parse_api_path, rbac_verb

# -- paths -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "parsed"),
    [
        ("/api/v1/namespaces", ApiPath("", "v1", "namespaces")),
        ("/api/v1/namespaces/team-a", ApiPath("", "v1", "namespaces", None, "team-a")),
        ("/api/v1/namespaces/team-a/status", ApiPath("", "v1", "namespaces", None, "team-a", "status")),
        ("/api/v1/namespaces/team-a/pods", ApiPath("", "v1", "pods", "team-a")),
        ("/api/v1/namespaces/team-a/pods/p/binding", ApiPath("", "v1", "pods", "team-a", "p", "binding")),
        ("/api/v1/nodes/n1", ApiPath("", "v1", "nodes", None, "n1")),
        (
            "/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs/j/scale",
            ApiPath("kubeflow.org", "v1", "pytorchjobs", "ns", "j", "scale"),
        ),
        ("/apis/kubeflow.org/v1/pytorchjobs", ApiPath("kubeflow.org", "v1", "pytorchjobs")),
        ("/apis/kubeflow.org/v1", ApiPath("kubeflow.org", "v1")),
        ("/apis/kubeflow.org", None),
        ("/version", None),
    ],
)
def test_api_paths(path, parsed):
    assert parse_api_path(path) == parsed


def test_rbac_verbs():
    pods = ApiPath("", "v1", "pods", "ns")
    pod = ApiPath("", "v1", "pods", "ns", "p")
    assert [rbac_verb("GET", pods, {}), rbac_verb("GET", pods, {"watch": "true"}), rbac_verb("GET", pod, {})] == [
        "list",
        "watch",
        "get",
    ]
    assert [rbac_verb(m, pod, {}) for m in ("PUT", "PATCH", "DELETE")] == ["update", "patch", "delete"]
    assert [rbac_verb("POST", pods, {}), rbac_verb("DELETE", pods, {}), rbac_verb("GET", None, {})] == [
        "create",
        "deletecollection",
        "get",
    ]


def test_an_audit_offset_never_falls_inside_a_line(tmp_path):
    """The API server may be part-way through a line: an offset must end at the last whole one, or the next read
    starts with half an event."""
    from testbed.controlplane.cluster import last_line_end, read_audit_log

    log = tmp_path / "audit.log"
    assert last_line_end(log) == 0
    whole = b'{"stage": "ResponseComplete", "auditID": "a"}\n' * 3
    log.write_bytes(whole + b'{"stage": "Respo')
    assert last_line_end(log) == len(whole)
    assert last_line_end(log, chunk=7) == len(whole)  # found across chunks too
    log.write_bytes(b"no newline yet")
    assert last_line_end(log) == 0
    log.write_bytes(whole + b'{"stage": "Respo')
    events, offset = read_audit_log(log, last_line_end(log))
    assert events == [] and offset == len(whole)
