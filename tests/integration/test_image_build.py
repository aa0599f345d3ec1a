"""The dl2 image built here (`make image`: the Dockerfile on a debootstrapped Debian bookworm, with podman) runs:
as the manifests run it (the image's non-root user 10001, a read-only root filesystem, no network), `dl2 --help`
answers, the controller's imports load (torch, numba, the Kubernetes client, MLflow) and the models the manifests
name are where they say. Exported as an OCI archive, a containerd of its own (as a real node's) imports it under the
name the kubelet asks for (`dl2:0.1.0`, containerd's `docker.io/library/dl2:0.1.0`) and unpacks it.

Skipped, naming what is missing, where `make image` has not run. About 4.5 minutes on 2 shared cores, most of it
containerd unpacking the 6 GB image (3.3 min) and removing it (1 min); 2 minutes more where the archive is older
than the image.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.controlplane import image

MISSING = image.missing()
needs_image = pytest.mark.skipif(bool(MISSING), reason="; ".join(MISSING) or "the image is built")
TAG = image.image_tag()


@pytest.mark.slow
@needs_image
def test_dl2_help_answers_as_the_images_user() -> None:
    out = image.run_in_image(TAG, ["dl2", "--help"])
    assert out.startswith("usage: dl2") and "serve" in out and "extender" in out
    assert image.run_in_image(TAG, ["id", "-u"]).strip() == "10001"
    assert image.run_in_image(TAG, ["id", "-g"]).strip() == "10001"


@pytest.mark.slow
@needs_image
def test_the_controllers_imports_and_the_shipped_models_load() -> None:
    script = (
        "import json, pathlib, dl2.kube, kubernetes, mlflow, numba, torch;"
        "print(json.dumps({'torch': torch.__version__, 'models': sorted("
        "p.parent.name for p in pathlib.Path('/opt/dl2/models').glob('*/config.json'))}))"
    )
    found = json.loads(image.run_in_image(TAG, ["python", "-c", script]).strip().splitlines()[-1])
    assert found["torch"].startswith(image.TORCH_VERSION)
    assert found["models"] == ["dl2-philly", "harmony-placer-philly", "harmony-speed-philly"]


@pytest.fixture
def containerd(tmp_path: Path) -> Iterator[Path]:
    """A containerd of its own (root, state, socket under tmp_path; no CRI), as a real node starts one; its socket."""
    if shutil.which("containerd") is None or shutil.which("ctr") is None:
        pytest.skip("containerd and ctr (make real-nodes)")
    socket = tmp_path / "containerd.sock"
    config = tmp_path / "config.toml"
    config.write_text(
        f'version = 2\nroot = "{tmp_path / "root"}"\nstate = "{tmp_path / "state"}"\noom_score = 0\n'
        f'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n[grpc]\n  address = "{socket}"\n'
        f'[plugins."io.containerd.internal.v1.opt"]\n  path = "{tmp_path / "opt"}"\n'
    )
    log = (tmp_path / "containerd.log").open("w")
    process = subprocess.Popen(["containerd", "--config", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while subprocess.run(ctr(socket, "version"), capture_output=True, check=False).returncode != 0:
            assert process.poll() is None, (tmp_path / "containerd.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "containerd did not answer in 30 s"
            time.sleep(0.2)
        yield socket
    finally:
        subprocess.run(ctr(socket, "images", "remove", REFERENCE), capture_output=True, check=False)
        process.terminate()
        process.wait(timeout=30)
        log.close()
        # the overlay snapshots containerd unpacked are plain folders once it is stopped; nothing stays mounted
        subprocess.run(["umount", "--recursive", "--quiet", str(tmp_path / "root")], check=False)
        shutil.rmtree(tmp_path / "root", ignore_errors=True)


REFERENCE = "docker.io/library/" + TAG.removeprefix("localhost/")


def ctr(socket: Path, *args: str) -> list[str]:
    return ["ctr", f"--address={socket}", "--namespace=k8s.io", *args]


@pytest.mark.slow
@needs_image
def test_the_exported_archive_imports_into_containerd_by_the_manifests_name(containerd: Path) -> None:
    # where `make image IMAGE_ARGS=--export` keeps it (written again only when the image changed: 2 minutes)
    archive = image.export(TAG, image.cache_folder(image.BaseRecipe()) / "dl2.oci.tar", REFERENCE)
    done = subprocess.run(ctr(containerd, "images", "import", str(archive)), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    listed = subprocess.run(ctr(containerd, "images", "list", "--quiet"), capture_output=True, text=True, check=True)
    assert REFERENCE in listed.stdout.split()
    checked = subprocess.run(ctr(containerd, "images", "check"), capture_output=True, text=True, check=True)
    assert "complete" in checked.stdout


def test_torch_comes_from_a_cpu_wheel_where_the_folder_has_one(tmp_path: Path) -> None:
    assert image.torch_source(tmp_path) == image.TorchSource("torch==2.13.0", "https://pypi.org/simple")
    wheel = tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.touch()
    (tmp_path / "torch-2.13.0+cpu-cp312-cp312-manylinux_2_28_x86_64.whl").touch()  # another Python: not this base's
    assert image.torch_source(tmp_path) == image.TorchSource(
        f"/wheels/{wheel.name}", "https://pypi.org/simple", tmp_path
    )


def test_the_base_recipe_names_its_cache() -> None:
    recipe = image.BaseRecipe()
    assert image.BaseRecipe().digest() == recipe.digest() != image.BaseRecipe(suite="trixie").digest()
    assert image.image_tag() == "localhost/dl2:0.1.0"


def test_a_failing_step_says_which_and_why() -> None:
    with pytest.raises(image.ImageError, match=r"false failed \(1\)"):
        image._run(["false"])
