"""The pieces of real nodes that need no node: OCI archives of a static binary (what `ctr images import` reads),
the arguments `RealNodes` refuses, the pod network's configuration, and mountinfo's escapes."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import tarfile
from pathlib import Path

import pytest

from testbed.controlplane.nodes import config, host, images, layout


def _binary(tmp_path: Path) -> Path:
    binary = tmp_path / "hello"
    binary.write_bytes(b"\x7fELF not really, but bytes all the same")
    return binary


def _members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_an_oci_archive_is_content_addressed_and_names_its_image(tmp_path: Path) -> None:
    archive = images.oci_archive(_binary(tmp_path), "dl2.local/hello:1", tmp_path / "hello.tar")
    members = _members(archive)
    for name, data in members.items():
        if name.startswith("blobs/sha256/"):
            assert name.removeprefix("blobs/sha256/") == hashlib.sha256(data).hexdigest()
    index = json.loads(members["index.json"])
    (descriptor,) = index["manifests"]
    assert descriptor["annotations"]["io.containerd.image.name"] == "dl2.local/hello:1"
    assert descriptor["platform"] == {"architecture": images.architecture(), "os": "linux"}
    manifest = json.loads(members[f"blobs/sha256/{descriptor['digest'].removeprefix('sha256:')}"])
    blob = members[f"blobs/sha256/{manifest['config']['digest'].removeprefix('sha256:')}"]
    image_config = json.loads(blob)
    assert image_config["config"]["Entrypoint"] == ["/hello"]
    (layer,) = manifest["layers"]
    assert image_config["rootfs"]["diff_ids"] == [layer["digest"]], "an uncompressed layer is its own diff"
    with tarfile.open(tmp_path / "hello.tar") as outer:
        layer_file = outer.extractfile(f"blobs/sha256/{layer['digest'].removeprefix('sha256:')}")
        assert layer_file is not None
        with tarfile.open(fileobj=layer_file) as rootfs:
            (member,) = rootfs.getmembers()
    assert (member.name, member.mode, member.uid, member.mtime) == ("hello", 0o755, 0, 0)


def test_the_same_binary_gives_the_same_archive(tmp_path: Path) -> None:
    binary = _binary(tmp_path)
    first = images.oci_archive(binary, "dl2.local/hello:1", tmp_path / "a.tar").read_bytes()
    assert images.oci_archive(binary, "dl2.local/hello:1", tmp_path / "b.tar").read_bytes() == first


@pytest.mark.parametrize("reference", ["hello:1", "hello", "dl2.local/hello", "docker.io/Hello:1", ""])
def test_a_reference_containerd_would_rename_is_refused(tmp_path: Path, reference: str) -> None:
    with pytest.raises(ValueError, match="not a fully qualified host/path:tag"):
        images.oci_archive(_binary(tmp_path), reference, tmp_path / "x.tar")


def test_a_missing_binary_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no binary at"):
        images.oci_archive(tmp_path / "absent", "dl2.local/absent:1", tmp_path / "x.tar")


@pytest.mark.parametrize(
    ("count", "prefix", "folder", "message"),
    [
        (0, "dl2-real", None, "count must be at least 1"),
        (17, "dl2-real", None, "at most 16"),
        (2, "Real_Nodes", None, "not a valid node name prefix"),
        (2, "-real", None, "not a valid node name prefix"),
        (2, "dl2-real", Path("/tmp") / ("x" * 60), "longer than 48 characters"),
    ],
)
def test_arguments_real_nodes_cannot_run_with_are_refused(
    count: int, prefix: str, folder: Path | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        layout.check_arguments(count, prefix, folder)


def test_pods_get_addresses_of_their_nodes_subnet_on_one_link_and_the_host_is_left_alone() -> None:
    network = ipaddress.IPv4Network("10.79.32.0/20")
    node = layout.NodeLayout(
        "dl2-real-1", Path("/tmp/n/dl2-real-1"), network, ipaddress.IPv4Network("10.79.33.0/24"), "dl2-abcdef", 1, 2
    )
    bridge, loopback = config.cni_configuration(node)["plugins"]
    assert bridge["bridge"] == "dl2-abcdef"
    assert (bridge["isGateway"], bridge["ipMasq"]) == (False, False), "no ip_forward, no iptables rules"
    (only,) = bridge["ipam"]["ranges"]
    assert only == [
        {"subnet": "10.79.32.0/20", "rangeStart": "10.79.33.2", "rangeEnd": "10.79.33.254", "gateway": "10.79.32.1"}
    ]
    assert (node.address, node.gateway) == ("10.79.33.1", "10.79.32.1")
    assert loopback == {"type": "loopback"}
    kubelet = config.kubelet_configuration(node, Path("/tmp/ca.crt"))
    assert (kubelet["address"], kubelet["failCgroupV1"], kubelet["cgroupsPerQOS"]) == ("10.79.33.1", False, False)
    assert kubelet["authentication"]["anonymous"] == {"enabled": False}
    assert kubelet["makeIPTablesUtilChains"] is False
    assert "restrict_oom_score_adj = true" in config.containerd_configuration(node)


def test_a_pod_network_no_route_overlaps_is_chosen() -> None:
    candidates = list(layout.POD_NETWORKS.subnets(new_prefix=layout.POD_NETWORK_PREFIX))
    chosen = host.free_network(candidates)
    assert chosen in candidates
    with pytest.raises(RuntimeError, match="no free pod network"):
        host.free_network([ipaddress.IPv4Network("127.0.0.0/24")])  # loopback's, in every machine's local table


def test_mountinfo_escapes_are_read_back() -> None:
    assert host._unescape("/tmp/a\\040b\\134c") == "/tmp/a b\\c"
