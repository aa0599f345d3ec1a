"""docs/operations.md's walkthrough ("On a cluster"), run as written: every ```` ```bash walkthrough <step> ```` block
in page order, each with `bash -euo pipefail` from the repository root, kubectl and helm of the built assets on
PATH and KUBECONFIG an admin's, against a fresh real control plane; after each step the test reads from the API
server what the step is for (the policy's mode, pinned version and canary scope; what the install created).

Each install gets a control plane of its own rather than the session's: the session's already holds dl2's
namespace, ServiceAccounts and RBAC (`install_dl2`), which `helm install` refuses to adopt and `helm uninstall`
would delete, with them the tokens the other tests use. A bare plane (no kube-scheduler, no kwok: no pod has to
run, no controller writes status) starts in about 8 s, and both installs run the same steps after their own.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dl2.kube.policy import POLICIES
from dl2.kube.rest import NAMESPACES, Resource, Rest
from testbed.controlplane import assets
from testbed.controlplane.cluster import ControlPlane

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "operations.md"
FENCE = re.compile(r"^```bash walkthrough (?P<step>[\w-]+)\s*$")
INSTALLS = {"kustomize": "install-kustomize", "helm": "install-helm"}
"""Each way to install, and its step; a walkthrough runs one of them and every step that is not an install."""
STEPS = ["install-kustomize", "install-helm", "check", "canary", "promote", "rollback", "kill-switch", "off"]
DEPLOYMENTS = Resource("apps", "v1", "deployments")
SECRETS = Resource("", "v1", "secrets")
CANARY_SCOPE = {"namespaces": ["team-a"], "jobSelector": {"matchLabels": {"dl2.io/canary": "true"}}}

Policy = dict[str, Any]


def walkthrough(page: Path = PAGE) -> list[tuple[str, str]]:
    """(step, script) of every ```` ```bash walkthrough <step> ```` block of the page, in page order."""
    blocks: list[tuple[str, str]] = []
    step: str | None = None
    lines: list[str] = []
    for line in page.read_text().splitlines():
        if step is None:
            match = FENCE.match(line)
            if match:
                step, lines = match["step"], []
        elif line.startswith("```"):
            blocks.append((step, "\n".join(lines) + "\n"))
            step = None
        else:
            lines.append(line)
    assert step is None, f"{page}: the block of step {step} is not closed"
    return blocks


def spec(policy: Policy) -> dict[str, Any]:
    return policy["spec"]


def installed(rest: Rest, policy: Policy) -> None:
    """The sample policy (v1 in shadow, generation 1) and the three Deployments, whichever way it was installed."""
    assert (spec(policy)["mode"], spec(policy)["model"]["version"]) == ("shadow", "1")
    assert policy["metadata"]["generation"] == 1
    names = {d["metadata"]["name"] for d in rest.list(DEPLOYMENTS, "dl2-system")}
    assert names == {"dl2-scheduler", "dl2-extender", "dl2-kube-scheduler"}
    # the certificates the extender and its kube-scheduler mount, which each install makes with the chart
    certificates = {s["metadata"]["name"]: s for s in rest.list(SECRETS, "dl2-system")}
    for name in ("dl2-extender-tls", "dl2-kube-scheduler-tls"):
        assert set(certificates[name]["data"]) == {"ca.crt", "tls.crt", "tls.key"}


def helm_installed(rest: Rest, policy: Policy) -> None:
    installed(rest, policy)
    release = rest.list(SECRETS, "default", labelSelector="owner=helm,name=dl2")
    assert [s["metadata"]["labels"]["status"] for s in release] == ["deployed"]
    assert policy["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"


def unchanged(rest: Rest, policy: Policy) -> None:
    """Looking changes nothing."""
    assert policy["metadata"]["generation"] == 1 and spec(policy)["mode"] == "shadow"


def canary(rest: Rest, policy: Policy) -> None:
    assert spec(policy)["mode"] == "canary" and spec(policy)["canary"] == CANARY_SCOPE
    assert spec(policy)["model"]["version"] == "1"
    team = rest.get(NAMESPACES, None, "team-a")
    assert team["metadata"]["labels"]["dl2.io/managed"] == "true"


def promoted(rest: Rest, policy: Policy) -> None:
    assert (spec(policy)["mode"], spec(policy)["model"]["version"]) == ("canary", "2")


def rolled_back(rest: Rest, policy: Policy) -> None:
    assert (spec(policy)["mode"], spec(policy)["model"]["version"]) == ("canary", "1")


def killed(rest: Rest, policy: Policy) -> None:
    """Shadow: nothing written to jobs, the pinned version and the canary scope kept for the way back."""
    assert (spec(policy)["mode"], spec(policy)["model"]["version"]) == ("shadow", "1")
    assert spec(policy)["canary"] == CANARY_SCOPE


def off(rest: Rest, policy: Policy) -> None:
    assert spec(policy)["mode"] == "off"


CHECKS: dict[str, Callable[[Rest, Policy], None]] = {
    "install-kustomize": installed,
    "install-helm": helm_installed,
    "check": unchanged,
    "canary": canary,
    "promote": promoted,
    "rollback": rolled_back,
    "kill-switch": killed,
    "off": off,
}


def test_the_page_has_each_step_once_in_order():
    assert [step for step, _ in walkthrough()] == STEPS
    assert set(CHECKS) == set(STEPS)


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[ControlPlane]:
    """A control plane of the test's own: nothing of dl2 on it, stopped (and gone) afterwards."""
    try:
        assets.require()
        assets.helm()
    except assets.AssetsMissing as error:
        pytest.fail(f"{error} (make test builds it)")
    with ControlPlane(tmp_path / "plane", scheduler=False, kwok=False) as started:
        yield started


def environment(plane: ControlPlane, folder: Path) -> dict[str, str]:
    """What an operator's shell has: the admin kubeconfig, kubectl and helm on PATH; helm's own files kept apart."""
    path = os.pathsep.join([str(assets.folder()), str(assets.HELM.folder()), os.environ["PATH"]])
    helm_home = {f"HELM_{kind}_HOME": str(folder / "helm" / kind.lower()) for kind in ("CACHE", "CONFIG", "DATA")}
    kubeconfig = plane.write_kubeconfig(folder / "admin.kubeconfig")
    return {**os.environ, **helm_home, "KUBECONFIG": str(kubeconfig), "PATH": path}


@pytest.mark.slow
@pytest.mark.parametrize("install", sorted(INSTALLS))
def test_the_walkthrough_runs_as_written(plane, tmp_path, install):
    env = environment(plane, tmp_path)
    rest = Rest(plane.admin_client())
    skipped = {step for other, step in INSTALLS.items() if other != install}
    for step, script in walkthrough():
        if step in skipped:
            continue
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )
        print(f"--- {step}\n{done.stdout}{done.stderr}")  # what the page shows, for `pytest -s`
        assert done.returncode == 0, f"step {step} failed:\n{script}\n{done.stdout}{done.stderr}"
        CHECKS[step](rest, rest.get(POLICIES, None, "default"))
