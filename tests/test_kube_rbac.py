"""Least privilege, proven: every (verb, API group, resource[/subresource]) the controller used in this session's
tests (the local servers record each request, `tests/conftest.py` collects them in one JSONL) is granted by the
shipped ClusterRole and Role, and every one they grant was used. Likewise for the promotion gate's role.

The test runs last (`after_kube`) and first drives one representative run itself (a leader-elected controller
watching its policy and the simulated clock, both job kinds resized, a promotion), so that it proves the same
on its own as after the whole suite."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import yaml

from dl2.kube.apiserver import load_records
from dl2.twin import simulate_cluster
from dl2.kube.controller import Controller, ControllerConfig
from dl2.kube.leader import LeaseConfig, LeaseElector
from dl2.twin.lockstep import run_lockstep
from dl2.kube.promotion import promote_policy
from dl2.sim.config import SimConfig
from tests.kube_helpers import (
    CONTROLLER_AGENT,
    POLICIES,
    REQUEST_LOG_ENV,
    api_client,
    controller_api,
    heuristic_loader,
    kube_server,
    policy_object,
)
from tests.test_kube_simcluster import tiny_workload

K8S = Path(__file__).resolve().parent.parent / "k8s"
PROMOTER_AGENT = "dl2-promoter"


def granted(role_name: str, kinds: tuple[str, ...]) -> dict[tuple[str, str, str], tuple[str | None, set[str]]]:
    """(group, resource, verb) -> (namespace the grant holds in, or None for cluster-wide; resourceNames)."""
    grants: dict[tuple[str, str, str], tuple[str | None, set[str]]] = {}
    for doc in yaml.safe_load_all((K8S / "rbac.yaml").read_text()):
        if doc["kind"] not in kinds or doc["metadata"]["name"] != role_name:
            continue
        namespace = doc["metadata"].get("namespace") if doc["kind"] == "Role" else None
        for rule in doc["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        grants[(group, resource, verb)] = (namespace, set(rule.get("resourceNames", [])))
    return grants


def representative_run(tmp_path: Path) -> None:
    with kube_server() as server:
        cluster = simulate_cluster(server, tiny_workload(num_jobs=8, num_nodes=2), SimConfig.realistic(seed=1))
        server.create(POLICIES, None, policy_object("active"))
        api = controller_api(server, "rbac")
        lease = LeaseConfig(lease_s=2.0, renew_deadline_s=1.5, retry_s=0.1)
        config = ControllerConfig("rbac", decision_log=tmp_path / "decisions", clock="cluster")
        controller = Controller(api, config, heuristic_loader("drf"), elector=LeaseElector(api, "rbac", lease))
        stop = threading.Event()
        thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
        thread.start()
        try:
            run_lockstep(server, cluster, slot_timeout_s=30, max_slots=12)
            result = promote_policy(api_client(server, PROMOTER_AGENT), 2, "active", timeout_s=20, poll_s=0.05)
            assert result.confirmed, result.detail
        finally:
            stop.set()
            thread.join(10)
    assert controller.metrics.resizes.labels("PyTorchJob")._value.get() > 0
    assert controller.metrics.resizes.labels("Job")._value.get() > 0


def used(agent: str) -> list:
    return [
        record
        for record in load_records(Path(os.environ[REQUEST_LOG_ENV]))
        if agent in record.user_agent and record.resource and record.code < 400
    ]


def check(records: list, grants: dict) -> None:
    triples = {record.permission for record in records}
    missing = sorted(triples - set(grants))
    assert not missing, f"used but not granted: {missing}"
    unused = sorted(set(grants) - triples)
    assert not unused, f"granted but never used: {unused}"
    for record in records:
        namespace, names = grants[record.permission]
        if namespace is not None:
            assert record.namespace == namespace, record
        if names and record.verb not in ("list", "watch", "create"):
            assert record.name in names, record


@pytest.mark.after_kube
def test_the_controller_uses_exactly_what_its_roles_grant(tmp_path):
    representative_run(tmp_path)
    records = used(CONTROLLER_AGENT)
    check(records, granted("dl2-scheduler", ("ClusterRole", "Role")))
    print(f"{len(records)} controller requests, {len({r.permission for r in records})} permissions")


@pytest.mark.after_kube
def test_the_promotion_gate_uses_exactly_what_its_role_grants(tmp_path):
    if not used(PROMOTER_AGENT):
        representative_run(tmp_path)
    check(used(PROMOTER_AGENT), granted("dl2-policy-promoter", ("ClusterRole",)))


def test_the_check_fails_on_a_permission_not_granted_or_granted_in_vain():
    from dl2.kube.apiserver import RequestRecord

    grants = {("", "pods", "list"): (None, set()), ("", "nodes", "list"): (None, set())}
    pods = RequestRecord("list", "", "pods", "", "", "", CONTROLLER_AGENT, 200)
    nodes = RequestRecord("list", "", "nodes", "", "", "", CONTROLLER_AGENT, 200)
    check([pods, nodes], grants)
    with pytest.raises(AssertionError, match=r"granted but never used: \[\('', 'nodes', 'list'\)\]"):
        check([pods], grants)
    secrets = RequestRecord("get", "", "secrets", "", "dl2-system", "token", CONTROLLER_AGENT, 200)
    with pytest.raises(AssertionError, match="used but not granted"):
        check([pods, nodes, secrets], grants)
