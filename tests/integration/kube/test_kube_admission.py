"""What a stolen controller token can do to training jobs, asked of the API server that enforces it: the kustomize
base installed with kubectl on a control plane of its own (as `docs/operations.md` installs it), then requests
under the controller's ServiceAccount. RBAC binds its resize to the managed namespace only (`kubectl auth can-i
patch pytorchjobs -n kube-system` says no, and such a PATCH is refused); the admission policy
(`k8s/admission.yaml`) refuses a PATCH of anything but replica counts and `dl2.io/` annotations, a dry run
included, and a resize in a namespace not labelled managed; every resize through dl2's own `Actuator` still
succeeds. The cluster-wide mode (`k8s/cluster-wide/`, a kustomize component) binds the resize everywhere, and the
admission policy still holds.

The plane is this module's, not the session's: the denials here are the point, and the session fails on any
request of dl2's identities that RBAC denied."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from dl2.core import Architecture
from dl2.kube import contract
from dl2.kube.actuate import Actuator, ApiCaller, ResizeRefused
from dl2.kube.controller import Controller, ControllerConfig
from dl2.kube.metrics import Metrics
from dl2.kube.observe import ManagedJob
from dl2.kube.rest import EVENTS, JSON_PATCH, MERGE_PATCH, PYTORCHJOBS, VOLCANO_JOBS, Resource, Rest
from dl2.sim.config import SimConfig
from testbed.controlplane import assets
from testbed.controlplane.apply import install_crds
from testbed.controlplane.cluster import ControlPlane
from testbed.controlplane.install import (
    CONTROLLER,
    SYSTEM_NAMESPACE,
    THIRD_PARTY_CRDS,
    install_dl2,
    service_account_user,
)
from testbed.harness import KubeEnv, Policies, running_twin
from testbed.twin import manifests
from testbed.twin.lockstep import run_lockstep
from tests.builders import heuristic_loader, tiny_workload

K8S = Path(__file__).resolve().parents[3] / "k8s"
MANAGED = "team-a"
"""The namespace the base binds the resize in (`k8s/managed-namespaces.yaml`)."""
UNBOUND = "team-z"
"""Labelled managed, but the base binds nothing there."""
NAME = "dl2-job-resizer"
"""The controller's resize: the ClusterRole, and each binding of it."""
EVIL = "attacker.example/evil:1"
POLICY_DENIED = "ValidatingAdmissionPolicy 'dl2-scheduler-resizes-only'"
RBAC_DENIED = f'User "{service_account_user(CONTROLLER)}" cannot patch resource'


def kubectl(kubeconfig: Path, *arguments: str, check: bool = True) -> str:
    done = subprocess.run(
        [assets.kubectl(), "--kubeconfig", str(kubeconfig), *arguments], capture_output=True, text=True, timeout=120
    )
    assert not check or done.returncode == 0, f"kubectl {' '.join(arguments)}: {done.stderr}"
    return done.stdout.strip()


@dataclass
class Installed:
    """The module's plane with the base installed: kubectl as admin, an admin client and one as the controller."""

    kubeconfig: Path
    admin: Rest
    controller: Rest

    def kubectl(self, *arguments: str, check: bool = True) -> str:
        return kubectl(self.kubeconfig, *arguments, check=check)

    def can_i(self, verb: str, resource: str, namespace: str) -> str:
        as_controller = ("--as", service_account_user(CONTROLLER))
        return self.kubectl("auth", "can-i", verb, resource, "-n", namespace, *as_controller, check=False)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    """`docs/operations.md`'s install: the CRD, dl2's namespace and the managed one first, then `kubectl apply -k
    k8s/`; the job operators' CRDs as the operators install them; a second managed namespace that is not bound."""
    folder = tmp_path_factory.mktemp("admission")
    try:
        assets.require()
    except assets.AssetsMissing as error:
        pytest.fail(f"{error} (make test builds it)")
    with ControlPlane(folder / "plane", scheduler=False, kwok=False) as plane:
        admin = Rest(plane.admin_client())
        install_crds(admin, *THIRD_PARTY_CRDS)
        config = plane.write_kubeconfig(folder / "admin.kubeconfig")
        kubectl(config, "apply", "--server-side", "-f", str(K8S / "crd-schedulerpolicy.yaml"),
                "-f", str(K8S / "namespace.yaml"))  # fmt: skip
        for namespace in (MANAGED, UNBOUND):
            kubectl(config, "create", "namespace", namespace)
            kubectl(config, "label", "namespace", namespace, f"{contract.MANAGED_LABEL}=true")
        kubectl(config, "wait", "--for", "condition=established", "crd/schedulerpolicies.dl2.io", "--timeout=60s")
        kubectl(config, "apply", "--server-side", "-k", str(K8S))
        token = plane.service_account_token(SYSTEM_NAMESPACE, CONTROLLER)
        env = Installed(config, admin, Rest(plane.client(token=token, user_agent="dl2-serve/admission")))
        await_enforced(env)
        yield env


def await_enforced(env: Installed, timeout_s: float = 60.0) -> None:
    """Wait until the API server enforces the admission policy: it loads a new policy and its binding from its own
    watch a moment after they are created, and admits everything until then. Probed with dry-run rewrites."""
    deadline = time.monotonic() + timeout_s
    for job in submitted(env, MANAGED).values():
        while True:
            try:
                rewrite_image(env.controller, job, dry_run=True)
            except ApiException as error:
                if error.status == 403:
                    break
                raise
            assert time.monotonic() < deadline, "the admission policy was not enforced within a minute"
            time.sleep(0.2)


def submitted(env: Installed, namespace: str) -> dict[str, ManagedJob]:
    """One PyTorchJob and one Volcano Job in `namespace`, as a user submits them (fresh for each test), by kind."""
    specs = {job.spec.architecture: job.spec for job in tiny_workload().jobs}
    jobs = {}
    for architecture, spec in specs.items():
        body = manifests.job(spec, f"{spec.job_id}-{architecture.value}".lower().replace("_", "-"), namespace)
        resource = PYTORCHJOBS if architecture is Architecture.ALLREDUCE else VOLCANO_JOBS
        env.admin.request("DELETE", resource.path(namespace))
        obj = env.admin.create(resource, namespace, body)
        metadata = obj["metadata"]
        jobs[obj["kind"]] = ManagedJob(
            spec.job_id, namespace, metadata["name"], obj, contract.replicas(obj), False, None
        )  # fmt: skip
    return jobs


def resource_of(job: ManagedJob) -> Resource:
    return PYTORCHJOBS if contract.kind_of(job.obj) == contract.PYTORCHJOB else VOLCANO_JOBS


def rewrite_image(rest: Rest, job: ManagedJob, dry_run: bool) -> None:
    """The attack: the job's (first) worker image set to `EVIL`, with the patch type dl2 uses for its kind."""
    if resource_of(job) is PYTORCHJOBS:
        container = job.obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"]
        body: Any = {"spec": {"pytorchReplicaSpecs": {"Worker": {"template": {"spec": {"containers": [
            {"name": container, "image": EVIL}]}}}}}}  # fmt: skip
        content_type = MERGE_PATCH
    else:
        index, _ = contract.volcano_task(job.obj, contract.WORKER)  # type: ignore[misc]
        body = [{"op": "replace", "path": f"/spec/tasks/{index}/template/spec/containers/0/image", "value": EVIL}]
        content_type = JSON_PATCH
    query = {"dryRun": "All"} if dry_run else None
    rest.request("PATCH", resource_of(job).path(job.namespace, job.name), body, query, content_type)


def refused(request: Any) -> str:
    """The message of the 403 `request()` must raise."""
    with pytest.raises(ApiException) as raised:
        request()
    assert raised.value.status == 403, raised.value.body
    return str(json.loads(raised.value.body)["message"])


def rewritten(rest: Rest, job: ManagedJob) -> bool:
    """Whether the stored job names `EVIL` anywhere."""
    return EVIL in json.dumps(rest.get(resource_of(job), job.namespace, job.name))


def test_the_controller_may_resize_jobs_in_the_managed_namespace_only(installed):
    for resource in ("pytorchjobs.kubeflow.org", "jobs.batch.volcano.sh"):
        assert installed.can_i("patch", resource, "kube-system") == "no"
        assert installed.can_i("patch", resource, UNBOUND) == "no"
        assert installed.can_i("patch", resource, MANAGED) == "yes"
        assert installed.can_i("update", resource, MANAGED) == "no"
        assert installed.can_i("list", resource, "kube-system") == "yes"  # it still reads everywhere


def test_every_resize_through_the_actuator_succeeds(installed):
    actuator = Actuator(installed.controller, ApiCaller(Metrics(), sleep=lambda _: None))
    for kind, job in submitted(installed, MANAGED).items():
        workers, ps = job.replicas
        wanted = (workers + 1, ps + 1 if kind == "Job" else 0)
        actuator.resize(job, *wanted, slot=7)
        stored = installed.admin.get(resource_of(job), job.namespace, job.name)
        assert contract.replicas(stored) == wanted, kind
        assert stored["metadata"]["annotations"]["dl2.io/resized-slot"] == "7"
        actuator.resize(ManagedJob(job.job_id, job.namespace, job.name, stored, wanted, False, 7), *job.replicas, 8)
        assert contract.replicas(installed.admin.get(resource_of(job), job.namespace, job.name)) == job.replicas


@pytest.mark.parametrize("dry_run", [False, True], ids=["applied", "dry-run"])
def test_the_admission_policy_refuses_an_image_rewrite_where_rbac_allows_the_patch(installed, dry_run):
    for job in submitted(installed, MANAGED).values():
        message = refused(lambda job=job: rewrite_image(installed.controller, job, dry_run))
        assert POLICY_DENIED in message and "may change only the replicas" in message, message
        assert not rewritten(installed.admin, job)
        rewrite_image(installed.admin, job, dry_run=True)  # the policy binds the controller only


@pytest.mark.parametrize("dry_run", [False, True], ids=["applied", "dry-run"])
def test_rbac_refuses_any_patch_where_the_resize_is_not_bound(installed, dry_run):
    actuator = Actuator(installed.controller, ApiCaller(Metrics(), sleep=lambda _: None))
    for namespace in ("kube-system", UNBOUND):
        for job in submitted(installed, namespace).values():
            message = refused(lambda job=job: rewrite_image(installed.controller, job, dry_run))
            assert RBAC_DENIED in message, message
            with pytest.raises(ResizeRefused, match=RBAC_DENIED):
                actuator.resize(job, 1, 1, 1)
            assert not rewritten(installed.admin, job)


def test_the_cluster_wide_mode_binds_the_resize_everywhere_and_admission_still_holds(installed, tmp_path):
    """An overlay of the operator's own (outside k8s/) with the component: the resize bound for the cluster; the
    policy still refuses an image rewrite anywhere, and a resize outside namespaces labelled managed."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    base = os.path.relpath(K8S, overlay)
    (overlay / "kustomization.yaml").write_text(f"resources: [{base}]\ncomponents: [{base}/cluster-wide]\n")
    rendered = yaml.safe_load_all(installed.kubectl("kustomize", str(overlay)))
    bindings = {(doc["kind"], doc["metadata"].get("namespace")) for doc in rendered if doc["metadata"]["name"] == NAME}
    assert bindings == {("ClusterRole", None), ("ClusterRoleBinding", None)}
    installed.kubectl("apply", "--server-side", "-k", str(overlay))
    try:
        assert installed.can_i("patch", "pytorchjobs.kubeflow.org", "kube-system") == "yes"
        actuator = Actuator(installed.controller, ApiCaller(Metrics(), sleep=lambda _: None))
        for job in submitted(installed, UNBOUND).values():
            actuator.resize(job, job.replicas[0] + 1, job.replicas[1], 3)
            assert POLICY_DENIED in refused(lambda job=job: rewrite_image(installed.controller, job, False))
        for job in submitted(installed, "kube-system").values():
            with pytest.raises(ResizeRefused, match=f"{POLICY_DENIED}.*namespaces labelled dl2.io/managed=true"):
                actuator.resize(job, 1, 1, 3)
    finally:
        installed.kubectl("delete", "clusterrolebinding", NAME)
    assert installed.can_i("patch", "pytorchjobs.kubeflow.org", "kube-system") == "no"


@pytest.mark.slow
def test_a_refused_resize_leaves_that_job_alone_and_the_slots_go_on(tmp_path):
    """A namespace labelled managed where the resize is not bound: the controller decides its jobs, the API server
    refuses their resizes, each with a Warning Event on the job, and every other job is resized, slot after slot
    (the twin's lockstep waits for each slot's report: a slot that failed would time it out)."""
    with ControlPlane(tmp_path / "plane", scheduler=False) as plane:
        kube = KubeEnv(plane, install_dl2(plane, managed_namespaces=(MANAGED,)))
        workload = tiny_workload(num_jobs=8, num_nodes=2)
        with running_twin(kube, workload, SimConfig.realistic(seed=1), namespaces=(MANAGED, UNBOUND)) as cluster:
            Policies(kube).create("active")
            api = kube.controller_api("refused")
            config = ControllerConfig("refused", decision_log=tmp_path / "decisions", clock="cluster")
            controller = Controller(api, config, heuristic_loader("drf"))
            stop = threading.Event()
            thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
            thread.start()
            try:
                assert run_lockstep(cluster, slot_timeout_s=30, max_slots=6) == 6
            finally:
                stop.set()
                thread.join(10)
        events = {namespace: kube.rest().list(EVENTS, namespace) for namespace in (MANAGED, UNBOUND)}
        reasons = {namespace: {e["reason"] for e in found} for namespace, found in events.items()}
        assert "Resized" in reasons[MANAGED] and "ResizeRefused" not in reasons[MANAGED], reasons
        assert reasons[UNBOUND] == {"ResizeRefused"}, reasons
        refusal = next(e for e in events[UNBOUND] if e["reason"] == "ResizeRefused")
        assert refusal["type"] == "Warning" and RBAC_DENIED in refusal["note"], refusal
