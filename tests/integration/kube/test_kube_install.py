"""Installing dl2 as an operator would, with kubectl, on a fresh real control plane: the CRD and namespaces first, then
`kubectl apply -k k8s/` (server-side dry-run, then apply), the Deployments' pods on kwok nodes, and
`kubectl explain`, `get` (every printer column filled) and `describe` (conditions and Events) of the policy."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from dl2.core import NodeSpec, Resources
from dl2.kube.controller import Controller, ControllerConfig
from dl2.kube.policy import POLICIES
from dl2.kube.rest import NODES, PODS, Rest
from testbed.controlplane.apply import install_crds
from testbed.controlplane.assets import helm, kubectl
from testbed.controlplane.cluster import ControlPlane
from testbed.controlplane.install import THIRD_PARTY_CRDS
from testbed.twin import manifests
from tests.builders import heuristic_loader

K8S = Path(__file__).resolve().parents[3] / "k8s"
DEPLOYMENTS = {"dl2-scheduler", "dl2-extender", "dl2-kube-scheduler"}


def run(kubeconfig: Path, *arguments: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [kubectl(), "--kubeconfig", str(kubeconfig), *arguments], capture_output=True, text=True, timeout=120
    )
    if check:
        assert done.returncode == 0, f"kubectl {' '.join(arguments)}: {done.stderr}"
    return done


def wait_for(condition, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} not within {timeout_s:g} s"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """A control plane with nothing of dl2 on it, the job operators' CRDs (as the operators install them) and two
    kwok nodes (the decision log is in object storage: no volume is needed)."""
    folder = tmp_path_factory.mktemp("install")
    with ControlPlane(folder / "plane") as plane:
        kubeconfig = plane.write_kubeconfig(folder / "admin.kubeconfig")
        rest = Rest(plane.admin_client())
        install_crds(rest, *THIRD_PARTY_CRDS)
        for index in range(2):
            node = NodeSpec(index, Resources(gpu=8.0, cpu=32.0, mem_gb=128.0), "kwok")
            rest.create(NODES, None, manifests.node(node, f"kwok-{index}"))
        yield plane, kubeconfig


@pytest.mark.slow
def test_kubectl_installs_dl2_and_shows_its_policy(fresh, tmp_path):
    plane, kubeconfig = fresh
    # what the rest needs to exist before a server-side dry run can check it: the CRD and the namespaces
    run(
        kubeconfig,
        "apply",
        "--server-side",
        "-f",
        str(K8S / "crd-schedulerpolicy.yaml"),
        "-f",
        str(K8S / "namespace.yaml"),
    )
    run(kubeconfig, "create", "namespace", "team-a")  # the managed namespace the base binds the resize in
    run(kubeconfig, "wait", "--for", "condition=established", "crd/schedulerpolicies.dl2.io", "--timeout=60s")
    # the extender's and its kube-scheduler's certificates, made once with the chart's template (k8s/README.md)
    template = [helm(), "template", "dl2", str(K8S / "chart" / "dl2"), "--show-only", "templates/extender-tls.yaml"]
    certificates = subprocess.run(template, capture_output=True, text=True, timeout=60, check=True).stdout
    made = subprocess.run([kubectl(), "--kubeconfig", str(kubeconfig), "apply", "--server-side", "-f", "-"],
                          input=certificates, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert made.stdout.split() == ["secret/dl2-extender-tls", "serverside-applied", "secret/dl2-kube-scheduler-tls",
                                   "serverside-applied"], made.stderr  # fmt: skip
    dry = run(kubeconfig, "apply", "--server-side", "--dry-run=server", "-k", str(K8S))
    assert "serverside-applied (server dry run)" in dry.stdout
    absent = run(kubeconfig, "get", "deployments", "-n", "dl2-system", "-o", "name", check=False)
    assert absent.stdout.strip() == ""  # a dry run writes nothing
    applied = run(kubeconfig, "apply", "--server-side", "-k", str(K8S))
    lines = applied.stdout.strip().splitlines()
    assert all(line.endswith("serverside-applied") for line in lines) and len(lines) >= 25, applied.stdout
    print(applied.stdout)
    rest = Rest(plane.admin_client())

    def running() -> set[str]:
        pods = rest.list(PODS, "dl2-system")
        return {
            p["metadata"]["labels"]["app.kubernetes.io/name"]
            for p in pods
            if p["status"].get("phase") == "Running" and p["spec"].get("nodeName")
        }

    wait_for(lambda: running() >= DEPLOYMENTS, "every Deployment's pods Running on kwok nodes", 90)
    explained = run(kubeconfig, "explain", "dl2p.spec.guardrails").stdout
    assert "maxStepPerSlot" in explained and "Largest change of one role's count in one slot" in explained
    can = run(kubeconfig, "auth", "can-i", "patch", "schedulerpolicies.dl2.io", "--subresource=status",
              "--as", "system:serviceaccount:dl2-system:dl2-scheduler").stdout.strip()  # fmt: skip
    assert can == "yes"
    cannot = run(kubeconfig, "auth", "can-i", "delete", "pods", "-A",
                 "--as", "system:serviceaccount:dl2-system:dl2-scheduler", check=False).stdout.strip()  # fmt: skip
    assert cannot == "no"
    for namespace, answer in (("kube-system", "no"), ("team-a", "yes")):  # the resize is bound where it is managed
        can = run(kubeconfig, "auth", "can-i", "patch", "pytorchjobs.kubeflow.org", "-n", namespace,
                  "--as", "system:serviceaccount:dl2-system:dl2-scheduler", check=False).stdout.strip()  # fmt: skip
        assert can == answer, namespace
    # the controller, as its ServiceAccount, runs one slot on the wall clock: the policy's status fills in
    token = plane.service_account_token("dl2-system", "dl2-scheduler")
    api = plane.client(token=token, user_agent="dl2-serve/install")
    config = ControllerConfig("install", decision_log=tmp_path / "decisions", slot_s=600.0)
    controller = Controller(api, config, heuristic_loader("drf"))
    try:
        policy = rest.get(POLICIES, None, "default")
        controller.refresh_policy(policy)
        now = controller.current_slot(None)
        controller.run_slot(now.slot, now.time_s, now.slot_s)
        controller.events.flush()
    finally:
        controller.cache.stop()
        controller.events.stop()
    table = run(kubeconfig, "get", "dl2p").stdout.splitlines()
    print("\n".join(table))
    assert table[0].split() == ["NAME", "MODE", "WANTED", "LOADED", "READY", "SLOT", "AGE"]
    row = table[1].split()
    assert row[:5] == ["default", "shadow", "1", "1", "True"] and row[5] == str(now.slot) and len(row) == 7
    described = run(kubeconfig, "describe", "dl2p", "default").stdout
    print(described)
    for expected in ("Conditions:", "SpecValid", "ModelLoaded", "Fallback", "Events:", "serving dl2-policy v1"):
        assert expected in described, described
    kinds = [line.split()[-1] for line in described.splitlines() if line.strip().startswith("Type:")]
    assert kinds == ["Ready", "SpecValid", "ModelLoaded", "Fallback"]
    assert any(line.split()[:2] == ["Normal", "Promoted"] for line in described.splitlines())
    as_json = json.loads(run(kubeconfig, "get", "dl2p", "default", "-o", "json").stdout)
    assert as_json["status"]["leader"] == "install"


@pytest.mark.slow
def test_the_monitoring_objects_are_accepted_where_the_prometheus_operator_runs(fresh):
    """`k8s/monitoring/` (a ServiceMonitor and a PrometheusRule) against the Prometheus Operator's own CRDs
    (`k8s/third-party/`): dry-run first, then applied, as an operator installs them."""
    _, kubeconfig = fresh
    crds = [
        K8S / "third-party" / f"monitoring.coreos.com_{kind}.yaml" for kind in ("servicemonitors", "prometheusrules")
    ]
    run(kubeconfig, "apply", "--server-side", *(f"--filename={path}" for path in crds),
        f"--filename={K8S / 'namespace.yaml'}")  # fmt: skip
    run(kubeconfig, "wait", "--for", "condition=established", "crd/servicemonitors.monitoring.coreos.com",
        "crd/prometheusrules.monitoring.coreos.com", "--timeout=60s")  # fmt: skip
    dry = run(kubeconfig, "apply", "--server-side", "--dry-run=server", "-k", str(K8S / "monitoring"))
    assert dry.stdout.count("serverside-applied (server dry run)") == 2, dry.stdout
    applied = run(kubeconfig, "apply", "--server-side", "-k", str(K8S / "monitoring"))
    assert sorted(applied.stdout.split()) == sorted(
        ["prometheusrule.monitoring.coreos.com/dl2-scheduler", "servicemonitor.monitoring.coreos.com/dl2-scheduler",
         "serverside-applied", "serverside-applied"]
    ), applied.stdout  # fmt: skip
