"""A copy of the repository to run the lifecycle in without touching this one: the smoke run, the tests of the
DVC pipeline and of the Airflow DAGs.

The copy holds the files git tracks (and untracked files it does not ignore), minus the pipeline's outputs, with
its own `params.yaml` (the smoke profile by default, plus overrides), its own git repository (DVC needs one;
commits of a DAG run land there) and, through `tracking.ROOT` of its own `pipelines` package, its own MLflow
store and DVC remote under it. Commands run in it (`python -m pipelines.<stage>`, `dvc repro`) import its code,
not this checkout's.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from pipelines.environment import QUIET
from pipelines.environment import environment as environment_of_commands
from pipelines.tracking import ROOT

OUTPUTS = (
    "dvc.lock", "reports/", "data/ingested/", "data/workloads/", "data/feedback/simulated/", "data/deployments/",
    "data/feedback/clusters/", "data/feedback/clusters.dvc",
)  # fmt: skip
"""What the pipeline writes (the cluster loop's collected records and their DVC file too): left out of the copy,
so that it starts from nothing, also in a checkout where `make demo` ran."""
GIT_IDENTITY = ("-c", "user.name=dl2 lifecycle", "-c", "user.email=dl2@localhost")


def source_files(root: Path = ROOT) -> list[str]:
    """Paths (relative to `root`) of the files git tracks or would track, pipeline outputs excluded."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout.decode()
    names = [name for name in listed.split("\0") if name]
    return [n for n in names if not n.startswith(OUTPUTS) and n not in OUTPUTS and (root / n).is_file()]


def make(target: Path, profile: str = "smoke", overrides: Mapping[str, Any] | None = None, root: Path = ROOT) -> Path:
    """A fresh sandbox at `target` (replaced if it exists); `overrides` are merged into its params.yaml by
    section, e.g. {"data": {"traces": ["philly"]}}."""
    if target.exists():
        shutil.rmtree(target)
    for name in source_files(root):
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, destination)
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["profile"] = profile
    for section, values in (overrides or {}).items():
        if isinstance(values, Mapping) and isinstance(params.get(section), Mapping):
            params[section] = {**params[section], **values}
        else:
            params[section] = values
    (target / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    git(target, "init", "-q", "-b", "main")
    git(target, "add", "-A")
    git(target, "commit", "-q", "-m", "sandbox of the dl2 repository")
    return target


def git(root: Path, *arguments: str) -> str:
    done = subprocess.run(["git", *GIT_IDENTITY, *arguments], cwd=root, capture_output=True, text=True, check=True)
    return done.stdout


def environment(root: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of commands run in a sandbox: this interpreter's folder first on PATH (so `python` in
    dvc.yaml is the project's), its own MLflow store (no tracking server, no store of the caller) and no
    analytics."""
    caller = ("DL2_MLRUNS", "DL2_PIPELINE_ROOT", "MLFLOW_TRACKING_URI")
    env = {key: value for key, value in environment_of_commands().items() if key not in caller}
    env.update(QUIET)  # forced, not defaults: the sandbox never inherits the caller's settings of these
    env.update(extra or {})
    return env


def run(root: Path, command: Sequence[str], timeout_s: float | None = None) -> subprocess.CompletedProcess[str]:
    """`command` in the sandbox (output captured)."""
    return subprocess.run(
        list(command), cwd=root, env=environment(root), capture_output=True, text=True, timeout=timeout_s, check=False
    )
