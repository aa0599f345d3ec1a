"""The image (`Dockerfile`) and the manifests agree: the user the pods run as, the models the manifests name, the
image name kustomize sets and the command the containers run. (hadolint lints the Dockerfile in `make lint`.)"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
K8S = ROOT / "k8s"


def instructions(path: Path) -> list[tuple[str, str]]:
    """(instruction, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", path.read_text())
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line.strip() else "")
        for line in (raw.strip() for raw in joined.splitlines())
        if line and not line.startswith("#")
    ]


def final_stage() -> list[tuple[str, str]]:
    steps = instructions(ROOT / "Dockerfile")
    last_from = max(i for i, (name, _) in enumerate(steps) if name == "FROM")
    return steps[last_from:]


def dl2_containers() -> list[tuple[dict, dict]]:
    """(pod spec, container) of every container running the dl2 image."""
    found = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            pod = (doc or {}).get("spec", {}).get("template", {}).get("spec")
            for container in (pod or {}).get("containers", []):
                if container["image"].split(":")[0] == "dl2":
                    found.append((pod, container))
    return found


def test_the_pods_run_as_the_images_user():
    (user,) = [args for name, args in final_stage() if name == "USER"]
    uid, _, gid = user.partition(":")
    containers = dl2_containers()
    assert len(containers) >= 2  # the controller and the extender
    for pod, container in containers:
        context = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
        assert str(context["runAsUser"]) == uid and context["runAsNonRoot"] is True
        assert str(context.get("runAsGroup", gid)) == gid


def test_every_model_the_manifests_name_is_in_the_image():
    copied = {}
    for name, args in final_stage():
        if name == "COPY" and not args.startswith("--from"):
            source, destination = shlex.split(args)
            copied[destination.rstrip("/")] = source.rstrip("/")
    named = set()
    for path in sorted(K8S.glob("*.yaml")):
        named |= set(re.findall(r"/opt/dl2/models/[\w.-]+", path.read_text()))
    assert named  # the extender's placer at least
    allowed = (ROOT / ".dockerignore").read_text().split()
    for model in sorted(named):
        assert model in copied, f"{model} is named by a manifest but not copied into the image"
        source = copied[model]
        assert (ROOT / source / "config.json").is_file()
        assert f"!{source}/" in allowed, f".dockerignore leaves {source} out of the build context"


def test_kustomize_names_the_image_the_containers_run():
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    (image,) = [entry for entry in kustomization["images"] if entry["name"] == "dl2"]
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert image["newTag"] == version
    for _, container in dl2_containers():
        assert container["image"] == f"dl2:{version}"


def test_the_containers_command_is_installed_on_the_images_path():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    build = instructions(ROOT / "Dockerfile")
    assert any(name == "RUN" and "python -m venv /opt/dl2/venv" in args for name, args in build)
    assert any(name == "RUN" and 'pip install -c /tmp/constraints.txt ".[kube,fast]"' in args for name, args in build)
    (path,) = [args for name, args in final_stage() if name == "ENV" and "PATH=" in args]
    assert "PATH=/opt/dl2/venv/bin:$PATH" in path
    for _, container in dl2_containers():
        assert container["command"][0] in project["scripts"]
