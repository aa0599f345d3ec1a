"""The control plane's binaries: where they are, and building them when they are missing.

They are built from Go modules pinned by `tools/kube/*/go.mod` (k8s.io/kubernetes through a wrapper module whose
`replace` lines pin the staging modules; go.etcd.io/etcd/server/v3; sigs.k8s.io/kwok) by `tools/kube/build.sh`, into
a cache named after a digest of those files, so that a changed pin builds anew and an unchanged one is reused by
every clone on the machine (as envtest keeps its binaries per version under the user's data folder):
`$DL2_KUBE_ASSETS` if set, else `$XDG_CACHE_HOME/dl2/kube-assets/<digest>` (`~/.cache/...`).

    python -m testbed.controlplane.assets            # the folder (built if missing: about 10 minutes on 2 cores)
    python -m testbed.controlplane.assets --check    # exit 1 if it is not built

helm (helm.sh/helm/v4, which lints and renders `k8s/chart/`), versitygw (an S3 server over a folder: the
object storage that decision records go to in the tests) and prometheus (which scrapes a training job's own
metrics in the tests of progress from metrics) are built the same way, each from `tools/<name>/` into
`$DL2_<NAME>_ASSETS` or `~/.cache/dl2/<name>/<digest of tools/<name>>`, apart from the control plane so that their
pins never rebuild it:

    python -m testbed.controlplane.assets --tool helm        # the folder holding `helm` (built if missing: ~5 minutes)
    python -m testbed.controlplane.assets --tool versitygw   # (about 2 minutes)
    python -m testbed.controlplane.assets --tool prometheus  # (about 7 minutes)

The kubelet of real nodes (`testbed.controlplane.nodes`) is built the same way from `tools/kubelet/`, a copy of the
control plane's k8s.io/kubernetes pins, so that it is the control plane's release and still never rebuilds it:

    python -m testbed.controlplane.assets --tool kubelet     # (~8 minutes on 2 cores; 10-25 s with a warm Go cache)
    python -m testbed.controlplane.assets --tool pause       # pause and hello, static, for the nodes' images
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dl2.paths import REPO_ROOT

TOOLS = REPO_ROOT / "tools" / "kube"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok")
KWOK_STAGES = "kwok-stages.yaml"
"""kwok's stages (what it does to nodes and pods), taken from its module at the pinned version."""
ENV = "DL2_KUBE_ASSETS"


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


@dataclass(frozen=True, slots=True)
class GoTool:
    """One binary the tests and docs need beside the control plane, built from its own pins (`tools/<name>/`:
    build.sh, go.mod, go.sum) into its own cache, so that its pin never rebuilds the control plane."""

    binary: str
    env: str
    first_time: str
    purpose: str
    pins: tuple[str, ...] = ("build.sh", "go.mod", "go.sum")
    """The files under `tools/<binary>/` the build is made from (its sources too, for a tool written here)."""
    others: tuple[str, ...] = ()
    """Binaries the same build makes beside `binary`."""

    @property
    def tools(self) -> Path:
        return REPO_ROOT / "tools" / self.binary

    def digest(self) -> str:
        return _pins_digest(self.tools, [self.tools / name for name in self.pins])

    def folder(self) -> Path:
        return _cache(self.binary, self.env, self.digest())

    def missing(self, where: Path | None = None) -> list[str]:
        where = where or self.folder()
        return [name for name in (self.binary, *self.others) if not os.access(where / name, os.X_OK)]

    def path(self) -> str:
        """The pinned binary's path; `AssetsMissing` if it is not built (one on PATH is another release)."""
        where = self.folder()
        if self.missing(where):
            raise AssetsMissing(f"{self.binary} is not built ({where / self.binary} missing): run `make {self.binary}`")
        return str(where / self.binary)

    def build(self, where: Path | None = None) -> Path:
        """Build it if it is missing, with Go from PATH (`GOTOOLCHAIN` fetches a newer Go when a pin needs one)."""
        where = where or self.folder()
        if self.missing(where):
            _run_build(self.tools / "build.sh", where, self.binary, self.first_time)
        return where


HELM = GoTool("helm", "DL2_HELM_ASSETS", "about 5 minutes", "lints and renders k8s/chart/")
VERSITYGW = GoTool(
    "versitygw", "DL2_VERSITYGW_ASSETS", "about 2 minutes", "an S3 server over a folder, for records in object storage"
)
PROMETHEUS = GoTool(
    "prometheus", "DL2_PROMETHEUS_ASSETS", "about 7 minutes", "scrapes a job's own metrics, for progress from metrics"
)
KUBELET = GoTool(
    "kubelet",
    "DL2_KUBELET_ASSETS",
    "about 8 minutes",
    "the node agent of the control plane's release, for real nodes (testbed.controlplane.nodes)",
)
PAUSE = GoTool(
    "pause",
    "DL2_PAUSE_ASSETS",
    "seconds",
    "the pod sandbox's program and a hello container, images of real nodes (testbed.controlplane.nodes.images)",
    pins=("build.sh", "go.mod", "main.go", "hello/main.go"),
    others=("hello",),
)
TRAINING_OPERATOR = GoTool(
    "training-operator",
    "DL2_TRAINING_OPERATOR_ASSETS",
    "about 4 minutes",
    "Kubeflow's training operator, which runs PyTorchJobs' pods on real nodes (testbed.controlplane.operator)",
)
TOOLS_BY_NAME = {tool.binary: tool for tool in (HELM, VERSITYGW, PROMETHEUS, KUBELET, PAUSE, TRAINING_OPERATOR)}


def helm() -> str:
    """The pinned helm's path; `AssetsMissing` if it is not built."""
    return HELM.path()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.controlplane.assets", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether the binaries are built (exit 1 if not)")
    parser.add_argument(
        "--tool",
        choices=sorted(TOOLS_BY_NAME),
        help="one of the other binaries (tools/<name>/) instead of the control plane: "
        + "; ".join(f"{tool.binary}: {tool.purpose}" for tool in TOOLS_BY_NAME.values()),
    )
    args = parser.parse_args(argv)
    tool = TOOLS_BY_NAME.get(args.tool or "")
    where, absent = (tool.folder(), tool.missing()) if tool else (folder(), missing())
    if args.check:
        print(where if not absent else f"missing in {where}: {', '.join(absent)}")
        return 1 if absent else 0
    try:
        print(tool.build() if tool else build())
    except (AssetsMissing, subprocess.CalledProcessError) as error:
        print(f"dl2: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
