"""Container images built here, without a registry or a container engine: a static binary packed as an OCI image
archive (`oci-layout`, `index.json`, content-addressed blobs) that `ctr images import` takes.

No container registry is reachable from these machines, and there is no Docker; an image `FROM scratch` holding one
static Go binary is a single uncompressed layer, a config and a manifest, which the standard library writes in
milliseconds. The archive is deterministic (fixed times, owners and order): the same binary gives the same digest.

    archive = oci_archive(Path("pause"), "dl2.local/pause:1", Path("pause.oci.tar"))
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar"
REFERENCE = re.compile(r"^[a-z0-9.-]+\.[a-z0-9-]+(?::[0-9]+)?(?:/[a-z0-9._-]+)+:\w[\w.-]{0,127}$")
"""A fully qualified `host/path:tag` (containerd stores an image by the full name, and the kubelet asks for it by
the same one; a bare `pause:1` would be normalised to docker.io/library/pause:1)."""
ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64"}


@dataclass(frozen=True, slots=True)
class Blob:
    """One content-addressed piece of the image: its bytes and its OCI descriptor."""

    media_type: str
    data: bytes

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.data).hexdigest()

    def descriptor(self, **extra: Any) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": len(self.data), **extra}


def architecture() -> str:
    """This machine's architecture as OCI names it (the image holds a binary built here, for here)."""
    machine = platform.machine()
    if machine not in ARCHITECTURES:
        raise ValueError(f"no OCI architecture known for machine {machine!r}")
    return ARCHITECTURES[machine]


def _tar_member(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime, info.uid, info.gid = len(data), mode, 0, 0, 0
    tar.addfile(info, io.BytesIO(data))


def _layer(binary: Path) -> Blob:
    """The root filesystem: the binary at `/<its name>`, executable, owned by root."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _tar_member(tar, binary.name, binary.read_bytes(), 0o755)
    return Blob(LAYER, data.getvalue())


def _json(media_type: str, value: dict[str, Any]) -> Blob:
    return Blob(media_type, json.dumps(value, sort_keys=True, separators=(",", ":")).encode())


def oci_archive(binary: Path, reference: str, archive: Path, entrypoint: list[str] | None = None) -> Path:
    """Write `archive`: an image named `reference` (`host/path:tag`) whose filesystem is `binary` alone and whose
    entrypoint is `entrypoint` (default: the binary). ValueError for a reference containerd would not keep as
    given; FileNotFoundError if the binary is missing."""
    if not REFERENCE.match(reference):
        raise ValueError(f"image reference {reference!r} is not a fully qualified host/path:tag")
    if not binary.is_file():
        raise FileNotFoundError(f"no binary at {binary} to pack into {reference}")
    layer = _layer(binary)
    arch = architecture()
    config = _json(
        CONFIG,
        {
            "architecture": arch,
            "os": "linux",
            "config": {"Entrypoint": entrypoint or [f"/{binary.name}"], "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [layer.digest]},  # uncompressed: the layer is its own diff
            "history": [{"created_by": f"testbed.controlplane.images: {binary.name}"}],
        },
    )
    manifest = _json(
        MANIFEST,
        {"schemaVersion": 2, "mediaType": MANIFEST, "config": config.descriptor(), "layers": [layer.descriptor()]},
    )
    tag = reference.rsplit(":", 1)[1]
    # containerd's import names the image by `io.containerd.image.name`; the OCI tag annotation is there for
    # other readers of the archive (podman, skopeo)
    annotations = {"io.containerd.image.name": reference, "org.opencontainers.image.ref.name": tag}
    index = {
        "schemaVersion": 2,
        "manifests": [manifest.descriptor(platform={"architecture": arch, "os": "linux"}, annotations=annotations)],
    }
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _tar_member(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}', 0o644)
        _tar_member(tar, "index.json", json.dumps(index, sort_keys=True).encode(), 0o644)
        for blob in (layer, config, manifest):
            _tar_member(tar, f"blobs/sha256/{blob.digest.removeprefix('sha256:')}", blob.data, 0o644)
    return archive
