"""dl2 resizes a real elastic PyTorchJob through the real training operator, on a real node, from the dl2 image.

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

Skipped, naming what is missing, where `make real-nodes training-operator` or `make image IMAGE_ARGS=--export` has
not run. About 4 minutes on 2 shared cores, most of it containerd unpacking the 6 GB image.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dl2.core import Allocation, ClusterView, JobAllocation
from dl2.kube import contract as c
from dl2.kube.controller import Controller, SlotReport
from dl2.kube.policy import POLICIES
from dl2.kube.rest import CONFIGMAPS, NAMESPACES, PODS, PYTORCHJOBS, Rest
from dl2.kube.settings import ControllerConfig
from dl2.paths import REPO_ROOT
from testbed.controlplane import assets, image
from testbed.controlplane import nodes as real
from testbed.controlplane.cluster import ControlPlane
from testbed.controlplane.install import install_dl2
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
        events = []
        for path in (self.folder / "events").glob("worker-*.jsonl"):
            lines = path.read_text().splitlines()
            events += [json.loads(line) for line in lines if line.endswith("}")]
        return sorted((e for e in events if e["event"] in ("step", "resume")), key=lambda e: e["t"])

    def wait_for(self, world: int, since_t: float, steps: int, timeout_s: float = 180.0) -> float:
        """Wall-clock time of the first step at `world` after `since_t`, once `steps` such steps are logged."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.nodes.check()
            done = [e for e in self.events() if e["event"] == "step" and e["world"] == world and e["t"] > since_t]
            if len({e["step"] for e in done}) >= steps:
                return float(min(e["t"] for e in done))
            time.sleep(0.5)
        pods = {p["metadata"]["name"]: (p.get("status") or {}).get("phase") for p in self.rest.list(PODS, NAMESPACE)}
        pytest.fail(f"{steps} steps at world size {world} did not come in {timeout_s} s; pods: {pods}")

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


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    folder = tmp_path_factory.mktemp("real-training")
    checkpoints = folder / "checkpoints"
    checkpoints.mkdir(mode=0o777)
    checkpoints.chmod(0o777)  # the image's user (10001) writes there
    with ControlPlane(kwok=False) as plane:
        identities = install_dl2(plane)
        with (
            real.RealNodes(plane, count=1) as nodes,
            TrainingOperator(plane),
            rendezvous_store(nodes.nodes[0].address) as endpoint,
        ):
            nodes.import_archive(ARCHIVE)
            rest = Rest(plane.admin_client())
            rest.patch(NAMESPACES, None, NAMESPACE, {"metadata": {"labels": {c.MANAGED_LABEL: "true"}}})
            rest.create(
                CONFIGMAPS,
                NAMESPACE,
                {"metadata": {"name": "digits-job"}, "data": {"elastic_digits.py": SCRIPT.read_text()}},
            )
            rest.create(PYTORCHJOBS, NAMESPACE, _job(endpoint, checkpoints, workers=2))
            policy = Sized(2)
            config = ControllerConfig("a", decision_log=folder / "decisions")
            api = plane.client(token=identities.controller)
            controller = Controller(api, config, lambda name, version: policy)
            rest.create(POLICIES, None, policy_object("active", "1", guardrails={"cooldownSlots": 0}))
            controller.refresh_policy(rest.get(POLICIES, None, "default"))
            yield Bed(plane, nodes, rest, controller, policy, checkpoints)


def test_a_pytorchjob_resized_2_3_1_by_dl2_goes_on_from_its_checkpoint(bed: Bed) -> None:
    started = bed.wait_for(world=2, since_t=0.0, steps=2 * EVERY_STEPS, timeout_s=300.0)
    pauses: dict[str, float] = {}
    for before, after in ((2, 3), (3, 1)):
        written = bed.resize(after)
        first = bed.wait_for(world=after, since_t=written, steps=2 * EVERY_STEPS)
        pauses[f"{before} -> {after}"] = first - written
    print(f"first step at 2 workers {started:.1f}; pauses (s): {pauses}")

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
