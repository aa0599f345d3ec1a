"""What real nodes need from this machine, and where each node keeps its things (`NodeLayout`)."""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from testbed.controlplane import assets

SYSTEM_BINARIES = ("containerd", "ctr", "runc", "ip")
"""Debian's containerd and runc (`make real-nodes` installs them), and iproute2 for the bridges."""
CNI_BIN = Path("/usr/lib/cni")
"""Where Debian's containernetworking-plugins puts the plugins."""
CNI_PLUGINS = ("bridge", "host-local", "loopback")
PAUSE_IMAGE = "dl2.local/pause:1"
"""The sandbox image containerd is configured with (built here: `tools/pause`)."""
HELLO_IMAGE = "dl2.local/hello:1"
"""A container that prints one line naming its node (`hello [words]`), serves it (`hello serve PORT`) or gets it
from another pod (`hello get HOST:PORT`): `tools/pause/hello`, for checking nodes and their pod network."""
NODE_LABEL = "dl2.io/real-node"
"""Every real node carries it (`true`), so that a pod can ask for one by nodeSelector."""
POD_NETWORKS = ipaddress.IPv4Network("10.79.0.0/16")
"""A run's pod network is a /20 of it (`POD_NETWORK_PREFIX`) that no route of this machine overlaps, each node's
pods a /24 of that: inside the control plane's pod range (10.64.0.0/12), apart from the addresses kwok gives the
pods of fake nodes (from the bottom of the range)."""
POD_NETWORK_PREFIX = 20
NAME_PREFIX = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")
"""Nodes are named `<prefix>-<index>`: a DNS label, as a Node's name and its hostname label must be."""
MAX_FOLDER_CHARS = 48
"""Unix socket paths have 108 bytes; the kubelet's deepest (`<folder>/<node>/kubelet/plugins_registry/...`) and
containerd's `.ttrpc` socket fit under this."""
MAX_NODES = 16
"""A /24 each in the run's /20."""


class NodesUnavailable(RuntimeError):
    """What real nodes need is missing on this machine (the message says what, and how to get it)."""


def missing() -> list[str]:
    """What real nodes need that this machine lacks, each with how to get it (empty: they can run)."""
    absent = [f"{name} (make real-nodes)" for name in SYSTEM_BINARIES if shutil.which(name) is None]
    absent += [f"{CNI_BIN / name} (make real-nodes)" for name in CNI_PLUGINS if not (CNI_BIN / name).is_file()]
    absent += [f"{name} (make real-nodes)" for tool in (assets.KUBELET, assets.PAUSE) for name in tool.missing()]
    if os.geteuid() != 0:
        absent.append("root (containerd, mounts and network namespaces need it)")
    return absent


def require() -> None:
    """NodesUnavailable naming everything missing."""
    absent = missing()
    if absent:
        raise NodesUnavailable("real nodes cannot run here, missing: " + "; ".join(absent))


def check_arguments(count: int, prefix: str, folder: Path | None) -> None:
    """ValueError, saying what is wrong, for arguments real nodes cannot run with."""
    if not 1 <= count <= MAX_NODES:
        raise ValueError(f"real nodes: count must be at least 1 and at most {MAX_NODES}, got {count}")
    if not NAME_PREFIX.match(prefix):
        raise ValueError(
            f"real nodes: {prefix!r} is not a valid node name prefix (lower-case letters, digits and '-', "
            "starting with a letter, at most 40 characters)"
        )
    if folder is not None and len(str(folder.resolve())) > MAX_FOLDER_CHARS:
        raise ValueError(
            f"real nodes: folder {folder} is longer than {MAX_FOLDER_CHARS} characters; unix sockets under it "
            "would not fit (leave folder=None for a short temporary one)"
        )


@dataclass(frozen=True, slots=True)
class NodeLayout:
    """One node's name, folders and addresses: everything it makes is under `folder`."""

    name: str
    folder: Path
    network: ipaddress.IPv4Network
    """The run's pod network, one link for every node's pods (its first address is their gateway)."""
    subnet: ipaddress.IPv4Network
    """This node's pods' addresses, in `network`; the first is the Node's InternalIP, on the bridge."""
    bridge: str
    """The Linux bridge every node's pods' veths join (at most 15 characters)."""
    kubelet_port: int
    healthz_port: int

    @property
    def address(self) -> str:
        return str(next(self.subnet.hosts()))

    @property
    def gateway(self) -> str:
        return str(next(self.network.hosts()))

    @property
    def socket(self) -> Path:
        return self.folder / "containerd.sock"

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"

    @property
    def state(self) -> Path:
        return self.folder / "state"

    @property
    def kubelet_root(self) -> Path:
        return self.folder / "kubelet"

    @property
    def pod_logs(self) -> Path:
        return self.folder / "pod-logs"

    @property
    def cni_conf(self) -> Path:
        return self.folder / "cni" / "net.d"

    @property
    def logs(self) -> Path:
        return self.folder / "logs"
