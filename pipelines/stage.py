"""What every stage shares: where files go, digests of inputs, the up-to-date check, and the command line.

Idempotence. A stage's *digest* hashes its name, its parameters, the content of its inputs and the code it runs
(the `dl2` package and its own module). A stage that writes JSON records the digest in its output and is up to
date when the output carries the current one. A stage that logs to MLflow tags its run `dl2.digest` and
`dl2.outputs` (a hash of what it wrote): it is up to date when a finished run has the digest and the outputs on
disk still hash to that run's `dl2.outputs`; when they are missing (DVC removes outputs before re-running a
stage; a fresh checkout) they are restored from the run's artefacts instead of training again. So re-running a
stage with the same inputs changes nothing and adds no MLflow run; `--force` runs it anyway.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dl2.cli.common import write_json_atomic
from dl2.core import Dl2Error
from pipelines import params as params_module
from pipelines import tracking
from pipelines.params import Params

ROOT = tracking.ROOT
SMOKE_ROOT = ROOT / "work" / "smoke"
"""Where `--smoke` runs of the stage commands write (and keep their MLflow store), so that a quick check never
replaces the DVC-tracked outputs of the full profile."""
SHARED_CODE = ("pipelines/params.py", "pipelines/stage.py", "pipelines/tracking.py")
DATA_CODE = ("dl2/core", "dl2/workload", "dl2/paths.py")
"""The part of the library the data stages (ingest, validate) run; training stages depend on all of `dl2`."""
"""Modules every stage runs; with the stage's own module and the `dl2` package they form its code digest."""


class StageFailed(Dl2Error):
    """A stage refused its input (e.g. a failed validation); the message is the report to print."""


def default_root() -> Path:
    """The repository, unless `DL2_PIPELINE_ROOT` names another root (set by `--smoke`)."""
    return Path(os.environ.get("DL2_PIPELINE_ROOT") or ROOT)


@dataclass(frozen=True, slots=True)
class Layout:
    """Where the pipeline reads and writes, relative to one root (the repository, or a test's tmp_path)."""

    root: Path = field(default_factory=default_root)

    def ingested(self, name: str) -> Path:
        return self.root / "data" / "ingested" / name

    def validation_report(self, name: str) -> Path:
        return self.root / "reports" / "validation" / f"{name}.json"

    @property
    def gx_dir(self) -> Path:
        """Great Expectations project (Data Docs HTML); ignored by git, not a DVC output."""
        return self.root / "work" / "gx"

    @property
    def workloads_report(self) -> Path:
        return self.root / "reports" / "workloads.json"

    @property
    def training_manifest(self) -> Path:
        """What training may draw on (source, seed blocks, validation seeds): the training stages' input, which
        stays byte-identical when only the test set changes."""
        return self.root / "data" / "workloads" / "training.json"

    def model(self, name: str) -> Path:
        return self.root / "models" / "staging" / name

    def feedback(self, params: Params) -> Path:
        return self.root / params.data.feedback

    @property
    def simulated_feedback(self) -> Path:
        return self.root / "data" / "feedback" / "simulated"

    @property
    def reports(self) -> Path:
        return self.root / "reports"

    @property
    def plots(self) -> Path:
        return self.root / "reports" / "plots"

    def relative(self, path: Path) -> str:
        try:
            return str(path.resolve().relative_to(self.root.resolve()))
        except ValueError:
            return str(path)


@dataclass(frozen=True, slots=True)
class StageResult:
    """What a stage did: ids and paths only (an Airflow task passes this on through XCom)."""

    stage: str
    up_to_date: bool
    outputs: tuple[str, ...]
    digest: str
    run_id: str | None = None
    summary: Mapping[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        what = "up to date" if self.up_to_date else "wrote " + ", ".join(self.outputs)
        run = f" (MLflow run {self.run_id})" if self.run_id else ""
        return f"{self.stage}: {what}{run}"

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "up_to_date": self.up_to_date,
            "outputs": list(self.outputs),
            "digest": self.digest,
            "run_id": self.run_id,
            "summary": dict(self.summary),
        }


# -- digests ---------------------------------------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def files_of(path: Path) -> list[Path]:
    """A file, or every file under a folder (sorted; caches and hidden temporaries excluded)."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        return []
    return sorted(
        p
        for p in path.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and not p.name.startswith(".") and p.suffix != ".pyc"
    )


def tree_hashes(path: Path) -> dict[str, str]:
    """sha256 of each file of `path`, keyed by its path inside `path` ('' for a single file)."""
    if path.is_file():
        return {"": sha256_file(path)}
    return {str(p.relative_to(path)): sha256_file(p) for p in files_of(path)}


def content_digest(paths: Iterable[Path]) -> str:
    """One digest of the content of files and folders (missing ones count as missing), independent of where
    they lie, so moving the repository does not invalidate anything."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(json.dumps(tree_hashes(path) if path.exists() else None, sort_keys=True).encode())
    return digest.hexdigest()


def code_digest(module: str, library: Sequence[str] = ("dl2",)) -> str:
    """The stage's code: the shared pipeline modules, its own, and the parts of the library it runs (the same
    paths as its `deps` in dvc.yaml)."""
    files = [ROOT / name for name in (*SHARED_CODE, f"pipelines/{module}.py")]
    return content_digest([*files, *(ROOT / part for part in library)])


def stage_digest(
    stage: str,
    module: str,
    settings: Mapping[str, Any],
    inputs: Sequence[Path],
    library: Sequence[str] = ("dl2",),
) -> str:
    document = {
        "stage": stage,
        "params": params_module.as_dict(settings),
        "inputs": content_digest(inputs),
        "code": code_digest(module, library),
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode()).hexdigest()[:16]


# -- stages whose output is a JSON file or a folder with a manifest -------------------------------------------


def recorded_digest(path: Path) -> str | None:
    """The digest a JSON output carries (None when missing or unreadable)."""
    try:
        value = json.loads(path.read_text()).get("digest")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def write_json(path: Path, data: Any) -> None:
    write_json_atomic(path, data)


# -- stages that log to MLflow ---------------------------------------------------------------------------------


def finished_run(digest: str) -> Any | None:
    """The latest finished MLflow run of the stage with this digest (top-level runs only)."""
    import mlflow

    tracking.configure()
    runs = mlflow.search_runs(
        experiment_names=[tracking.EXPERIMENT],
        filter_string=f"tags.`dl2.digest` = '{digest}' and attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
        output_format="list",
    )
    return runs[0] if runs else None


def outputs_digest(outputs: Sequence[Path]) -> str:
    return content_digest(outputs)[:16]


def up_to_date(stage: str, digest: str, layout: Layout, outputs: Sequence[Path]) -> StageResult | None:
    """A result when a finished run with `digest` exists and its outputs are here (restored if need be)."""
    run = finished_run(digest)
    if run is None:
        return None
    expected = run.data.tags.get("dl2.outputs")
    restored = expected != outputs_digest(outputs)
    if restored and not _restore(run.info.run_id, layout, outputs, expected):
        return None
    summary = {"restored_from_mlflow": True} if restored else {}
    return StageResult(stage, True, tuple(layout.relative(p) for p in outputs), digest, run.info.run_id, summary)


def log_outputs(layout: Layout, outputs: Sequence[Path]) -> str:
    """Log each output under the run's `outputs/` artefacts (for restoring) and tag the run with their digest."""
    import mlflow

    for path in outputs:
        relative = Path(layout.relative(path))
        if path.is_dir():
            mlflow.log_artifacts(str(path), artifact_path=str(Path("outputs") / relative))
        else:
            mlflow.log_artifact(str(path), artifact_path=str(Path("outputs") / relative.parent))
    value = outputs_digest(outputs)
    mlflow.set_tag("dl2.outputs", value)
    return value


def _restore(run_id: str, layout: Layout, outputs: Sequence[Path], expected: str | None) -> bool:
    """Copy the run's logged outputs into place; True when they then hash as the run says."""
    import os

    import mlflow

    if expected is None:
        return False
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    (layout.root / "work").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=layout.root / "work") as scratch:
        try:
            local = Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="outputs", dst_path=scratch))
        except Exception:  # no artefacts (an old run, a pruned store): the stage runs again
            return False
        for path in outputs:
            source = local / layout.relative(path)
            if not source.exists():
                return False
        for path in outputs:
            source = local / layout.relative(path)
            remove(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(source), str(path))
    return outputs_digest(outputs) == expected


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


# -- the command line ------------------------------------------------------------------------------------------


def use_smoke_root() -> Path:
    """Send this process's stages (and, without a tracking server, its MLflow store) to `work/smoke/`."""
    os.environ.setdefault("DL2_PIPELINE_ROOT", str(SMOKE_ROOT))
    root = Path(os.environ["DL2_PIPELINE_ROOT"])
    if not os.environ.get("MLFLOW_TRACKING_URI"):
        os.environ.setdefault("DL2_MLRUNS", str(root / "mlruns"))
    return root


def main(
    name: str,
    description: str,
    run: Callable[[Params, argparse.Namespace], StageResult],
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
    argv: Sequence[str] | None = None,
) -> int:
    """`python -m pipelines.<name>`: exit 0 (done or up to date), 1 (input refused: the report is printed),
    2 (bad parameters or unreadable input: one line)."""
    parser = argparse.ArgumentParser(prog=f"python -m pipelines.{name}", description=description)
    params_module.add_arguments(parser)
    parser.add_argument("--force", action="store_true", help="run even when the outputs are up to date")
    if add_arguments is not None:
        add_arguments(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        use_smoke_root()
    try:
        result = run(params_module.from_args(args), args)
    except StageFailed as failure:
        print(str(failure), file=sys.stderr)
        return 1
    except Dl2Error as error:
        print(f"{name}: error: {error}", file=sys.stderr)
        return 2
    print(result.line())
    return 0
