"""The `dl2-policy` registered model: versions identified by their model folder's digest, and two aliases.

A new model becomes `challenger` (`pipelines.register`); only the promotion gate (`pipelines.promote`) moves
`champion`. Stages are deprecated in MLflow 3 and never used. Registering the same folder twice returns the
version that already holds it (tag `dl2.model_digest`), so a re-run registers nothing.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines import tracking

if TYPE_CHECKING:
    import pandas as pd
    from mlflow import MlflowClient
    from mlflow.entities.model_registry import ModelVersion

NAME = "dl2-policy"
CHALLENGER = "challenger"
CHAMPION = "champion"
ALIASES = (CHALLENGER, CHAMPION)
DIGEST_TAG = "dl2.model_digest"
MODEL_FILES = ("config.json", "calibration.json", "*.pt")
"""What a model's digest covers: its configuration, the calibration its lookahead runs in and its weights (not the
card or plots, which do not change what the policy decides)."""


@dataclass(frozen=True, slots=True)
class Version:
    """One registered version of `dl2-policy`."""

    version: int
    digest: str
    """sha256 of the model folder's config and weights (`model_digest`)."""
    aliases: tuple[str, ...]
    tags: Mapping[str, str]
    run_id: str | None
    description: str
    model_id: str | None = None
    """The MLflow 3 LoggedModel behind the version (its metrics are what the registry's Compare view shows)."""

    @property
    def uri(self) -> str:
        return f"models:/{NAME}/{self.version}"


def model_digest(model_dir: Path) -> str:
    """Digest of a model folder: names and bytes of its config and weight files, in name order."""
    from dl2.core import InputError
    from dl2.rl.model_io import is_model_dir

    if not is_model_dir(model_dir):
        raise InputError(str(model_dir), "not a model folder (needs config.json and policy.pt)")
    digest = hashlib.sha256()
    files = sorted({path for pattern in MODEL_FILES for path in Path(model_dir).glob(pattern) if path.is_file()})
    for path in files:
        digest.update(path.name.encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def client() -> MlflowClient:
    from mlflow import MlflowClient

    tracking.configure()
    return MlflowClient()


def list_versions() -> list[Version]:
    """Every version, oldest first."""
    registry = client()
    found = registry.search_model_versions(f"name = '{NAME}'")
    if not found:
        return []
    aliases: dict[int, list[str]] = {}
    for name, version in registry.get_registered_model(NAME).aliases.items():  # search results omit aliases
        aliases.setdefault(int(version), []).append(name)
    return sorted((_version(mv, aliases.get(int(mv.version), [])) for mv in found), key=lambda v: v.version)


def find(digest: str) -> Version | None:
    """The version that holds the model with this digest (the oldest, should there be several)."""
    found = client().search_model_versions(f"name = '{NAME}' and tags.`{DIGEST_TAG}` = '{digest}'")
    versions = sorted(int(mv.version) for mv in found)
    return get(versions[0]) if versions else None


def get(version: int) -> Version:
    return _version(client().get_model_version(NAME, str(version)))


def register(
    model_dir: Path,
    input_example: pd.DataFrame | None = None,
    tags: Mapping[str, str] | None = None,
    description: str | None = None,
    metrics: Mapping[str, float] | None = None,
    inputs: Sequence[tuple[Any, str]] = (),
) -> tuple[Version, bool]:
    """The version holding `model_dir`, registering it first if no version has its digest; (version, created).

    A new version is logged from an MLflow run of stage `register` (git commit and data version as run tags,
    `inputs` as its datasets), and `metrics` (its evaluation) are logged on its LoggedModel and that run, linked
    to the dataset of the first input, so the registry compares versions by them. `tags` and `description` are
    set on the version either way (a re-run with the same values changes nothing)."""
    import mlflow

    from pipelines import pyfunc

    digest = model_digest(model_dir)
    existing = find(digest)
    created = existing is None
    if existing is None:
        example = input_example if input_example is not None else default_example(model_dir)
        with tracking.stage_run("register", tags={DIGEST_TAG: digest}) as run:
            mlflow.log_params({"model_dir": str(model_dir), "digest": digest})
            tracking.log_inputs(inputs)
            info = pyfunc.log_policy(Path(model_dir), example, name=NAME)
            if metrics:
                dataset = inputs[0][0] if inputs else None
                mlflow.log_metrics(dict(metrics), model_id=info.model_id, dataset=dataset)
            registered = mlflow.register_model(
                info.model_uri,
                NAME,
                tags={DIGEST_TAG: digest, "dl2.source": str(model_dir), "dl2.run_id": run.info.run_id},
            )
        version = int(registered.version)
    else:
        version = existing.version
    annotate(version, tags or {}, description)
    return get(version), created


def logged_model_id(version: int) -> str | None:
    """The LoggedModel id of a registered version (None for a version registered without one)."""
    return get(version).model_id


def model_metrics(version: int) -> dict[str, float]:
    """The metrics of a version's logged model (its evaluation; the latest value of each key)."""
    model_id = logged_model_id(version)
    if model_id is None:
        return {}
    metrics = client().get_logged_model(model_id).metrics or []
    latest: dict[str, tuple[int, float]] = {}
    for metric in metrics:
        if metric.key not in latest or metric.timestamp >= latest[metric.key][0]:
            latest[metric.key] = (metric.timestamp, metric.value)
    return {key: value for key, (_, value) in latest.items()}


def annotate(version: int, tags: Mapping[str, str], description: str | None = None) -> None:
    """Set tags (and the description) that differ from what the version already has."""
    registry = client()
    current = get(version)
    for key, value in tags.items():
        if current.tags.get(key) != str(value):
            registry.set_model_version_tag(NAME, str(version), key, str(value))
    if description is not None and current.description != description:
        registry.update_model_version(NAME, str(version), description=description)


def alias(name: str) -> Version | None:
    """The version an alias points at (None if unset)."""
    from mlflow.exceptions import MlflowException

    _check_alias(name)
    try:
        return _version(client().get_model_version_by_alias(NAME, name))
    except MlflowException:  # unset alias (or no registered model yet)
        return None


def set_alias(name: str, version: int) -> None:
    _check_alias(name)
    client().set_registered_model_alias(NAME, name, str(version))


def delete_alias(name: str) -> None:
    _check_alias(name)
    if alias(name) is not None:
        client().delete_registered_model_alias(NAME, name)


def download(version: int, destination: Path) -> Path:
    """The version's dl2 model folder, downloaded to `destination` (replaced if it exists), as a scheduler gets it."""
    import mlflow

    from pipelines.pyfunc import ARTIFACT

    root = client().get_model_version_download_uri(NAME, str(version)).rstrip("/")
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=destination.parent, prefix=f".{destination.name}.") as staging:
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=f"{root}/artifacts/{ARTIFACT}", dst_path=staging))
        if destination.exists():
            shutil.rmtree(destination)
        local.rename(destination)
    return destination


def default_example(model_dir: Path) -> pd.DataFrame:
    """An input example from a small workload of the model's simulator mode."""
    from dl2.rl.model_io import load_config
    from dl2.workload.source import workload
    from pipelines.pyfunc import example_frame

    config, _ = load_config(Path(model_dir))
    return example_frame(workload("authors-tiny" if config.mode == "compat" else "synthetic-small", 0))


def _check_alias(name: str) -> None:
    if name not in ALIASES:
        raise ValueError(f"unknown alias {name!r}; dl2-policy uses {', '.join(ALIASES)}")


def _version(mv: ModelVersion | Any, aliases: list[str] | None = None) -> Version:
    tags = dict(mv.tags or {})
    return Version(
        version=int(mv.version),
        digest=tags.get(DIGEST_TAG, ""),
        aliases=tuple(sorted(aliases if aliases is not None else mv.aliases or ())),
        tags=tags,
        run_id=mv.run_id,
        description=mv.description or "",
        model_id=getattr(mv, "model_id", None) or _model_id_of(str(mv.source or "")),
    )


def _model_id_of(source: str) -> str | None:
    """The LoggedModel id in a version's source URI (`models:/m-<id>`; the SQLite store leaves `model_id`
    empty)."""
    name = source.removeprefix("models:/")
    return name if source.startswith("models:/m-") and "/" not in name else None
