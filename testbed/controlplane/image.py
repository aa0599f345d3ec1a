"""The dl2 image, built on this machine from the project's `Dockerfile`, without a container registry or Docker.

The Dockerfile's defaults are what a user with a registry builds (`python:3.11.14-slim-bookworm`, torch's CPU
index). These machines reach no registry and no download.pytorch.org, so here its build arguments are set instead:

- the base (`PYTHON_IMAGE`) is Debian bookworm made by `debootstrap` (minbase variant and its python3.11, the
  Python the slim image's Debian ships), imported into podman's storage as `localhost/dl2-base:bookworm` and kept
  as an OCI archive in `$DL2_IMAGE_CACHE` or `~/.cache/dl2/image/<digest of the recipe>/`, so that the next
  machine state (podman's storage wiped) loads it in seconds instead of bootstrapping again;
- torch (`TORCH`, `TORCH_INDEX`) is the CPU wheel of `$PIP_FIND_LINKS` (default `/opt/wheels`) when it holds
  `torch-2.13.0+cpu`, mounted read-only into the build; otherwise PyPI's `torch==2.13.0` (a CUDA build: several
  GB of nvidia libraries that run on the CPU too);
- pip in the build trusts this machine's CA bundle (an HTTPS proxy with its own CA sits between it and PyPI):
  the bundle and a pip.conf naming it are mounted into the build's RUN steps over the base's empty
  `/etc/xdg/pip`, never copied into a layer.

`podman build` keeps each step as a layer (a change to dl2/ re-runs the steps from its COPY on), and the image is
labelled with a digest of its context, so that a `make image` with nothing changed returns in seconds.

    python -m testbed.controlplane.image              # build what is missing; prints the image's name
    python -m testbed.controlplane.image --check      # exit 1, saying what is missing, if the image is not built
    python -m testbed.controlplane.image --export     # also write the image as an OCI archive `ctr images import` takes

The system tools (podman, buildah, debootstrap) come from Debian's packages: `make image` installs them when missing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dl2.paths import REPO_ROOT

SYSTEM_TOOLS = ("podman", "debootstrap", "runc")
"""What a build here runs (`make image` installs Debian's podman, buildah and debootstrap when missing)."""
PODMAN_RUN_FLAGS = ("--runtime=runc", "--ulimit=nofile=1024:1024", "--ulimit=nproc=1024:1024")
"""Every container here: runc (crun refuses this machine's cgroup v1 with "hybrid mode not supported") and limits
under the machine's hard limits (podman's defaults ask for more and runc fails to set them)."""
ENV = "DL2_IMAGE_CACHE"
TORCH_VERSION = "2.13.0"
PIP_CONFIG_DIR = "/etc/xdg/pip"
"""Where the build's RUN steps see a pip.conf and this machine's CA bundle: a folder of the host bind-mounted over
this empty folder of the base, so that no mount point is left in a layer (a missing one is created, and kept)."""


class ImageError(RuntimeError):
    """The image cannot be built or checked here (the message says what is missing or what failed)."""


@dataclass(frozen=True, slots=True)
class BaseRecipe:
    """What the base image is made of: a debootstrap of one Debian suite with the packages the Dockerfile needs."""

    suite: str = "bookworm"
    """Debian's release; bookworm's python3.11 is the Python of the Dockerfile's default `python:3.11-slim-bookworm`."""
    packages: tuple[str, ...] = ("python3.11", "python3.11-venv", "python3-distutils", "python-is-python3")
    """On top of minbase: the interpreter, `python -m venv` (ensurepip), and `python` on PATH, which the Dockerfile's
    RUN steps call; python3-distutils is named because debootstrap does not resolve the virtual python3.11-distutils
    that python3.11-venv depends on. `groupadd`/`useradd` (passwd) are in minbase already."""
    mirror: str = "http://deb.debian.org/debian"
    """The apt mirror debootstrap fetches from."""
    tag: str = "localhost/dl2-base:bookworm"
    """Its name in podman's storage: the `PYTHON_IMAGE` build argument."""

    def digest(self) -> str:
        """Of everything that changes the base: which cached archive is this recipe's."""
        text = "\0".join([self.suite, ",".join(sorted(self.packages)), self.mirror, "minbase", PIP_CONFIG_DIR, "v2"])
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class TorchSource:
    """Where the build's pip takes torch from: the `TORCH` and `TORCH_INDEX` build arguments, and a folder to mount."""

    requirement: str
    """A requirement (`torch==2.13.0`) or the path of a wheel inside the build (`/wheels/torch-...whl`)."""
    index: str
    """The index pip resolves torch's dependencies (and torch itself, for a requirement) from."""
    wheels: Path | None = None
    """The host folder mounted read-only at `/wheels` when `requirement` is a wheel there."""


def torch_source(wheels: Path | None = None) -> TorchSource:
    """The CPU wheel of `wheels` (default `$PIP_FIND_LINKS`, else /opt/wheels) if it holds torch 2.13.0+cpu for this
    Python ABI (cp311: the base's python3.11), else PyPI's torch (download.pytorch.org is unreachable here)."""
    folder = wheels or Path(os.environ.get("PIP_FIND_LINKS") or "/opt/wheels")
    found = sorted(folder.glob(f"torch-{TORCH_VERSION}+cpu-cp311-cp311-*linux*x86_64.whl")) if folder.is_dir() else []
    if found:
        return TorchSource(f"/wheels/{found[-1].name}", "https://pypi.org/simple", folder)
    return TorchSource(f"torch=={TORCH_VERSION}", "https://pypi.org/simple")


def image_tag() -> str:
    """`localhost/dl2:<version>`: podman's name for the `dl2:<version>` the manifests run (k8s/kustomization.yaml)."""
    version = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
    return f"localhost/dl2:{version}"


def cache_folder(recipe: BaseRecipe) -> Path:
    """`$DL2_IMAGE_CACHE`, else `$XDG_CACHE_HOME/dl2/image/<recipe digest>` (`~/.cache/...`)."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "dl2" / "image" / recipe.digest()


def missing_tools() -> list[str]:
    """The system tools a build needs and PATH lacks (debootstrap lives in /usr/sbin, on root's PATH)."""
    return [tool for tool in SYSTEM_TOOLS if shutil.which(tool) is None]


def _run(command: Sequence[str], cwd: Path | None = None, log: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run a build step (its whole output into `log` if given); ImageError with the command and its last output
    lines if it fails."""
    done = subprocess.run(list(command), cwd=cwd, text=True, capture_output=True, check=False)
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        where = f" (all of it in {log})" if log is not None else ""
        raise ImageError(f"{' '.join(command)} failed ({done.returncode}){where}:\n{tail}")
    return done


def image_exists(tag: str) -> bool:
    return subprocess.run(["podman", "image", "exists", tag], check=False).returncode == 0


def _label(tag: str, name: str) -> str:
    done = _run(["podman", "image", "inspect", "--format", f'{{{{index .Labels "{name}"}}}}', tag])
    return done.stdout.strip()


def build_base(recipe: BaseRecipe, cache: Path | None = None) -> str:
    """The base in podman's storage, made if missing: loaded from the cached archive, else bootstrapped (a few
    minutes: debootstrap downloads and unpacks about 40 packages), imported and archived. Returns its tag."""
    if image_exists(recipe.tag) and _label(recipe.tag, "dl2.base.digest") == recipe.digest():
        return recipe.tag
    cache = cache or cache_folder(recipe)
    archive = cache / "base.oci.tar"
    if archive.is_file():
        _run(["podman", "load", "--quiet", "--input", str(archive)])
        _run(["podman", "tag", _loaded_id(archive), recipe.tag])
        return recipe.tag
    if shutil.which("debootstrap") is None:
        raise ImageError("building the base needs debootstrap: apt-get install debootstrap (or run `make image`)")
    cache.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    print(f"bootstrapping Debian {recipe.suite} into {recipe.tag} (a few minutes the first time)", file=sys.stderr)
    with tempfile.TemporaryDirectory(dir=cache, prefix="rootfs-") as scratch:
        rootfs = Path(scratch) / "rootfs"
        _run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(recipe.packages)}",
                recipe.suite,
                str(rootfs),
                recipe.mirror,
            ]
        )
        # what a slim image leaves out too: apt's downloaded packages and lists, man pages and docs
        for leftover in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/man", "usr/share/doc"):
            for path in (rootfs / leftover).glob("*"):
                if path.is_file() or path.is_symlink():
                    path.unlink()
                elif path.is_dir() and path.name != "partial":
                    shutil.rmtree(path)
        # pip's site-wide configuration folder, empty: the build mounts its pip.conf over it (build_image)
        (rootfs / PIP_CONFIG_DIR.lstrip("/")).mkdir(parents=True, exist_ok=True)
        tarball = Path(scratch) / "rootfs.tar"
        _run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(tarball), "."])
        changes = [
            f"LABEL=dl2.base.digest={recipe.digest()}",
            "ENV=LANG=C.UTF-8",
            "ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            'CMD=["python3"]',
        ]
        _run(["podman", "import", *(f"--change={change}" for change in changes), str(tarball), recipe.tag])
    partial = archive.with_name(archive.name + ".partial")
    partial.unlink(missing_ok=True)
    _run(["podman", "save", "--quiet", "--format=oci-archive", f"--output={partial}", recipe.tag])
    partial.rename(archive)
    print(f"base built in {time.monotonic() - started:.0f} s; kept in {archive}", file=sys.stderr)
    return recipe.tag


def _loaded_id(archive: Path) -> str:
    """The id podman gives an OCI archive it loaded: the digest of the config its manifest names."""
    index = json.loads(_run(["tar", "-xOf", str(archive), "index.json"]).stdout)
    manifest = index["manifests"][0]["digest"].removeprefix("sha256:")
    config: str = json.loads(_run(["tar", "-xOf", str(archive), f"blobs/sha256/{manifest}"]).stdout)["config"]["digest"]
    return config.removeprefix("sha256:")


def context_digest(base: str, torch: TorchSource) -> str:
    """Of what the build is made from: the Dockerfile, every file `.dockerignore` lets into the context (its `!path`
    lines; `__pycache__` left out as there), the base's image id and torch's arguments. An image labelled with it is
    up to date: checking takes milliseconds, where podman's own layer cache re-hashes the 6 GB it copies (a minute)."""
    hasher = hashlib.sha256()
    for arg in (base_id(base), torch.requirement, torch.index):
        hasher.update(arg.encode() + b"\0")
    allowed = [line[1:].rstrip("/") for line in (REPO_ROOT / ".dockerignore").read_text().split() if line[0] == "!"]
    files = {REPO_ROOT / "Dockerfile"}
    for entry in allowed:
        path = REPO_ROOT / entry
        files |= {path} if path.is_file() else {p for p in path.rglob("*") if p.is_file()}
    for path in sorted(p for p in files if "__pycache__" not in p.parts):
        hasher.update(path.relative_to(REPO_ROOT).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return hasher.hexdigest()[:16]


def base_id(base: str) -> str:
    return _run(["podman", "image", "inspect", "--format", "{{.Id}}", base]).stdout.strip()


def build_image(base: str, torch: TorchSource, tag: str | None = None, log: Path | None = None) -> str:
    """Build the Dockerfile into `tag` (default `image_tag()`) on `base`, torch from `torch`, unless `tag` is labelled
    with this context's digest already. Each step is cached as a layer: the first build takes minutes (pip installs
    torch and the controller's extras), a change to dl2/ re-runs the steps from its COPY on (about 5 minutes).
    The build's network is the host's: traffic goes the way the host's own pip goes (a bridge adds nothing here).
    `log` keeps the build's whole output."""
    tag = tag or image_tag()
    digest = context_digest(base, torch)
    if image_exists(tag) and _label(tag, "dl2.context.digest") == digest:
        return tag
    command = [
        "podman",
        "build",
        "--layers",
        *PODMAN_RUN_FLAGS,
        "--network=host",
        f"--build-arg=PYTHON_IMAGE={base}",
        f"--build-arg=TORCH={torch.requirement}",
        f"--build-arg=TORCH_INDEX={torch.index}",
        f"--label=dl2.context.digest={digest}",
        f"--tag={tag}",
        "--file=Dockerfile",
    ]
    if torch.wheels is not None:
        command.append(f"--volume={torch.wheels}:/wheels:ro")
    bundle = ca_bundle()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dl2-image-") as scratch:
        if bundle is not None:
            # pip's own certifi does not know this machine's proxy CA; pip reads /etc/xdg/pip/pip.conf in every RUN
            shutil.copyfile(bundle, Path(scratch) / "ca.crt")
            (Path(scratch) / "pip.conf").write_text(f"[global]\ncert = {PIP_CONFIG_DIR}/ca.crt\n")
            os.chmod(scratch, 0o755)
            command.append(f"--volume={scratch}:{PIP_CONFIG_DIR}:ro")
        print(f"building {tag} from the Dockerfile on {base} (torch: {torch.requirement})", file=sys.stderr)
        _run([*command, str(REPO_ROOT)], cwd=REPO_ROOT, log=log)
    print(f"{tag} built in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return tag


def ca_bundle() -> Path | None:
    """The CA bundle this machine's pip trusts (`$PIP_CERT`, else Debian's bundle), for the build's pip."""
    for candidate in (os.environ.get("PIP_CERT"), "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def run_in_image(tag: str, command: Sequence[str]) -> str:
    """Run `command` in a throwaway container of `tag` as the pods run it (the image's non-root user, a read-only
    root filesystem, no network); its output. ImageError if it fails."""
    flags = [*PODMAN_RUN_FLAGS, "--rm", "--read-only", "--network=none", "--tmpfs=/tmp"]
    return _run(["podman", "run", *flags, tag, *command]).stdout


def export(tag: str, archive: Path, reference: str) -> Path:
    """Write `tag` as an OCI archive named `reference` (as the kubelet asks for it: `dl2:0.1.0` is containerd's
    `docker.io/library/dl2:0.1.0`), which `ctr -n k8s.io images import` takes; kept until the image changes."""
    image_id = _run(["podman", "image", "inspect", "--format", "{{.Id}}", tag]).stdout.strip()
    stamp = archive.with_name(archive.name + ".id")
    if archive.is_file() and stamp.is_file() and stamp.read_text() == image_id:
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    _run(["podman", "tag", tag, reference])
    partial = archive.with_name(archive.name + ".partial")
    partial.unlink(missing_ok=True)
    try:
        _run(["podman", "save", "--quiet", "--format=oci-archive", f"--output={partial}", reference])
    finally:
        _run(["podman", "untag", reference, reference])
    partial.rename(archive)
    stamp.write_text(image_id)
    return archive


def missing(recipe: BaseRecipe | None = None) -> list[str]:
    """What running the built image lacks here: podman, runc, the base, the image (empty when it can run; whether the
    image is up to date with the sources is `build_image`'s to decide)."""
    absent = [f"{tool} (make image)" for tool in ("podman", "runc") if shutil.which(tool) is None]
    if absent:
        return absent
    recipe = recipe or BaseRecipe()
    absent += [f"image {name} (make image)" for name in (recipe.tag, image_tag()) if not image_exists(name)]
    return absent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.controlplane.image", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether the image is built (exit 1 if not)")
    parser.add_argument(
        "--export",
        nargs="?",
        const="",
        metavar="ARCHIVE",
        help="also write the image as an OCI archive for `ctr images import` (default: the cache's dl2.oci.tar)",
    )
    args = parser.parse_args(argv)
    recipe = BaseRecipe()
    if args.check:
        absent = missing(recipe)
        print(f"missing: {'; '.join(absent)}" if absent else image_tag())
        return 1 if absent else 0
    try:
        if missing_tools():
            raise ImageError(f"{', '.join(missing_tools())} not on PATH: run `make image` (it installs them)")
        tag = build_image(build_base(recipe), torch_source(), log=cache_folder(recipe) / "build.log")
        print(run_in_image(tag, ["python", "-c", "import dl2, torch; print(dl2.__name__, torch.__version__)"]).strip())
        if args.export is not None:
            target = Path(args.export) if args.export else cache_folder(recipe) / "dl2.oci.tar"
            name = "docker.io/library/" + tag.removeprefix("localhost/")
            print(export(tag, target, name), file=sys.stderr)
    except ImageError as error:
        print(f"dl2: {error}", file=sys.stderr)
        return 2
    print(tag)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
