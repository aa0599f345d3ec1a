"""`RealNodes`: start real nodes on a running control plane, and take everything they made back on stop."""

from __future__ import annotations

import contextlib
import functools
import random
import shutil
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from testbed.controlplane import assets
from testbed.controlplane.cluster import ADMIN, ControlPlane
from testbed.controlplane.nodes import host, images
from testbed.controlplane.nodes.config import (
    cni_configuration,
    containerd_configuration,
    kubeconfig,
    kubelet_configuration,
    to_json,
)
from testbed.controlplane.nodes.layout import (
    HELLO_IMAGE,
    NODE_LABEL,
    PAUSE_IMAGE,
    POD_NETWORK_PREFIX,
    POD_NETWORKS,
    NodeLayout,
    check_arguments,
    require,
)
from testbed.controlplane.pki import CertificateAuthority
from testbed.controlplane.processes import Component, free_port, wait_until

BINDING = "dl2-real-nodes"
"""The ClusterRoleBinding of `system:node` to `system:nodes`."""
KUBELET_FIXED = Path("/var/lib/kubelet")
"""The one folder a kubelet makes outside its root directory: its device-plugin socket's
(`/var/lib/kubelet/device-plugins/`, fixed in the kubelet). Removed on stop if it was not there before: real
nodes of another run alongside lose their device-plugin sockets, which nothing here uses."""


class RealNodes:
    """`count` real nodes joined to `plane`; a context manager (`start()`, `stop()`)."""

    def __init__(
        self, plane: ControlPlane, count: int = 2, *, prefix: str = "dl2-real", folder: Path | None = None
    ) -> None:
        """`folder` holds everything the nodes make (a temporary one under /tmp when None); removed on stop."""
        check_arguments(count, prefix, folder)
        self.plane = plane
        self.count = count
        self.prefix = prefix
        self._owned = folder is None
        self.folder = folder or Path(tempfile.mkdtemp(prefix="dl2-nodes-", dir="/tmp"))
        self.nodes: list[NodeLayout] = []
        self.components: list[Component] = []
        self._rest: Any = None
        self._made_kubelet_fixed = False
        self._container_ids: set[str] = set()
        self._made_binding = False

    @property
    def names(self) -> list[str]:
        return [node.name for node in self.nodes]

    # -- starting ---------------------------------------------------------------------------------------------

    def start(self, timeout_s: float = 120.0) -> RealNodes:
        """Start every node and wait until each Node is Ready; on any failure everything started is stopped.
        First, what earlier runs whose process was killed left on the machine is swept (`host.sweep_stale`)."""
        require()
        try:
            self._start(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout_s: float) -> None:
        from dl2.kube.rest import Rest

        host.sweep_stale()
        self.folder.mkdir(parents=True, exist_ok=True)
        self._made_kubelet_fixed = not KUBELET_FIXED.exists()
        self._rest = Rest(self.plane.admin_client())
        self._made_binding = _bind_node_role(self._rest)
        network = host.free_network(list(POD_NETWORKS.subnets(new_prefix=POD_NETWORK_PREFIX)))
        subnets = list(network.subnets(new_prefix=24))[: self.count]
        bridge = "dl2-" + "".join(random.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=6))
        self.nodes = [
            NodeLayout(
                name=f"{self.prefix}-{index}",
                folder=self.folder / f"{self.prefix}-{index}",
                network=network,
                subnet=subnet,
                bridge=bridge,
                kubelet_port=free_port(),
                healthz_port=free_port(),
            )
            for index, subnet in enumerate(subnets)
        ]
        host.write_run_record(self.folder, self.nodes, [KUBELET_FIXED] if self._made_kubelet_fixed else [])
        binaries = assets.PAUSE.folder()
        archives = self.folder / "images"
        pause = images.oci_archive(binaries / "pause", PAUSE_IMAGE, archives / "pause.oci.tar")
        hello = images.oci_archive(binaries / "hello", HELLO_IMAGE, archives / "hello.oci.tar")
        host.create_bridge(self.nodes)
        for node in self.nodes:
            self._start_containerd(node)
        deadline = time.monotonic() + timeout_s
        for node in self.nodes:
            self._wait_containerd(node, max(1.0, deadline - time.monotonic()))
            for archive in (pause, hello):
                self._ctr(node, "images", "import", str(archive))
            self._start_kubelet(node)
        for node in self.nodes:
            wait_until(
                functools.partial(self._ready, node.name),
                max(1.0, deadline - time.monotonic()),
                f"Node {node.name} Ready",
                self.components,
                poll_s=0.5,
            )
            self._set_pod_cidr(node)

    def _set_pod_cidr(self, node: NodeLayout) -> None:
        """The Node's spec says its pods' subnet, as the node IPAM controller would have written it (this
        controller-manager allocates none): what a reader of the Node, and the kubelet, see is what CNI gives."""
        from dl2.kube.rest import NODES

        subnet = str(node.subnet)
        self._rest.merge_patch(NODES, None, node.name, {"spec": {"podCIDR": subnet, "podCIDRs": [subnet]}})

    def _start_containerd(self, node: NodeLayout) -> None:
        node.folder.mkdir(parents=True)
        node.cni_conf.mkdir(parents=True)
        (node.cni_conf / "10-dl2.conflist").write_text(to_json(cni_configuration(node)))
        config = node.folder / "containerd.toml"
        config.write_text(containerd_configuration(node))
        containerd = Component(
            f"{node.name}-containerd", ["containerd", f"--config={config}", "--log-level=warn"], node.logs
        ).start()
        self.components.append(containerd)

    def _wait_containerd(self, node: NodeLayout, timeout_s: float) -> None:
        watched = [c for c in self.components if c.name == f"{node.name}-containerd"]

        def answers() -> bool:
            return node.socket.exists() and self._ctr(node, "version", check=False).returncode == 0

        wait_until(answers, timeout_s, f"containerd of {node.name}", watched, poll_s=0.2)

    def _start_kubelet(self, node: NodeLayout) -> None:
        authority = CertificateAuthority.load(self.plane.pki)
        credentials = authority.issue(
            "client", f"system:node:{node.name}", ("system:nodes",), folder=node.folder / "pki"
        )
        access = node.folder / "kubelet.kubeconfig"
        access.write_text(yaml.safe_dump(kubeconfig(self.plane.url, self.plane.ca, credentials), sort_keys=False))
        access.chmod(0o600)
        config = node.folder / "kubelet.config.yaml"
        config.write_text(yaml.safe_dump(kubelet_configuration(node, self.plane.ca), sort_keys=False))
        kubelet = Component(
            f"{node.name}-kubelet",
            [
                str(assets.KUBELET.path()),
                f"--config={config}",
                f"--kubeconfig={access}",
                f"--root-dir={node.kubelet_root}",
                # its serving certificate under its own root (the default is /var/lib/kubelet/pki, shared)
                f"--cert-dir={node.kubelet_root / 'pki'}",
                f"--hostname-override={node.name}",
                f"--node-ip={node.address}",
                f"--node-labels={NODE_LABEL}=true",
                "--v=1",
            ],
            node.logs,
        ).start()
        self.components.append(kubelet)

    def _ready(self, name: str) -> bool:
        from kubernetes.client.exceptions import ApiException

        from dl2.kube.rest import NODES

        try:
            node = self._rest.get(NODES, None, name)
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        conditions = (node.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    # -- using ------------------------------------------------------------------------------------------------

    def import_image(self, binary: Path, reference: str, entrypoint: list[str] | None = None) -> None:
        """Pack a static binary as the image `reference` (`host/path:tag`) and import it into every node's
        containerd; a pod runs it with `imagePullPolicy: Never` (or IfNotPresent): there is no registry."""
        archive = images.oci_archive(binary, reference, self.folder / "images" / f"{binary.name}.oci.tar", entrypoint)
        for node in self.nodes:
            self._ctr(node, "images", "import", str(archive))

    def import_archive(self, archive: Path, timeout_s: float = 900.0) -> None:
        """Import an OCI archive (`python -m testbed.controlplane.image --export` writes the dl2 image's) into every
        node's containerd, under the name its index gives; a pod runs it with `imagePullPolicy: Never`."""
        for node in self.nodes:
            self._ctr(node, "images", "import", str(archive), timeout_s=timeout_s)

    def node(self, name: str) -> NodeLayout:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no real node named {name!r} (there are {', '.join(self.names)})")

    def kubelet_context(self, name: str) -> ssl.SSLContext:
        """A TLS context for the kubelet's own API (`https://<address>:<port>/...`): it trusts the kubelet's
        self-signed serving certificate and presents the control plane's admin certificate."""
        node = self.node(name)
        context = ssl.create_default_context(cafile=str(node.kubelet_root / "pki" / "kubelet.crt"))
        context.check_hostname = False  # the self-signed certificate names the node, not its address
        admin = self.plane.users[ADMIN]
        context.load_cert_chain(str(admin.cert), str(admin.key))
        return context

    def check(self) -> None:
        """RuntimeError if a containerd or kubelet has exited."""
        for component in self.components:
            component.check()

    def _ctr(
        self, node: NodeLayout, *args: str, check: bool = True, timeout_s: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        command = ["ctr", f"--address={node.socket}", "--namespace=k8s.io", *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")
        return done

    # -- stopping ---------------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop and remove everything the nodes made; each step runs even if one before it failed."""
        steps = [
            self._delete_pods,
            self._stop_kubelets,
            self._kill_tasks,
            self._stop_all,
            self._kill_shims,
            self._unmount,
            self._remove_cgroups,
            self._delete_bridges,
            self._delete_api_objects,
            self._remove_files,
        ]
        errors = []
        for step in steps:
            try:
                step()
            except Exception as error:  # clean up the rest regardless; reported below
                errors.append(f"{step.__name__}: {error}")
        self.components.clear()
        if errors:
            raise RuntimeError("real nodes: cleanup incomplete: " + "; ".join(errors))

    def __enter__(self) -> RealNodes:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _delete_pods(self, timeout_s: float = 30.0) -> None:
        """Pods on these nodes, deleted through the API while the kubelets still run: each kubelet stops its
        containers and sandboxes (network torn down through CNI) as it would in a cluster."""
        from dl2.kube.rest import PODS

        if self._rest is None or not self.nodes or not self._kubelets_running():
            return
        pods = list(pods_on(self._rest, self.names))
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 1}
        for pod in pods:
            with contextlib.suppress(Exception):
                self._rest.request("DELETE", PODS.path(pod["metadata"]["namespace"], pod["metadata"]["name"]), body)
        if pods:
            with contextlib.suppress(TimeoutError):
                wait_until(self._no_sandboxes, timeout_s, "the kubelets stopping their pods", poll_s=0.5)

    def _kubelets_running(self) -> bool:
        return any(c.running for c in self.components if c.name.endswith("-kubelet"))

    def _no_sandboxes(self) -> bool:
        return all(not self._tasks(node) for node in self.nodes)

    def tasks(self, name: str) -> list[str]:
        """The ids of the containerd tasks (pod sandboxes and containers) running on node `name`."""
        return self._tasks(self.node(name))

    def _tasks(self, node: NodeLayout) -> list[str]:
        if not node.socket.exists():
            return []
        listed = self._ctr(node, "tasks", "list", "--quiet", check=False)
        return listed.stdout.split() if listed.returncode == 0 else []

    def _stop_kubelets(self) -> None:
        for component in self.components:
            if component.name.endswith("-kubelet"):
                component.stop()

    def _kill_tasks(self) -> None:
        """What the kubelets left running (a stopped kubelet leaves its pods): killed, deleted with their
        containers, so that runc removes their cgroups and the shims exit."""
        for node in self.nodes:
            for task in self._tasks(node):
                self._ctr(node, "tasks", "kill", "--all", "--signal=SIGKILL", task, check=False)
            deadline = time.monotonic() + 10.0
            for task in self._tasks(node):
                while time.monotonic() < deadline:
                    if self._ctr(node, "tasks", "delete", "--force", task, check=False).returncode == 0:
                        break
                    time.sleep(0.2)
            listed = self._ctr(node, "containers", "list", "--quiet", check=False)
            for container in listed.stdout.split() if listed.returncode == 0 else []:
                self._container_ids.add(container)
                self._ctr(node, "containers", "delete", container, check=False)

    def _stop_all(self) -> None:
        for component in reversed(self.components):
            component.stop()

    def _kill_shims(self) -> None:
        """containerd's shims outlive it by design: those of these nodes' containerd, and what runs under them."""
        host.kill_shims({str(node.socket) for node in self.nodes})

    def _unmount(self) -> None:
        host.unmount_under(self.folder)

    def _remove_cgroups(self) -> None:
        host.remove_cgroups(self._container_ids | host.container_ids(node.state for node in self.nodes))

    def _delete_bridges(self) -> None:
        host.delete_bridges({node.bridge for node in self.nodes})

    def _delete_api_objects(self) -> None:
        """The Nodes (their pods are gone), their Leases, and the binding if this run made it (other real nodes on
        the same control plane may still use one made before): the control plane as it was."""
        from kubernetes.client.exceptions import ApiException

        from dl2.kube.rest import NODES, Resource

        if self._rest is None:
            return
        leases = Resource("coordination.k8s.io", "v1", "leases")
        bindings = Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", namespaced=False)
        deletions: list[tuple[Resource, str | None, str]] = [(NODES, None, node.name) for node in self.nodes]
        deletions += [(leases, "kube-node-lease", node.name) for node in self.nodes]
        deletions += [(bindings, None, BINDING)] if self._made_binding else []
        for resource, namespace, name in deletions:
            try:
                self._rest.delete_now(resource, namespace, name)
            except ApiException as error:
                if error.status != 404:
                    raise

    def _remove_files(self) -> None:
        """The folder (one given by the caller keeps the nodes' logs), and the kubelets' links in
        /var/log/containers to logs under it (that folder is fixed in the kubelet)."""
        host.remove_log_links(self.folder)
        if self._made_kubelet_fixed:
            shutil.rmtree(KUBELET_FIXED, ignore_errors=True)
        if self._owned:
            shutil.rmtree(self.folder, ignore_errors=True)
            return
        for node in self.nodes:
            for child in node.folder.iterdir() if node.folder.is_dir() else []:
                if child != node.logs:
                    shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        shutil.rmtree(self.folder / "images", ignore_errors=True)
        (self.folder / host.RUN_RECORD).unlink(missing_ok=True)


def pods_on(rest: Any, names: Sequence[str]) -> Iterator[dict[str, Any]]:
    """Every pod bound to one of the nodes `names`."""
    from dl2.kube.rest import PODS

    for pod in rest.list(PODS):
        if (pod.get("spec") or {}).get("nodeName") in names:
            yield pod


def _bind_node_role(rest: Any) -> bool:
    """Bind the `system:node` ClusterRole to the group `system:nodes`: the API server authorizes with RBAC only,
    and since 1.8 that role's own binding has no subjects (the Node authorizer took its place). Whether this made
    the binding (False: it was there)."""
    from kubernetes.client.exceptions import ApiException

    from dl2.kube.rest import Resource

    bindings = Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", namespaced=False)
    body = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": BINDING},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}],
    }
    try:
        rest.create(bindings, None, body)
    except ApiException as error:
        if error.status != 409:
            raise
        return False
    return True
