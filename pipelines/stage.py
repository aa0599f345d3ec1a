"""What every stage shares: where files go, what a stage returns, and its command line.

A stage's `run(params, layout)` always does its work: whether it needs to run is DVC's decision alone (`dvc
repro` compares every dep, param and out with `dvc.lock`), and the Airflow tasks run stages through DVC, so a
scheduled run, `dvc repro` and a person at the shell agree. MLflow records what a run did; it never decides
whether a stage runs. Each output records the version of the code that made it (`pipelines.code`).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dl2.core import Dl2Error
from dl2.io import to_json, write_json_atomic
from pipelines import params as params_module
from pipelines import tracking
from pipelines.params import Params

ROOT = tracking.ROOT


class StageFailed(Dl2Error):
    """A stage refused its input (e.g. a failed validation); the message is the report to print. Running it
    again on the same input fails the same way (the command line exits 1, an Airflow task does not retry)."""


def default_root() -> Path:
    """The repository, unless `DL2_PIPELINE_ROOT` names another root."""
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
    outputs: tuple[str, ...]
    code_version: str = ""
    """`pipelines.code.code_version` of the stage's module: which code made the outputs."""
    run_id: str | None = None
    summary: Mapping[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        run = f" (MLflow run {self.run_id})" if self.run_id else ""
        return f"{self.stage}: wrote {', '.join(self.outputs) or 'nothing'}{run}"

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "outputs": list(self.outputs),
            "code_version": self.code_version,
            "run_id": self.run_id,
            "summary": dict(self.summary),
        }


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


def read_json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in `path`, or None where the file is missing, unreadable or holds something else."""
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None


def write_json(path: Path, data: Any) -> None:
    write_json_atomic(path, data)


def replace_folder(source: Path, destination: Path) -> None:
    """`source` copied to `destination` byte for byte (a model passed through keeps its digest, so DVC reruns
    nothing downstream), replacing what was there in one rename."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=destination.parent, prefix=f".{destination.name}.") as staging:
        copy = Path(staging) / destination.name
        shutil.copytree(source, copy)
        if destination.exists():
            shutil.rmtree(destination)
        copy.rename(destination)


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


@contextlib.contextmanager
def published_folder(destination: Path, prefix: str) -> Iterator[Path]:
    """A new folder to fill, next to `destination`: when the block ends it replaces `destination`, or, if the
    block raised, it is removed. Readers see the old folder or the whole new one, never a half-written one."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=destination.parent, prefix=prefix))
    try:
        yield staging
        staging.chmod(0o755)  # mkdtemp makes it private
        remove(destination)
        staging.rename(destination)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def main(
    name: str,
    description: str,
    run: Callable[[Params, argparse.Namespace], StageResult],
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
    argv: Sequence[str] | None = None,
) -> int:
    """`python -m pipelines.<name>`: exit 0 (done), 1 (input refused: the report is printed), 2 (bad parameters
    or unreadable input: one line). `dvc repro` runs exactly this."""
    parser = argparse.ArgumentParser(prog=f"python -m pipelines.{name}", description=description)
    params_module.add_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object (for scripts)")
    if add_arguments is not None:
        add_arguments(parser)
    args = parser.parse_args(argv)

    def work() -> None:
        result = run(params_module.from_args(args), args)
        print(json.dumps(to_json(result.to_json()), sort_keys=True) if args.json else result.line())

    return exit_status(name, work)


def exit_status(name: str, work: Callable[[], int | None]) -> int:
    """Run `work` for the command `name`: its exit status (0 when it returns None), 1 when it refuses its input
    (`StageFailed`: the report is printed), 2 for bad parameters or unreadable input (one line)."""
    try:
        return work() or 0
    except StageFailed as failure:
        print(str(failure), file=sys.stderr)
        return 1
    except Dl2Error as error:
        print(f"{name}: error: {error}", file=sys.stderr)
        return 2


def main_without_arguments(
    name: str, description: str, run: Callable[[Params], StageResult], argv: Sequence[str] | None = None
) -> int:
    """`main` of a stage with no command-line arguments of its own."""
    return main(name, description, lambda params, _args: run(params), None, argv)
