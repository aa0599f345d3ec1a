"""dl2 resizes a real elastic PyTorchJob through the real training operator, on a real node, from the dl2 image;
and the controller runs from that image as a pod there.

The control plane with dl2 installed as an operator would install it, one real node (a kubelet on containerd and
runc) into which the dl2 image is imported, and Kubeflow's training operator (`make training-operator`). A
PyTorchJob with an `elasticPolicy` trains `examples/elastic_digits.py` (mounted from a ConfigMap) under `torchrun`
in the dl2 image, one worker per pod; its checkpoints and each worker's timed events go to a host folder. dl2's
controller (in-process, its real slot: observe, decide, record, act) runs a policy that asks for 2, then 3, then 1
workers; it writes the replica count, the operator creates or deletes the pods, and torchrun's elastic agents meet
again at the new world size. After each resize training goes on from its last checkpoint, losing at most one
checkpoint interval; the pause from the controller's write to the first step at the new size is measured.

The test bed runs no cluster DNS, and the operator's default rendezvous endpoint is worker 0's pod by name, so the
rendezvous store (torch's c10d TCPStore) runs beside the node, on its address, and every agent is its client;
workers reach each other by pod address (`--local-addr`, from the downward API).

Then the kustomize base as shipped (`k8s/`, an overlay setting only the decision log and the cluster's name) runs
the controller and the extender as pods on the node, from the same image: the controller reaches the API server at
the `kubernetes` Service (`testbed.controlplane.nodes.service.ApiService`), leads, and reports on its policy.

Skipped, naming what is missing, where `make real-nodes training-operator` or `make image IMAGE_ARGS=--export` has
not run. 5-10 minutes on 2 shared cores, about 3 of them containerd unpacking the 6 GB image.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dl2.core import Allocation, ClusterView, JobAllocation
from dl2.kube import contract as c
from dl2.kube.controller import Controller, SlotReport
from dl2.kube.policy import POLICIES
from dl2.kube.rest import CONFIGMAPS, NAMESPACES, PODS, PYTORCHJOBS, Resource, Rest
from dl2.kube.settings import ControllerConfig
from dl2.paths import REPO_ROOT
from testbed.controlplane import assets, image
from testbed.controlplane import nodes as real
from testbed.controlplane.cluster import ControlPlane
from testbed.controlplane.install import Identities, install_dl2
from testbed.controlplane.nodes.service import ApiService
from testbed.controlplane.operator import TrainingOperator
from testbed.controlplane.processes import free_port
from tests.builders import policy_object

MISSING = real.missing() + assets.TRAINING_OPERATOR.missing() + image.missing()
ARCHIVE = image.cache_folder(image.BaseRecipe()) / "dl2.oci.tar"
if not MISSING and not ARCHIVE.is_file():
    MISSING.append(f"{ARCHIVE} (make image IMAGE_ARGS=--export)")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(bool(MISSING), reason="; ".join(MISSING) or "it can run")]

NAMESPACE = "team-a"
"""One of the namespaces `install_dl2` lets the controller resize jobs in."""
JOB = "digits"
EVERY_STEPS = 5
IMAGE = "dl2:" + image.image_tag().rsplit(":", 1)[1]
"""As the manifests name it; containerd's `docker.io/library/dl2:<version>`, the name the archive carries."""
LEASES = Resource("coordination.k8s.io", "v1", "leases")
SCRIPT = REPO_ROOT / "examples" / "elastic_digits.py"
TRAINER = [
    "torchrun", "--nproc-per-node", "1", "--max-restarts", "100", "--monitor-interval", "0.5",
    "/job/elastic_digits.py", "--checkpoint-dir", "/checkpoints", "--log-dir", "/checkpoints/events",
    "--every-steps", str(EVERY_STEPS), "--hidden", "16", "--max-steps", "1000000",
]  # fmt: skip
"""Each pod's command: one elastic agent of the job (its rendezvous and size from the operator's PET_ variables)."""


class Sized:
    """The policy: every job gets `workers` workers (the test sets it), on the first node; which pods the operator
    makes is the operator's business, dl2 writes the count."""

    name = "sized"

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def reset(self) -> None:
        pass

    def schedule(self, view: ClusterView) -> Allocation:
        return Allocation({job.spec.job_id: JobAllocation((0,) * self.workers, ()) for job in view.jobs})


def _job(endpoint: tuple[str, int], checkpoints: Path, workers: int) -> dict[str, Any]:
    """What a user submits: an elastic PyTorchJob of 1 to 3 workers under dl2's contract, its rendezvous at
    `endpoint`."""
    container = {
        "name": "pytorch",  # the name the operator looks for
        "image": IMAGE,
        "imagePullPolicy": "Never",  # no registry: the image imported into the node's containerd
        "command": TRAINER,
        "env": [
            # rank 0's address for the workers' process group: the pod's own (its name resolves nowhere here)
            {"name": "PET_LOCAL_ADDR", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "OMP_NUM_THREADS", "value": "1"},
            # a joining agent hangs on a shared store (torch 2.13; docs/reporting.md)
            {"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "1"},
        ],
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
        "volumeMounts": [
            {"name": "job", "mountPath": "/job", "readOnly": True},
            {"name": "checkpoints", "mountPath": "/checkpoints"},
        ],
    }
    host, port = endpoint
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": JOB,
            "namespace": NAMESPACE,
            "labels": {c.JOB_LABEL: JOB},
            "annotations": {
                c.JOB_ID: JOB,
                c.MODEL: "resnet-50",
                c.DECLARED_EPOCHS: "1000.0",
                c.ARRIVAL_S: "0.0",
                c.REQUESTED_WORKERS: str(workers),
            },
        },
        "spec": {
            "elasticPolicy": {
                "minReplicas": 1,
                "maxReplicas": 3,
                "maxRestarts": 100,
                "rdzvBackend": "c10d",
                "rdzvHost": host,
                "rdzvPort": port,
                # every agent a client of the store the test bed hosts (`rendezvous_store`)
                "rdzvConf": [{"key": "is_host", "value": "0"}, {"key": "last_call_timeout", "value": "1"}],
            },
            "runPolicy": {"cleanPodPolicy": "All"},
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": workers,
                    "restartPolicy": "OnFailure",
                    "template": {
                        "spec": {
                            "nodeSelector": {real.NODE_LABEL: "true"},
                            "automountServiceAccountToken": False,
                            "containers": [container],
                            "volumes": [
                                {"name": "job", "configMap": {"name": "digits-job"}},
                                {"name": "checkpoints", "hostPath": {"path": str(checkpoints), "type": "Directory"}},
                            ],
                        }
                    },
                }
            },
        },
    }


@contextlib.contextmanager
def rendezvous_store(host: str) -> Iterator[tuple[str, int]]:
    """A c10d rendezvous store on the node's address, for the job's agents: the service the operator's default
    (worker 0's pod hosting it, reached by its name) needs cluster DNS for, which the test bed does not run."""
    from torch.distributed import TCPStore

    port = free_port()
    store = TCPStore(host, port, is_master=True, wait_for_workers=False)
    try:
        yield host, port
    finally:
        del store


@dataclass
class Bed:
    plane: ControlPlane
    nodes: real.RealNodes
    rest: Rest
    controller: Controller
    policy: Sized
    folder: Path
    slot: int = 0

    def run_slot(self) -> SlotReport:
        report = self.controller.run_slot(self.slot, time_s=600.0 * self.slot, slot_s=600.0)
        assert report is not None
        self.slot += 1
        return report

    def events(self) -> list[dict[str, Any]]:
        return sorted((e for e in self._all_events() if e["event"] in ("step", "resume")), key=lambda e: e["t"])

    def wait_for(self, world: int, since_t: float, steps: int, timeout_s: float = 300.0) -> float:
        """Wall-clock time of the first step at `world` after `since_t`, once `steps` such steps are logged."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.nodes.check()
            done = [e for e in self.events() if e["event"] == "step" and e["world"] == world and e["t"] > since_t]
            if len({e["step"] for e in done}) >= steps:
                return float(min(e["t"] for e in done))
            time.sleep(0.5)
        pods = {p["metadata"]["name"]: (p.get("status") or {}).get("phase") for p in self.rest.list(PODS, NAMESPACE)}
        logs = "\n".join(f"--- {name} ---\n{self.log_tail(name)}" for name in pods)
        pytest.fail(f"{steps} steps at world size {world} did not come in {timeout_s} s; pods: {pods}\n{logs}")

    def log_tail(self, pod: str, lines: int = 40) -> str:
        """The pod's last lines through the API server (`kubectl logs`), or why they cannot be read."""
        url = f"{self.plane.url}{PODS.path(NAMESPACE, pod, 'log')}?tailLines={lines}"
        try:
            with urllib.request.urlopen(url, context=self.plane.ssl_context(), timeout=10) as answer:
                return str(answer.read().decode(errors="replace"))
        except OSError as error:
            return f"(no log: {error})"

    def pause_parts(self, world: int, written: float, first_step: float) -> dict[str, float]:
        """Where a resize's pause went, from rank 0's events at the new size: until the new processes began (the
        operator's pods, the agents' rendezvous), their imports, the process group, and on to the first step."""
        starts = [e for e in self._all_events() if e["event"] == "start" and e["world"] == world and e["t"] > written]
        start = min(starts, key=lambda e: e["t"])
        return {
            "to the new processes": start["started"] - written,
            "imports": start["imported"] - start["started"],
            "process group": start["t"] - start["imported"],
            "to the first step": first_step - start["t"],
        }

    def _all_events(self) -> list[dict[str, Any]]:
        events = []
        for path in (self.folder / "events").glob("worker-*.jsonl"):
            events += [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]
        return events

    def resize(self, workers: int) -> float:
        """The policy asks for `workers`; slots run until the controller has written it. When it wrote it."""
        self.policy.workers = workers
        for _ in range(5):
            report = self.run_slot()
            if report.resizes:
                written = time.time() - report.phases.get("act", 0.0)
                job = self.rest.get(PYTORCHJOBS, NAMESPACE, JOB)
                assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == workers
                return written
            time.sleep(1.0)
        pytest.fail(f"the controller did not resize the job to {workers} workers in 5 slots")


@dataclass
class Cluster:
    """The module's test bed: a control plane with dl2's CRDs, identities and managed namespaces, one real node
    with the dl2 image, the training operator, and a rendezvous store on the node's address."""

    plane: ControlPlane
    nodes: real.RealNodes
    identities: Identities
    rendezvous: tuple[str, int]
    rest: Rest


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with ControlPlane(kwok=False) as plane:
        identities = install_dl2(plane)
        with (
            real.RealNodes(plane, count=1) as nodes,
            TrainingOperator(plane),
            rendezvous_store(nodes.nodes[0].address) as endpoint,
        ):
            nodes.import_archive(ARCHIVE)
            yield Cluster(plane, nodes, identities, endpoint, Rest(plane.admin_client()))


@pytest.fixture
def bed(cluster: Cluster, tmp_path: Path) -> Iterator[Bed]:
    """The job submitted, and an in-process controller whose policy the test sizes; both gone afterwards."""
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    checkpoints.chmod(0o777)  # the image's user (10001) writes there
    rest = cluster.rest
    rest.patch(NAMESPACES, None, NAMESPACE, {"metadata": {"labels": {c.MANAGED_LABEL: "true"}}})
    script = {"metadata": {"name": "digits-job"}, "data": {"elastic_digits.py": SCRIPT.read_text()}}
    rest.create(CONFIGMAPS, NAMESPACE, script)
    rest.create(PYTORCHJOBS, NAMESPACE, _job(cluster.rendezvous, checkpoints, workers=2))
    policy = Sized(2)
    config = ControllerConfig("a", decision_log=tmp_path / "decisions")
    api = cluster.plane.client(token=cluster.identities.controller)
    controller = Controller(api, config, lambda name, version: policy)
    rest.create(POLICIES, None, policy_object("active", "1", guardrails={"cooldownSlots": 0}))
    controller.refresh_policy(rest.get(POLICIES, None, "default"))
    try:
        yield Bed(cluster.plane, cluster.nodes, rest, controller, policy, checkpoints)
    finally:
        rest.delete_now(POLICIES, None, "default")
        rest.delete_now(PYTORCHJOBS, NAMESPACE, JOB)
        rest.delete_now(CONFIGMAPS, NAMESPACE, "digits-job")


def test_a_pytorchjob_resized_2_3_1_by_dl2_goes_on_from_its_checkpoint(bed: Bed) -> None:
    bed.wait_for(world=2, since_t=0.0, steps=2 * EVERY_STEPS, timeout_s=300.0)
    for before, after in ((2, 3), (3, 1)):
        written = bed.resize(after)
        first = bed.wait_for(world=after, since_t=written, steps=2 * EVERY_STEPS)
        parts = bed.pause_parts(after, written, first)
        print(
            f"resize {before} -> {after}: pause {first - written:.1f} s; "
            + ", ".join(f"{k} {v:.1f} s" for k, v in parts.items())
        )

    events = bed.events()
    steps = [e for e in events if e["event"] == "step" and e["rank"] == 0]
    worlds = [e["world"] for e in steps]
    assert [w for i, w in enumerate(worlds) if i == 0 or w != worlds[i - 1]] == [2, 3, 1]
    resumes = [e for e in events if e["event"] == "resume" and e["rank"] == 0]
    assert resumes[0]["step"] == 0
    for resume in resumes[1:]:
        before_steps = [e["step"] for e in steps if e["t"] < resume["t"]]
        after_steps = [e["step"] for e in steps if e["t"] > resume["t"]]
        if not before_steps or not after_steps:
            continue
        assert resume["step"] % EVERY_STEPS == 0
        assert max(before_steps) - EVERY_STEPS <= resume["step"] <= max(before_steps)  # lost at most one interval
        assert min(after_steps) == resume["step"] + 1  # and went on from the checkpoint
    for previous, step in itertools.pairwise(steps):
        assert step["step"] == previous["step"] + 1 or previous["step"] - EVERY_STEPS < step["step"] <= previous["step"]


def _kubectl(kubeconfig: Path, *arguments: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    command = [assets.kubectl(), f"--kubeconfig={kubeconfig}", *arguments]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=120)


def _overlay(folder: Path) -> Path:
    """The kustomize base as shipped, with the two settings an installer fills in: where decisions are recorded
    (a folder of the pod's own here: the test bed's S3 server is on loopback) and the cluster's name."""
    folder.mkdir()
    patch = [
        {"op": "replace", "path": "/data/DL2_DECISION_LOG", "value": "/tmp/decisions"},
        {"op": "replace", "path": "/data/DL2_CLUSTER_NAME", "value": "testbed"},
    ]
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(REPO_ROOT / "k8s", folder)],
        "patches": [{"target": {"kind": "ConfigMap", "name": "dl2-scheduler-config"}, "patch": json.dumps(patch)}],
    }
    (folder / "kustomization.yaml").write_text(json.dumps(kustomization))
    return folder


def _pods(rest: Rest, namespace: str) -> dict[str, str]:
    """Each pod's phase, and why it waits (its unscheduled condition or its containers' waiting reasons)."""
    summary = {}
    for pod in rest.list(PODS, namespace):
        status = pod.get("status") or {}
        why = [c.get("message", "") for c in status.get("conditions") or [] if c.get("status") == "False"]
        why += [
            s["state"]["waiting"].get("reason", "")
            for s in status.get("containerStatuses") or []
            if "waiting" in s["state"]
        ]
        summary[pod["metadata"]["name"]] = f"{status.get('phase')} {'; '.join(w for w in why if w)}".strip()
    return summary


def _wait(condition: Any, what: str, rest: Rest, timeout_s: float = 300.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(1.0)
    pytest.fail(f"{what} not within {timeout_s:g} s; pods: {_pods(rest, 'dl2-system')}")


def test_the_controller_runs_from_the_image_as_a_pod_on_the_real_node(cluster: Cluster, tmp_path: Path) -> None:
    rest, plane = cluster.rest, cluster.plane
    kubeconfig = plane.write_kubeconfig(tmp_path / "admin.kubeconfig")
    with ApiService(plane, cluster.nodes.nodes[0]) as service:
        applied = _kubectl(kubeconfig, "apply", "--server-side", "-k", str(_overlay(tmp_path / "overlay")))
        assert applied.returncode == 0, applied.stderr
        # the installer's one step for the extender's certificates (k8s/scheduler-extender.yaml says how)
        chart = [assets.helm(), "template", "dl2", str(REPO_ROOT / "k8s" / "chart" / "dl2")]
        secrets = subprocess.run([*chart, "--show-only", "templates/extender-tls.yaml"], capture_output=True, text=True)
        assert secrets.returncode == 0, secrets.stderr
        made = _kubectl(kubeconfig, "apply", "-f", "-", stdin=secrets.stdout)
        assert made.returncode == 0, made.stderr

        def running(name: str) -> list[dict[str, Any]]:
            pods = rest.list(PODS, "dl2-system", labelSelector=f"app.kubernetes.io/name={name}")
            up = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
            return up if len(up) == 2 else []

        pods = _wait(lambda: running("dl2-scheduler"), "both dl2-scheduler pods Running", rest)
        _wait(lambda: running("dl2-extender"), "both dl2-extender pods Running", rest)
        names = {p["metadata"]["name"] for p in pods}
        assert {p["spec"]["nodeName"] for p in pods} == {cluster.nodes.names[0]}
        # one of them leads, through the API it reaches at the `kubernetes` Service's address
        lease = _wait(
            lambda: next(
                (x for x in rest.list(LEASES, "dl2-system") if x["metadata"]["name"] == "dl2-scheduler"), None
            ),
            "the controller's Lease",
            rest,
        )
        leader = lease["spec"]["holderIdentity"]
        assert leader in names
        # and reports on the SchedulerPolicy: its model cannot load (no MLflow here), which it says
        status = _wait(lambda: rest.get(POLICIES, None, "default").get("status"), "the policy's status", rest)
        assert status.get("observedGeneration") == 1
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        assert conditions["SpecValid"]["status"] == "True"
        assert (
            conditions["ModelLoaded"]["status"] == "False" and "dl2-policy v1" in conditions["ModelLoaded"]["message"]
        )
        # as the manifests run it: user 10001, a read-only root filesystem
        user = _kubectl(kubeconfig, "exec", "-n", "dl2-system", leader, "--", "id", "-u")
        assert user.stdout.strip() == "10001", user.stderr
        write = _kubectl(kubeconfig, "exec", "-n", "dl2-system", leader, "--", "touch", "/opt/dl2/x")
        assert write.returncode != 0 and "Read-only file system" in write.stderr
        # alive by its liveness probe, which the kubelet sends to the pod's address
        time.sleep(30)
        for pod in rest.list(PODS, "dl2-system", labelSelector="app.kubernetes.io/name=dl2-scheduler"):
            assert all(s["restartCount"] == 0 for s in pod["status"]["containerStatuses"]), pod["status"]
        print(f"service {service.address}:{service.port}; leader {leader}; status {json.dumps(status)[:600]}")
