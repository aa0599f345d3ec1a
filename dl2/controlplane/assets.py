"""The control plane's binaries: where they are, and building them when they are missing.

They are built from Go modules pinned by `tools/kube/*/go.mod` (k8s.io/kubernetes through a wrapper module whose
`replace` lines pin the staging modules; go.etcd.io/etcd/server/v3; sigs.k8s.io/kwok) by `tools/kube/build.sh`, into
a cache named after a digest of those files, so that a changed pin builds anew and an unchanged one is reused by
every clone on the machine (as envtest keeps its binaries per version under the user's data folder):
`$DL2_KUBE_ASSETS` if set, else `$XDG_CACHE_HOME/dl2/kube-assets/<digest>` (`~/.cache/...`).

    python -m dl2.controlplane.assets            # the folder (built if missing: about 10 minutes on 2 cores)
    python -m dl2.controlplane.assets --check    # exit 1 if it is not built
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from dl2.paths import REPO_ROOT

TOOLS = REPO_ROOT / "tools" / "kube"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok")
KWOK_STAGES = "kwok-stages.yaml"
"""kwok's stages (what it does to nodes and pods), taken from its module at the pinned version."""
ENV = "DL2_KUBE_ASSETS"


class AssetsMissing(RuntimeError):
    """The binaries are not built (the message says how to build them)."""


def digest() -> str:
    """Of the build script and every pin: what the binaries are built from."""
    files = sorted([TOOLS / "build.sh", *TOOLS.glob("*/go.mod"), *TOOLS.glob("*/go.sum")])
    hasher = hashlib.sha256()
    for path in files:
        hasher.update(path.relative_to(TOOLS).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return hasher.hexdigest()[:16]


def folder() -> Path:
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "dl2" / "kube-assets" / digest()


def missing(where: Path | None = None) -> list[str]:
    where = where or folder()
    absent = [name for name in BINARIES if not os.access(where / name, os.X_OK)]
    return absent + ([] if (where / KWOK_STAGES).is_file() else [KWOK_STAGES])


def require() -> Path:
    """The folder holding every binary; `AssetsMissing` if one is not there."""
    where = folder()
    absent = missing(where)
    if absent:
        raise AssetsMissing(
            f"the Kubernetes control plane is not built ({', '.join(absent)} missing in {where}): "
            "run `make kube-assets`"
        )
    return where


def kubectl() -> str:
    """The kubectl of the control plane's release (no version skew), or the one on PATH if it is not built."""
    built = folder() / "kubectl"
    return str(built) if os.access(built, os.X_OK) else (shutil.which("kubectl") or "kubectl")


def build(where: Path | None = None) -> Path:
    """Build what is missing (every binary, when one is), with Go from PATH."""
    where = where or folder()
    if not missing(where):
        return where
    if shutil.which("go") is None:
        raise AssetsMissing("building the control plane needs Go (https://go.dev/dl/) on PATH")
    started = time.monotonic()
    print(f"building the Kubernetes control plane into {where} (about 10 minutes the first time)", file=sys.stderr)
    subprocess.run([str(TOOLS / "build.sh"), str(where)], check=True)
    print(f"built in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return where


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dl2.controlplane.assets", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether the binaries are built (exit 1 if not)")
    args = parser.parse_args(argv)
    if args.check:
        absent = missing()
        print(folder() if not absent else f"missing in {folder()}: {', '.join(absent)}")
        return 1 if absent else 0
    try:
        print(build())
    except (AssetsMissing, subprocess.CalledProcessError) as error:
        print(f"dl2: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
