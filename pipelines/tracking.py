"""MLflow for the pipelines: where runs go, the tags every run carries, and the datasets it read.

By default runs and the model registry live in an SQLite store under `mlruns/` (`mlruns/mlflow.db`, artefacts in
`mlruns/artifacts`); setting `MLFLOW_TRACKING_URI` sends them to a tracking server instead. Every run is tagged
with the stage, the git commit, the code version and the data version (a digest of the ingested traces only),
and records its inputs as MLflow datasets, so any figure can be traced to its code and data. MLflow records;
it never decides whether a stage runs (DVC does).
"""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dl2.paths import git_commit

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENT = "dl2"
INGESTED = "data/ingested"
"""Where the `ingest` stage versions trace data (relative to the root): what the data version hashes."""


def store_dir() -> Path:
    return Path(os.environ.get("DL2_MLRUNS", ROOT / "mlruns"))


def configure() -> str:
    """Point MLflow at the tracking server named by `MLFLOW_TRACKING_URI`, or at the embedded SQLite store (its
    artefacts in `mlruns/artifacts`)."""
    import mlflow

    server = os.environ.get("MLFLOW_TRACKING_URI")  # read first: set_tracking_uri exports the URI it is given
    uri = server or f"sqlite:///{store_dir() / 'mlflow.db'}"
    if not server:
        store_dir().mkdir(parents=True, exist_ok=True)
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    if mlflow.get_experiment_by_name(EXPERIMENT) is None:
        local = uri.startswith("sqlite:///") and uri == f"sqlite:///{store_dir() / 'mlflow.db'}"
        artifacts = (store_dir() / "artifacts").as_uri() if local else None
        mlflow.create_experiment(EXPERIMENT, artifact_location=artifacts)
    mlflow.set_experiment(EXPERIMENT)
    return uri


def data_version(root: Path = ROOT) -> str:
    """A short digest of the ingested trace data (each trace's manifest of sha256s; 'none' before `ingest`)."""
    manifests = sorted((root / INGESTED).glob("*/MANIFEST.json"))
    if not manifests:
        return "none"
    digest = hashlib.sha256()
    for path in manifests:
        digest.update(path.parent.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def end_abandoned_runs(stage: str, root: Path = ROOT) -> list[str]:
    """Mark as KILLED the runs of `stage` from this root that are still RUNNING although their process is gone
    (a stage killed mid-run cannot end its own run); their ids. DVC lets one stage run at a time per root."""
    import mlflow

    configure()
    running = mlflow.search_runs(
        experiment_names=[EXPERIMENT],
        filter_string=f"tags.`dl2.stage` = '{stage}' and attributes.status = 'RUNNING'",
        output_format="list",
    )
    ended = []
    for run in running:
        tags = run.data.tags
        if tags.get("dl2.root") != str(root.resolve()) or _alive(tags):
            continue
        mlflow.MlflowClient().set_terminated(run.info.run_id, status="KILLED")
        ended.append(run.info.run_id)
    return ended


def _alive(tags: Mapping[str, str]) -> bool:
    """Whether the process that opened a run still runs (only knowable on the same host)."""
    if tags.get("dl2.host") != socket.gethostname():
        return True
    try:
        pid = int(tags.get("dl2.pid") or 0)
        if pid <= 0:
            return False
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:  # someone else's process
        return True
    return True


@contextmanager
def stage_run(
    stage: str,
    params: Mapping[str, Any] | None = None,
    nested: bool = False,
    run_name: str | None = None,
    tags: Mapping[str, str] | None = None,
    root: Path = ROOT,
) -> Iterator[Any]:
    """An MLflow run for one pipeline stage (nested: a child run of the active one, e.g. an ablation). Runs that
    an earlier, killed run of the stage left RUNNING are ended as KILLED first."""
    import mlflow

    configure()
    if not nested:
        end_abandoned_runs(stage, root)
    all_tags = {
        "dl2.stage": stage,
        "dl2.root": str(root.resolve()),
        "dl2.host": socket.gethostname(),
        "dl2.pid": str(os.getpid()),
        "git_commit": git_commit(root),
        "dvc_data_version": data_version(root),
        **(tags or {}),
    }
    with mlflow.start_run(run_name=run_name or stage, nested=nested, tags=all_tags) as run:
        if params:
            mlflow.log_params({key: _short(value) for key, value in flatten(params).items()})
        yield run


def dataset(name: str, digest: str, source: str) -> Any:
    """An MLflow dataset that names data without loading it: `source` is where it lives (a path under the root
    or a workload name), `digest` its version (a DVC md5 or a content hash)."""
    from mlflow.data.http_dataset_source import HTTPDatasetSource
    from mlflow.data.meta_dataset import MetaDataset

    # MLflow: HTTPDatasetSource.__init__ is unannotated, and MetaDataset leaves the base's abstract `profile`
    # unimplemented though it is meant to be instantiated (its own docs do)
    http_source = HTTPDatasetSource(url=f"dl2://{source}")  # type: ignore[no-untyped-call]
    return MetaDataset(http_source, name=name, digest=digest[:36])  # type: ignore[abstract]


def md5_file(path: Path) -> str:
    """The MD5 DVC records for a file (of its content), so an MLflow dataset and DVC name one version."""
    return hashlib.md5(path.read_bytes()).hexdigest()


def log_inputs(inputs: Sequence[tuple[Any, str]]) -> None:
    """Record (dataset, context) pairs as the active run's inputs (MLflow UI: the run's Datasets)."""
    import mlflow

    for data, context in inputs:
        mlflow.log_input(data, context=context)


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
