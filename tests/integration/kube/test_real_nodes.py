"""Real nodes, end to end: two kubelets of the control plane's release, each on its own containerd with runc,
register their Nodes with client certificates from the control plane's CA and become Ready; a pod pinned to each
(by nodeName, and through kube-scheduler by nodeSelector) runs a container built here, gets an address of its
node's subnet and its log is read back from the kubelet and through the API server (`kubectl logs`; `kubectl exec`
runs a command in a running pod); a long-running pod is Running; a pod on one node reaches a pod on the other by
its address; `dl2 cluster --real-nodes 1` starts a Ready node and takes it back on SIGINT. Then everything is
gone: processes, mounts, bridges, the folder, the Nodes, and the host's forwarding is as it was. A start that fails
half-way, and a run that was killed, clean up the same.

Skipped, with what is missing, where `make real-nodes` has not run (it installs containerd, runc and the CNI
plugins with apt-get and builds the kubelet and the images' programs); about 55 s on 2 cores.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dl2.kube.rest import NAMESPACES, NODES, PODS, Rest
from testbed.controlplane import assets
from testbed.controlplane import nodes as real
from testbed.controlplane.cluster import ControlPlane
from testbed.controlplane.nodes import host
from testbed.controlplane.nodes.real import KUBELET_FIXED

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(real.missing()), reason="; ".join(real.missing()) or "real nodes can run"),
]
NAMESPACE = "real-nodes"


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    """A control plane of the module's own, without kwok: no fake node to place pods on, no shared state."""
    with ControlPlane(kwok=False) as started:
        yield started


def _hello(
    name: str, placement: dict[str, Any], args: list[str] | None = None, restart: str = "Never"
) -> dict[str, Any]:
    container = {
        "name": "hello",
        "image": real.HELLO_IMAGE,
        "imagePullPolicy": "Never",  # no registry: the image is the one imported into the node's containerd
        "args": args or [name],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
    }
    return {"metadata": {"name": name}, "spec": {"restartPolicy": restart, "containers": [container], **placement}}


def _pause(name: str, node: str) -> dict[str, Any]:
    container = {"name": "pause", "image": real.PAUSE_IMAGE, "imagePullPolicy": "Never"}
    return {"metadata": {"name": name}, "spec": {"nodeName": node, "containers": [container]}}


def _wait_phase(rest: Rest, name: str, phases: set[str], timeout_s: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        pod = rest.get(PODS, NAMESPACE, name)
        if (pod.get("status") or {}).get("phase") in phases:
            return pod
        if time.monotonic() > deadline:
            raise AssertionError(f"pod {name} not {phases} within {timeout_s} s: {pod.get('status')}")
        time.sleep(0.5)


def _kubelet_log(nodes: real.RealNodes, node_name: str, pod: str, container: str) -> str:
    """The container's log from its kubelet's own API, as the admin (webhook authentication and authorization)."""
    node = nodes.node(node_name)
    url = f"https://{node.address}:{node.kubelet_port}/containerLogs/{NAMESPACE}/{pod}/{container}"
    with urllib.request.urlopen(url, context=nodes.kubelet_context(node_name), timeout=10) as answer:
        return str(answer.read().decode())


def _api_log(plane: ControlPlane, pod: str, container: str) -> str:
    """The container's log through the API server (`kubectl logs`): it dials the node's kubelet by InternalIP with
    its own client certificate."""
    url = f"{plane.url}{PODS.path(NAMESPACE, pod, 'log')}?container={container}"
    with urllib.request.urlopen(url, context=plane.ssl_context(), timeout=10) as answer:
        return str(answer.read().decode())


def _kubectl(plane: ControlPlane, kubeconfig: Path, *args: str) -> str:
    """kubectl of the control plane's release, as the admin; its output (AssertionError with stderr if it fails)."""
    return _run([str(plane.bin / "kubectl"), f"--kubeconfig={kubeconfig}", f"--namespace={NAMESPACE}", *args])


def _leftovers(nodes: real.RealNodes) -> list[str]:
    """What of the nodes is still on the machine."""
    found = [f"mount {point}" for point in host.mounts_under(nodes.folder)]
    found += [f"bridge {node.bridge}" for node in nodes.nodes if Path("/sys/class/net", node.bridge).exists()]
    found += [f"shim {pid}" for pid in host.shim_processes({str(node.socket) for node in nodes.nodes})]
    found += [f"folder {nodes.folder}"] if nodes.folder.exists() else []
    for component in nodes.components:
        found += [f"process {component.name}"] if component.running else []
    return found


def test_two_real_kubelets_run_pods_and_leave_nothing(plane: ControlPlane, tmp_path: Path) -> None:
    rest = Rest(plane.admin_client())
    kubeconfig = plane.write_kubeconfig(tmp_path / "admin.kubeconfig")
    rest.create(NAMESPACES, None, {"metadata": {"name": NAMESPACE}})
    kubelet_fixed_before = KUBELET_FIXED.exists()
    forwarding_before = Path("/proc/sys/net/ipv4/ip_forward").read_text()
    started = time.monotonic()
    with real.RealNodes(plane, count=2) as nodes:
        ready_s = time.monotonic() - started
        first, second = nodes.names
        version = rest.request("GET", "/version")["gitVersion"]
        for name in nodes.names:
            node = rest.get(NODES, None, name)
            info = node["status"]["nodeInfo"]
            assert info["kubeletVersion"] == version, "the kubelet is the control plane's release"
            assert info["containerRuntimeVersion"].startswith("containerd://")
            assert node["metadata"]["labels"][real.NODE_LABEL] == "true"
            addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
            assert addresses["InternalIP"] == nodes.node(name).address
            assert node["spec"]["podCIDR"] == str(nodes.node(name).subnet)

        rest.create(PODS, NAMESPACE, _hello("pinned", {"nodeName": first}))
        # through kube-scheduler: the Node's hostname label is what its kubelet registered
        rest.create(PODS, NAMESPACE, _hello("scheduled", {"nodeSelector": {"kubernetes.io/hostname": second}}))
        rest.create(PODS, NAMESPACE, _pause("sleeper", second))
        for pod_name, node_name in (("pinned", first), ("scheduled", second)):
            pod = _wait_phase(rest, pod_name, {"Succeeded", "Failed"})
            assert pod["status"]["phase"] == "Succeeded", pod["status"]
            assert pod["spec"]["nodeName"] == node_name
            address = ipaddress.ip_address(pod["status"]["podIP"])
            assert address in nodes.node(node_name).subnet, "an address of its node's bridge (CNI)"
            line = f"hello from {node_name} {pod_name}\n"
            assert _kubelet_log(nodes, node_name, pod_name, "hello") == line
            assert _api_log(plane, pod_name, "hello") == line, "through the API server, as kubectl logs reads it"
        sleeper = _wait_phase(rest, "sleeper", {"Running"})
        assert sleeper["status"]["containerStatuses"][0]["state"]["running"]

        # the pod network: a pod on the second node reaches a pod of the first by its address
        rest.create(PODS, NAMESPACE, _hello("server", {"nodeName": first}, ["serve", "8080"], restart="Always"))
        server_ip = _wait_phase(rest, "server", {"Running"})["status"]["podIP"]
        rest.create(PODS, NAMESPACE, _hello("client", {"nodeName": second}, ["get", f"{server_ip}:8080"]))
        assert _wait_phase(rest, "client", {"Succeeded", "Failed"})["status"]["phase"] == "Succeeded"
        assert _kubelet_log(nodes, second, "client", "hello") == f"hello from {first}\n"
        # kubectl through the API server: a log, and a command run in a running container (exec: the API server
        # streams it from the kubelet, which streams it from containerd)
        assert _kubectl(plane, kubeconfig, "logs", "client") == f"hello from {first}\n"
        assert _kubectl(plane, kubeconfig, "exec", "server", "--", "/hello", "exec") == f"hello from {first} exec\n"
        print(f"two nodes Ready in {ready_s:.1f} s; pods Succeeded and Running")

    assert not _leftovers(nodes)
    assert not [n for n in rest.list(NODES) if n["metadata"]["name"] in nodes.names]
    assert KUBELET_FIXED.exists() == kubelet_fixed_before
    assert Path("/proc/sys/net/ipv4/ip_forward").read_text() == forwarding_before, "the host's forwarding as it was"


class _KubeletDiesAtStart(real.RealNodes):
    """The fault, injected from outside: the kubelet is killed as soon as it is started."""

    def _start_kubelet(self, node: real.NodeLayout) -> None:
        super()._start_kubelet(node)
        process = self.components[-1].process
        assert process is not None
        process.kill()


def test_a_start_that_fails_half_way_cleans_up(plane: ControlPlane) -> None:
    """A kubelet that dies while its node starts: the error names it, and what was started (containerd, the
    bridge, the folder) is gone."""
    nodes = _KubeletDiesAtStart(plane, count=1, prefix="dl2-dies")
    with pytest.raises(RuntimeError, match="dl2-dies-0-kubelet exited"):
        nodes.start()
    assert nodes.nodes, "it got as far as laying the node out"
    assert not _leftovers(nodes)


def test_bad_input_is_refused_with_a_clear_error(plane: ControlPlane, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="count must be at least 1"):
        real.RealNodes(plane, count=0)
    with pytest.raises(ValueError, match="longer than 48 characters"):
        real.RealNodes(plane, folder=tmp_path / ("x" * 60))
    with pytest.raises(ValueError, match="not a valid node name prefix"):
        real.RealNodes(plane, prefix="Real_Nodes")


KILLED_RUN = """
import sys, time
from testbed.controlplane.cluster import ControlPlane
from testbed.controlplane.nodes import PAUSE_IMAGE, RealNodes
from dl2.kube.rest import PODS, Rest

plane = ControlPlane(kwok=False).start()
nodes = RealNodes(plane, count=1, prefix="dl2-killed").start()
pod = {"name": "pause", "image": PAUSE_IMAGE, "imagePullPolicy": "Never"}
Rest(plane.admin_client()).create(PODS, "default", {"metadata": {"name": "left"},
    "spec": {"nodeName": nodes.names[0], "containers": [pod]}})
while not nodes.tasks(nodes.names[0]):
    time.sleep(0.2)
print(plane.folder, nodes.folder, nodes.nodes[0].bridge, nodes.nodes[0].socket, flush=True)
time.sleep(600)
"""


def test_a_killed_run_is_swept_by_the_next(tmp_path: Path) -> None:
    """A process running real nodes with a pod is SIGKILLed (its containerd and kubelet die with it, the shim and
    the pod's container do not): the sweep a start runs takes back its containers, mounts, bridge and folder."""
    kubelet_fixed_before = KUBELET_FIXED.exists()
    forwarding_before = Path("/proc/sys/net/ipv4/ip_forward").read_text()
    run = subprocess.Popen([sys.executable, "-c", KILLED_RUN], stdout=subprocess.PIPE, text=True)
    try:
        assert run.stdout is not None
        plane_folder, folder, bridge, socket = run.stdout.readline().split()
    finally:
        run.kill()
        run.wait()
    shutil.rmtree(plane_folder, ignore_errors=True)  # the control plane's own temporary folder: not ours to sweep
    time.sleep(1.0)  # the kernel delivers the parent-death signals
    assert host.shim_processes({socket}), "the shim outlived its containerd"
    assert host.mounts_under(Path(folder))
    containers = host.container_ids([Path(folder) / "dl2-killed-0" / "state"])
    assert containers, "the pod's sandbox and container"

    assert Path(folder) in host.sweep_stale()
    assert not [c for c in containers for h in host.CGROUPS.glob(f"*/{host.CONTAINERD_CGROUP}/{c}")]
    assert KUBELET_FIXED.exists() == kubelet_fixed_before
    assert Path("/proc/sys/net/ipv4/ip_forward").read_text() == forwarding_before, "the host's forwarding as it was"
    assert not host.shim_processes({socket})
    assert not host.mounts_under(Path(folder))
    assert not Path("/sys/class/net", bridge).exists()
    assert not Path(folder).exists()


def test_dl2_cluster_starts_real_nodes_and_takes_them_back_on_sigint(tmp_path: Path) -> None:
    """`dl2 cluster --real-nodes 1 --training-operator`: the Node is Ready once the first line is printed, a pod
    runs there and its log reads through kubectl, and the training operator makes a PyTorchJob's pod, which runs
    there too; SIGINT stops the command (exit 0) and the node is gone with all it made."""
    kubeconfig = tmp_path / "admin.kubeconfig"
    command = [sys.executable, "-m", "dl2.cli.main", "cluster", "--real-nodes", "1", "--training-operator"]
    command += ["--kubeconfig", str(kubeconfig)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stderr is not None
        line = process.stdout.readline()
        assert line, process.communicate(timeout=60)[1]
        started = json.loads(line)
        [node] = started["real_nodes"]
        assert node["name"] == "dl2-real-0" and Path(node["containerd"]).is_socket()
        address, port = started["kubernetes_service"].split(":")
        assert ipaddress.ip_address(address) in ipaddress.ip_network("10.0.0.0/16") and port == "443"
        assert started["training_operator"] is True
        kubectl = [str(assets.require() / "kubectl"), f"--kubeconfig={kubeconfig}"]
        ready = json.loads(_run([*kubectl, "get", "node", node["name"], "-o", "json"]))
        assert {c["type"]: c["status"] for c in ready["status"]["conditions"]}["Ready"] == "True"
        addresses = {a["type"]: a["address"] for a in ready["status"]["addresses"]}
        assert addresses["InternalIP"] == node["address"]
        pod = {"apiVersion": "v1", "kind": "Pod", **_hello("from-cli", {"nodeName": node["name"]})}
        pod["metadata"]["namespace"] = "default"
        _run([*kubectl, "create", "-f", "-"], json.dumps(pod))
        _run([*kubectl, "wait", "pod/from-cli", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=60s"])
        assert _run([*kubectl, "logs", "from-cli"]) == f"hello from {node['name']} from-cli\n"
        container = {**_hello("job", {})["spec"]["containers"][0], "name": "pytorch", "args": ["job"]}
        template = {"spec": {"nodeName": node["name"], "containers": [container]}}
        worker = {"replicas": 1, "restartPolicy": "Never", "template": template}
        job = {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "cli-job", "namespace": "default"},
            "spec": {"pytorchReplicaSpecs": {"Worker": worker}},
        }
        _run([*kubectl, "create", "-f", "-"], json.dumps(job))
        deadline = time.monotonic() + 90
        phase = ""
        while phase != "Succeeded" and time.monotonic() < deadline:
            time.sleep(1)
            got = [*kubectl, "get", "pod", "cli-job-worker-0", "-o", "jsonpath={.status.phase}", "--ignore-not-found"]
            phase = _run(got)
        assert phase == "Succeeded", "the operator's pod did not run"
        assert _run([*kubectl, "logs", "cli-job-worker-0"]) == f"hello from {node['name']} job\n"
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert not Path(node["folder"]).exists() and not Path(node["containerd"]).exists()
    assert not host.shim_processes({node["containerd"]})


def _run(command: list[str], stdin: str | None = None) -> str:
    """The command's output (AssertionError with its stderr if it fails)."""
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0, f"{' '.join(command[1:])}: {done.stderr}"
    return done.stdout
