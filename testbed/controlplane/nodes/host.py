"""What real nodes change on the host beyond their folder, and taking it back: bridges, containerd's shims and the
containers under them, mounts, the pods' cgroups, the kubelet's links to container logs; and sweeping what a run
that was killed (so never stopped) left behind, found by the record it keeps in its folder (`run.json`)."""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import json
import os
import random
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from testbed.controlplane.nodes.layout import NodeLayout

MNT_DETACH = 2
CGROUPS = Path("/sys/fs/cgroup")
CONTAINERD_CGROUP = "k8s.io"
"""The cgroup parent containerd gives pods whose kubelet names none (cgroupsPerQOS off): `/k8s.io/<id>` in every
cgroup v1 hierarchy."""
CONTAINER_LOG_LINKS = Path("/var/log/containers")
"""Where every kubelet links its containers' logs (fixed in the kubelet)."""
ROUTE_TYPES = frozenset(
    {"unicast", "local", "broadcast", "multicast", "anycast", "unreachable", "blackhole", "prohibit", "throw"}
)
RUN_RECORD = "run.json"
FOLDER_PREFIX = "dl2-nodes-"
"""Temporary folders of real nodes are `/tmp/dl2-nodes-*` (what a sweep looks at)."""


def free_network(candidates: list[ipaddress.IPv4Network]) -> ipaddress.IPv4Network:
    """One of `candidates`, at random, that no IPv4 route of this machine overlaps (another run's pod network,
    a network of the host's); RuntimeError if none is free."""
    listed = subprocess.run(["ip", "-4", "route", "show", "table", "all"], capture_output=True, text=True, check=True)
    routes = []
    for line in listed.stdout.splitlines():
        words = line.split()
        # `local 10.79.32.1 dev ...`, `broadcast ...`: the route's type comes first, its destination second
        destination = words[1] if len(words) > 1 and words[0] in ROUTE_TYPES else (words or ["default"])[0]
        if destination != "default":
            with contextlib.suppress(ValueError):
                routes.append(ipaddress.IPv4Network(destination, strict=False))
    free = [c for c in candidates if not any(c.overlaps(route) for route in routes)]
    if not free:
        raise RuntimeError(f"no free pod network: every one of {candidates[0]}...{candidates[-1]} is routed already")
    return random.choice(free)


def create_bridge(nodes: list[NodeLayout]) -> None:
    """The nodes' bridge, before their kubelets start: the gateway's address (the first node's) on the pod network,
    each other node's as a /32 (a kubelet's Node IP must be an address of this machine). The CNI bridge plugin
    takes the bridge as it is."""
    bridge, network = nodes[0].bridge, nodes[0].network
    if Path("/sys/class/net", bridge).exists():
        raise RuntimeError(f"a network interface {bridge} already exists")
    commands = [
        ["ip", "link", "add", "name", bridge, "type", "bridge"],
        ["ip", "addr", "add", f"{nodes[0].gateway}/{network.prefixlen}", "dev", bridge],
        *(["ip", "addr", "add", f"{node.address}/32", "dev", bridge] for node in nodes if node.address != node.gateway),
        ["ip", "link", "set", bridge, "up"],
    ]
    for command in commands:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()}")


def delete_bridges(names: Iterable[str]) -> None:
    for name in names:
        if Path("/sys/class/net", name).exists():
            subprocess.run(["ip", "link", "delete", name], check=True, capture_output=True)


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # the name in parentheses may hold spaces


def shim_processes(sockets: set[str]) -> list[int]:
    """Process ids of containerd shims whose command line names one of `sockets` (`-address <socket>`)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            arguments = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        named = {argument.decode(errors="replace") for argument in arguments}
        if arguments and b"containerd-shim" in arguments[0] and sockets & named:
            found.append(int(entry.name))
    return found


def kill_shims(sockets: set[str], timeout_s: float = 5.0) -> None:
    """SIGKILL to the shims of `sockets`' containerd and to their children first: a shim outlives containerd by
    design, and each container's first process is its child (killing it ends the container's PID namespace)."""
    shims = shim_processes(sockets)
    killed = [*(pid for pid in _all_pids() if _parent(pid) in shims), *shims]
    for pid in killed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    # until they are reaped: a cgroup that still holds a dying process cannot be removed
    deadline = time.monotonic() + timeout_s
    while any(Path(f"/proc/{pid}").exists() for pid in killed) and time.monotonic() < deadline:
        time.sleep(0.05)


def _all_pids() -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def mounts_under(folder: Path) -> list[str]:
    """Mount points at or under `folder`, latest first (so a mount inside another goes before it)."""
    prefix = str(folder.resolve())
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = _unescape(line.split()[4])
        if point == prefix or point.startswith(prefix + "/"):
            points.append(point)
    return list(reversed(points))


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    for code in ("\\040", "\\011", "\\012", "\\134"):
        field = field.replace(code, chr(int(code[1:], 8)))
    return field


def unmount_under(folder: Path) -> None:
    """Root filesystems, shm, network namespaces, the kubelet's own bind mount and pod volumes under `folder`
    (detached: a mount still busy goes when its last user does)."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    for mount in mounts_under(folder):
        if libc.umount2(mount.encode(), MNT_DETACH) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"umount {mount}: {os.strerror(error)}")


def remove_cgroups(container_ids: set[str]) -> None:
    """The containers' cgroups runc left (none, when every task was deleted) and their empty parent: rmdir only,
    so a cgroup another containerd still uses stays."""
    for hierarchy in CGROUPS.iterdir() if CGROUPS.is_dir() else []:
        parent = hierarchy / CONTAINERD_CGROUP
        if not parent.is_dir():
            continue
        for cgroup in [*(parent / name for name in sorted(container_ids)), parent]:
            with contextlib.suppress(OSError):  # absent, busy, or not empty: another containerd's
                cgroup.rmdir()


def remove_log_links(folder: Path) -> None:
    """The kubelet's links in /var/log/containers to logs under `folder`."""
    for link in CONTAINER_LOG_LINKS.glob("*.log") if CONTAINER_LOG_LINKS.is_dir() else []:
        if link.is_symlink() and os.readlink(link).startswith(str(folder) + "/"):
            link.unlink()


def container_ids(states: Iterable[Path]) -> set[str]:
    """Containers that containerd with these state folders ran, by their task folders (what is left of them after
    a kill)."""
    tasks = [state / "io.containerd.runtime.v2.task" / "k8s.io" for state in states]
    return {entry.name for folder in tasks if folder.is_dir() for entry in folder.iterdir()}


def write_run_record(folder: Path, nodes: list[NodeLayout], made: list[Path]) -> None:
    """Who runs these nodes, and what of the host they hold (`made`: folders outside `folder` it created): what a
    later sweep needs if this process is killed."""
    record = {
        "pid": os.getpid(),
        "made": [str(path) for path in made],
        "nodes": [
            {"folder": str(n.folder), "bridge": n.bridge, "socket": str(n.socket), "state": str(n.state)} for n in nodes
        ],
    }
    (folder / RUN_RECORD).write_text(json.dumps(record, indent=2))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale(parent: Path = Path("/tmp")) -> list[Path]:
    """Take back what runs whose process is gone left (their folders `parent/dl2-nodes-*`, with a run record):
    shims and containers killed, mounts, cgroups, bridges and log links removed, the folder deleted. A folder
    without a record (a run starting right now) or whose process lives is left alone. The folders swept."""
    swept = []
    for folder in sorted(parent.glob(f"{FOLDER_PREFIX}*")):
        record_path = folder / RUN_RECORD
        try:
            record = json.loads(record_path.read_text())
        except (OSError, ValueError):
            continue
        if _alive(int(record["pid"])):
            continue
        nodes = record["nodes"]
        kill_shims({node["socket"] for node in nodes})
        unmount_under(folder)
        remove_cgroups(container_ids(Path(node["state"]) for node in nodes))
        delete_bridges({node["bridge"] for node in nodes})
        remove_log_links(folder)
        for made in record.get("made", []):
            shutil.rmtree(made, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)
        swept.append(folder)
    return swept
