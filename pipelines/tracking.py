"""MLflow for the pipelines: where runs go, and the tags every run carries.

By default runs and the model registry live in an SQLite store under `mlruns/` (`mlruns/mlflow.db`, artefacts in
`mlruns/artifacts`); setting `MLFLOW_TRACKING_URI` sends them to a tracking server instead. Every run is tagged
with the stage, the git commit and the DVC data version, so any figure can be traced to its code and data.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENT = "dl2"


def store_dir() -> Path:
    return Path(os.environ.get("DL2_MLRUNS", ROOT / "mlruns"))


def configure() -> str:
    """Point MLflow at the tracking server named by `MLFLOW_TRACKING_URI`, or at the embedded SQLite store."""
    import mlflow

    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        store = store_dir()
        store.mkdir(parents=True, exist_ok=True)
        uri = f"sqlite:///{store / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    if mlflow.get_experiment_by_name(EXPERIMENT) is None:
        artifacts = None if os.environ.get("MLFLOW_TRACKING_URI") else (store_dir() / "artifacts").as_uri()
        mlflow.create_experiment(EXPERIMENT, artifact_location=artifacts)
    mlflow.set_experiment(EXPERIMENT)
    return uri


def git_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


def data_version() -> str:
    """A short digest of the data the pipeline reads: `dvc.lock` when DVC has run, else the trace files."""
    lock = ROOT / "dvc.lock"
    digest = hashlib.sha256()
    if lock.is_file():
        digest.update(lock.read_bytes())
    else:
        for path in sorted((ROOT / "data" / "traces").rglob("*.csv")):
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


@contextmanager
def stage_run(
    stage: str,
    params: Mapping[str, Any] | None = None,
    nested: bool = False,
    run_name: str | None = None,
    tags: Mapping[str, str] | None = None,
) -> Iterator[Any]:
    """An MLflow run for one pipeline stage (nested: a child run of the active one, e.g. an ablation)."""
    import mlflow

    configure()
    all_tags = {"dl2.stage": stage, "git_commit": git_commit(), "dvc_data_version": data_version(), **(tags or {})}
    with mlflow.start_run(run_name=run_name or stage, nested=nested, tags=all_tags) as run:
        if params:
            mlflow.log_params({key: _short(value) for key, value in flatten(params).items()})
        yield run


def log_series(name: str, values: Sequence[float], start_step: int = 0) -> None:
    """A metric per step (learning curves)."""
    import mlflow

    for step, value in enumerate(values, start=start_step):
        if value is not None:
            mlflow.log_metric(name, float(value), step=step)


def flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 500 else text[:497] + "..."
