"""The control plane's binaries: where they are, and building them when they are missing.

They are built from Go modules pinned by `tools/kube/*/go.mod` (k8s.io/kubernetes through a wrapper module whose
`replace` lines pin the staging modules; go.etcd.io/etcd/server/v3; sigs.k8s.io/kwok) by `tools/kube/build.sh`, into
a cache named after a digest of those files, so that a changed pin builds anew and an unchanged one is reused by
every clone on the machine (as envtest keeps its binaries per version under the user's data folder):
`$DL2_KUBE_ASSETS` if set, else `$XDG_CACHE_HOME/dl2/kube-assets/<digest>` (`~/.cache/...`).

    python -m dl2.controlplane.assets            # the folder (built if missing: about 10 minutes on 2 cores)
    python -m dl2.controlplane.assets --check    # exit 1 if it is not built

helm (helm.sh/helm/v4, which lints and renders `k8s/chart/`) is built the same way, from `tools/helm/` into
`$DL2_HELM_ASSETS` or `~/.cache/dl2/helm/<digest of tools/helm>`, apart from the control plane so that a helm pin
never rebuilds it:

    python -m dl2.controlplane.assets --helm     # the folder holding `helm` (built if missing: about 5 minutes)
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
HELM_TOOLS = REPO_ROOT / "tools" / "helm"
HELM_ENV = "DL2_HELM_ASSETS"


class AssetsMissing(RuntimeError):
    """The binaries are not built (the message says how to build them)."""


def _pins_digest(tools: Path, files: list[Path]) -> str:
    """Of each file's path (relative to `tools`) and bytes: what binaries built from them are built from."""
    hasher = hashlib.sha256()
    for path in sorted(files):
        hasher.update(path.relative_to(tools).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return hasher.hexdigest()[:16]


def _cache(kind: str, env: str, pins: str) -> Path:
    if os.environ.get(env):
        return Path(os.environ[env])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "dl2" / kind / pins


def digest() -> str:
    """Of the build script and every pin: what the binaries are built from."""
    return _pins_digest(TOOLS, [TOOLS / "build.sh", *TOOLS.glob("*/go.mod"), *TOOLS.glob("*/go.sum")])


def folder() -> Path:
    return _cache("kube-assets", ENV, digest())


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
    if missing(where):
        _run_build(TOOLS / "build.sh", where, "the Kubernetes control plane", "about 10 minutes")
    return where


def _run_build(script: Path, where: Path, what: str, first_time: str) -> None:
    if shutil.which("go") is None:
        raise AssetsMissing(f"building {what} needs Go (https://go.dev/dl/) on PATH")
    started = time.monotonic()
    print(f"building {what} into {where} ({first_time} the first time)", file=sys.stderr)
    subprocess.run([str(script), str(where)], check=True)
    print(f"built in {time.monotonic() - started:.0f} s", file=sys.stderr)


def helm_digest() -> str:
    """Of helm's build script and pins (`tools/helm/`), which the control plane's digest does not read."""
    return _pins_digest(HELM_TOOLS, [HELM_TOOLS / name for name in ("build.sh", "go.mod", "go.sum")])


def helm_folder() -> Path:
    return _cache("helm", HELM_ENV, helm_digest())


def helm_missing(where: Path | None = None) -> list[str]:
    return [] if os.access((where or helm_folder()) / "helm", os.X_OK) else ["helm"]


def helm() -> str:
    """The pinned helm's path; `AssetsMissing` if it is not built (a helm on PATH is another release: not used)."""
    where = helm_folder()
    if helm_missing(where):
        raise AssetsMissing(f"helm is not built ({where / 'helm'} missing): run `make helm`")
    return str(where / "helm")


def build_helm(where: Path | None = None) -> Path:
    """Build helm if it is missing, with Go from PATH (`GOTOOLCHAIN` fetches a newer Go when the pin needs one)."""
    where = where or helm_folder()
    if helm_missing(where):
        _run_build(HELM_TOOLS / "build.sh", where, "helm", "about 5 minutes")
    return where


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dl2.controlplane.assets", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether the binaries are built (exit 1 if not)")
    parser.add_argument("--helm", action="store_true", help="helm (tools/helm/) instead of the control plane")
    args = parser.parse_args(argv)
    where, absent = (helm_folder(), helm_missing()) if args.helm else (folder(), missing())
    if args.check:
        print(where if not absent else f"missing in {where}: {', '.join(absent)}")
        return 1 if absent else 0
    try:
        print(build_helm() if args.helm else build())
    except (AssetsMissing, subprocess.CalledProcessError) as error:
        print(f"dl2: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
