"""Least privilege, proven by the API server that enforces it: each of dl2's components runs under its own
ServiceAccount bound only to `k8s/rbac.yaml` (and the controller's resize to each managed namespace, as
`install_dl2` binds it), against kube-apiserver with `--authorization-mode=RBAC`, and its audit log shows that no
request was denied and that every (verb, API group, resource[/subresource]) granted was used, within the namespaces
and the resource names the grant names.

One representative run drives every component: the controller leader-elected, watching its policy and the
twin's clock, resizing both job kinds and recording Events; the extender's caches; a promotion through the gate's
handshake. (`tests/kube_fixtures.py` also fails the session if RBAC denied one of them anything in any test.)"""

from __future__ import annotations

import threading

import pytest

from dl2.kube.cache import ClusterCache
from dl2.kube.controller import Controller, ControllerConfig
from dl2.kube.leader import LeaseConfig, LeaseElector
from dl2.kube.metrics import Metrics
from dl2.kube.promotion import promote_policy
from dl2.kube.rest import Rest
from dl2.sim.config import SimConfig
from testbed.controlplane.cluster import AuditEvent
from testbed.controlplane.install import CONTROLLER, EXTENDER, PROMOTER, identity_documents, service_account_user
from testbed.harness import Policies, running_twin
from testbed.twin.lockstep import run_lockstep
from tests.builders import heuristic_loader, tiny_workload

Grants = dict[tuple[str, str, str], tuple[frozenset[str] | None, set[str]]]
BINDINGS = ("ClusterRoleBinding", "RoleBinding")


def granted(subject: str) -> Grants:
    """(group, resource, verb) -> (the namespaces the grant holds in, or None for cluster-wide; resourceNames): every
    rule of the roles bound to ServiceAccount `subject` in dl2-system by what `install_dl2` applies."""
    docs = identity_documents()
    roles = {
        (doc["kind"], doc["metadata"]["name"], doc["metadata"].get("namespace")): doc
        for doc in docs
        if doc["kind"] in ("ClusterRole", "Role")
    }
    grants: Grants = {}
    for binding in docs:
        if binding["kind"] not in BINDINGS or not any(
            s["kind"] == "ServiceAccount" and s["name"] == subject for s in binding["subjects"]
        ):
            continue
        namespace = binding["metadata"].get("namespace")  # None: a ClusterRoleBinding, everywhere
        ref = binding["roleRef"]
        role = roles[(ref["kind"], ref["name"], namespace if ref["kind"] == "Role" else None)]
        where = None if namespace is None else frozenset({namespace})
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        triple = (group, resource, verb)
                        scope, names = where, set(rule.get("resourceNames", []))
                        if triple in grants:  # bound more than once: the union
                            held, held_names = grants[triple]
                            scope = None if held is None or where is None else held | where
                            names |= held_names
                        grants[triple] = (scope, names)
    return grants


def check(events: list[AuditEvent], grants: Grants) -> None:
    denied = [e for e in events if e.code == 403]
    assert not denied, f"denied: {[(e.verb, e.rbac_resource, e.namespace, e.name) for e in denied]}"
    resource_events = [e for e in events if e.resource]
    triples = {e.permission for e in resource_events}
    missing = sorted(triples - set(grants))
    assert not missing, f"used but not granted: {missing}"
    unused = sorted(set(grants) - triples)
    assert not unused, f"granted but never used: {unused}"
    for event in resource_events:
        namespaces, names = grants[event.permission]
        if namespaces is not None:
            assert event.namespace in namespaces, event
        if names and event.verb not in ("list", "watch", "create"):
            assert event.name in names, event


def used(events: list[AuditEvent], account: str) -> list[AuditEvent]:
    return [e for e in events if e.user == service_account_user(account)]


@pytest.fixture(scope="module")
def representative_run(kube_session, tmp_path_factory):
    """Every component once, under its ServiceAccount; the audit events of the run. (Module-scoped, on the
    session's control plane: it cannot use the function-scoped `twin` and `policies` fixtures, so it uses what they
    bind.)"""
    kube, tmp_path = kube_session, tmp_path_factory.mktemp("rbac")
    try:
        return _representative_run(kube, tmp_path)
    finally:
        kube.reset()


def _representative_run(kube, tmp_path):
    offset = kube.plane.audit_offset()
    with running_twin(kube, tiny_workload(num_jobs=8, num_nodes=2), SimConfig.realistic(seed=1)) as cluster:
        Policies(kube).create("active")
        api = kube.controller_api("rbac")
        lease = LeaseConfig(lease_s=2.0, renew_deadline_s=1.5, retry_s=0.1)
        config = ControllerConfig("rbac", decision_log=tmp_path / "decisions", clock="cluster")
        controller = Controller(api, config, heuristic_loader("drf"), elector=LeaseElector(api, "rbac", lease))
        extender = ClusterCache(Rest(kube.extender_api()), Metrics())
        stop = threading.Event()
        thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
        thread.start()
        try:
            extender.start()
            run_lockstep(cluster, slot_timeout_s=30, max_slots=12)
            assert extender.read().jobs
            result = promote_policy(kube.promoter_api(), 2, "active", timeout_s=20, poll_s=0.05)
            assert result.confirmed, result.detail
        finally:
            stop.set()
            thread.join(10)
            extender.stop()
    assert controller.metrics.resizes.labels("PyTorchJob")._value.get() > 0
    assert controller.metrics.resizes.labels("Job")._value.get() > 0
    return kube.plane.audit_events(offset)


def test_the_controller_uses_exactly_what_its_roles_grant(representative_run):
    events = used(representative_run, CONTROLLER)
    check(events, granted(CONTROLLER))
    print(f"{len(events)} controller requests, {len({e.permission for e in events if e.resource})} permissions")


def test_the_extender_and_the_promotion_gate_use_exactly_what_theirs_grant(representative_run):
    for account in (EXTENDER, PROMOTER):
        check(used(representative_run, account), granted(account))


def test_the_check_fails_on_a_denial_a_permission_not_granted_or_one_granted_in_vain():
    def event(verb: str, resource: str, code: int = 200, namespace: str = "") -> AuditEvent:
        return AuditEvent("u", verb, "", resource, "", namespace, "", code, "dl2-serve", "/", "")

    grants: Grants = {("", "pods", "list"): (None, set()), ("", "nodes", "list"): (None, set())}
    check([event("list", "pods"), event("list", "nodes")], grants)
    with pytest.raises(AssertionError, match=r"granted but never used: \[\('', 'nodes', 'list'\)\]"):
        check([event("list", "pods")], grants)
    with pytest.raises(AssertionError, match="used but not granted"):
        check([event("list", "pods"), event("list", "nodes"), event("get", "secrets", namespace="dl2-system")], grants)
    with pytest.raises(AssertionError, match="denied"):
        check([event("list", "pods"), event("list", "nodes"), event("delete", "pods", 403)], grants)
