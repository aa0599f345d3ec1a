"""Collect cluster feedback: the decision records controllers logged since the last collection become versioned
training data.

Controllers (`dl2 serve`, or a simulated cluster) append decision records to live logs under `data.incoming`: a
folder of segments per cluster (each written once, atomically) or `.jsonl` files that grow by lines; or, where the
controllers keep their records in object storage, the same folders under an `s3://` URL. `collect`
takes what each log gained since the watermark, validates it with the decision-log suite (`pipelines.validate`),
and

- writes a log's good records as one new segment under `data/feedback/clusters/<log>/` (with the log's
  `cluster.json`), where the `finetune` stage reads them;
- moves a log's records that fail validation to `data/quarantine/<window>/<log>/` with the validation report:
  nothing is lost, the good logs are still used, and the run says what it skipped;
- advances the watermark past both (`data/feedback/clusters/WATERMARK.json`, versioned with the records).

Then `dvc add data/feedback/clusters` versions the collected records (`dvc push` stores them), so `dvc repro`
sees new feedback as a changed dep of `finetune` and nothing else decides whether it reruns. Collecting again
with no new records changes nothing. A line still being appended (no newline yet) waits for the next window.

    python -m pipelines.collect [--window ID]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipelines.params import Params
from pipelines.stage import Layout, StageResult, main, write_json

CLUSTER_FILE = "cluster.json"
WATERMARK = "WATERMARK.json"


@dataclass(frozen=True, slots=True)
class Taken:
    """What one log gained since the watermark: its new lines, and how to advance the watermark past them."""

    log: str
    """The log's path relative to `data.incoming`."""
    lines: tuple[str, ...]
    segments: tuple[str, ...] = ()
    """New segment files (a folder log)."""
    lines_to: int = 0
    """Lines consumed after this window (a file log)."""
    cluster: bytes | None = None
    """The log's cluster description (`cluster.json`), if it has one."""


@dataclass(frozen=True, slots=True)
class Collection:
    window: str
    collected: dict[str, int] = field(default_factory=dict)
    """Log -> records added to the training feedback."""
    quarantined: dict[str, str] = field(default_factory=dict)
    """Log -> where its records went, with the reason."""


def clusters_dir(layout: Layout) -> Path:
    return layout.root / "data" / "feedback" / "clusters"


def quarantine_dir(layout: Layout, window: str) -> Path:
    return layout.root / "data" / "quarantine" / safe_name(window)


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "window"


def watermark(layout: Layout) -> dict[str, Any]:
    """{log: {"segments": [...], "lines": n}} of what earlier collections consumed."""
    try:
        data = json.loads((clusters_dir(layout) / WATERMARK).read_text())
    except (OSError, ValueError):
        return {}
    return data.get("logs", {}) if isinstance(data, dict) and isinstance(data.get("logs"), dict) else {}


def new_records(incoming: Path | str, consumed: Mapping[str, Any]) -> list[Taken]:
    """Per log under `incoming` (a folder, or the object-storage URL the controllers write to), what it gained
    past the watermark (logs with nothing new left out)."""
    from dl2.sim.record_store import RecordStore, is_url
    from pipelines.feedback_logs import find_logs

    if is_url(incoming):
        return _from_store(RecordStore(incoming), consumed)
    assert isinstance(incoming, Path)
    found = []
    for log in find_logs(incoming):
        relative = str(log.relative_to(incoming))
        seen = consumed.get(relative, {})
        taken = _from_folder(log, relative, seen) if log.is_dir() else _from_file(log, relative, seen)
        if taken is not None and any(line.strip() for line in taken.lines):
            found.append(taken)
    return found


def _from_folder(log: Path, relative: str, seen: Mapping[str, Any]) -> Taken | None:
    done = set(seen.get("segments", []))
    new = [p for p in sorted(log.glob("segment-*.jsonl")) if p.name not in done]
    if not new:
        return None
    lines = tuple(line for segment in new for line in _text(segment.read_bytes()).splitlines())
    cluster = log / CLUSTER_FILE
    described = cluster.read_bytes() if cluster.is_file() else None
    return Taken(relative, lines, tuple(p.name for p in new), cluster=described)


def _from_store(root: Any, consumed: Mapping[str, Any]) -> list[Taken]:
    """A controller's logs in object storage: one folder of segments per cluster under the root URL."""
    found = []
    for name in root.folders():
        store = root.child(name)
        done = set(consumed.get(name, {}).get("segments", []))
        new = [segment for segment in store.names(prefix="segment-", suffix=".jsonl") if segment not in done]
        lines = tuple(line for segment in new for line in _text(store.read_bytes(segment) or b"").splitlines())
        if any(line.strip() for line in lines):
            found.append(Taken(name, lines, tuple(new), cluster=store.read_bytes(CLUSTER_FILE)))
    return found


def _from_file(log: Path, relative: str, seen: Mapping[str, Any]) -> Taken | None:
    data = log.read_bytes()
    lines = _text(data).splitlines()
    complete = len(lines) if data.endswith(b"\n") else len(lines) - 1
    start = int(seen.get("lines", 0))
    if complete <= start:
        return None
    cluster = log.parent / CLUSTER_FILE
    return Taken(
        relative,
        tuple(lines[start:complete]),
        lines_to=complete,
        cluster=cluster.read_bytes() if cluster.is_file() else None,
    )


def _text(data: bytes) -> str:
    """A log's bytes as text that writes back to the same bytes: bytes that are not UTF-8 reach validation (and
    quarantine) as they were, rather than being replaced or stopping the collection."""
    return data.decode("utf-8", errors="surrogateescape")


def collect(params: Params, layout: Layout, window: str) -> Collection:
    """Move the records logged since the watermark into the training feedback (or quarantine), then advance it."""
    from dl2.sim.record_store import is_url
    from pipelines.validate import failure_summary, validate_log

    incoming = params.data.incoming if is_url(params.data.incoming) else layout.root / params.data.incoming
    consumed = watermark(layout)
    result = Collection(window)
    staging = layout.root / "work" / "collect" / safe_name(window)
    for taken in new_records(incoming, consumed):
        name = taken.log.removesuffix(".jsonl")
        candidate = staging / name
        if candidate.exists():
            shutil.rmtree(candidate)
        candidate.mkdir(parents=True)
        target = clusters_dir(layout) / name
        number = len(list(target.glob("segment-*.jsonl"))) + 1 if target.is_dir() else 1
        segment = f"segment-{number:06d}-{safe_name(window)}.jsonl"  # numbered: segments sort in log order
        (candidate / segment).write_bytes(
            "".join(f"{line}\n" for line in taken.lines).encode("utf-8", "surrogateescape")
        )
        if taken.cluster is not None:
            (candidate / CLUSTER_FILE).write_bytes(taken.cluster)
        report = _validate(validate_log, candidate, params, layout)
        if report is None or report.get("success"):
            target.mkdir(parents=True, exist_ok=True)
            for path in candidate.iterdir():
                shutil.move(str(path), str(target / path.name))  # same file system: a rename per file
            result.collected[taken.log] = sum(1 for line in taken.lines if line.strip())
        else:
            target = quarantine_dir(layout, window) / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(candidate), str(target))
            write_json(target / "validation.json", report)
            reason = failure_summary(report)
            result.quarantined[taken.log] = f"{layout.relative(target)}: {reason}"
        _advance(consumed, taken)
    shutil.rmtree(staging, ignore_errors=True)
    if result.collected or result.quarantined:
        clusters_dir(layout).mkdir(parents=True, exist_ok=True)
        write_json(clusters_dir(layout) / WATERMARK, {"logs": consumed, "last_window": window})
    return result


def _validate(validate_log: Any, candidate: Path, params: Params, layout: Layout) -> dict[str, Any] | None:
    """The suite's report on the candidate records; records that cannot even be read are a failed report."""
    from dl2.core import InputError
    from dl2.core.log_format import read_cluster

    try:
        report: dict[str, Any] = validate_log(candidate, params, layout)
        if (candidate / CLUSTER_FILE).is_file():
            read_cluster(candidate / CLUSTER_FILE)
    except InputError as error:
        return {"success": False, "name": candidate.name, "kind": "decision log", "path": layout.relative(candidate),
                "evaluated": 0, "failed": 1, "expectations": [], "data_docs": "", "error": str(error)}  # fmt: skip
    return report


def _advance(consumed: dict[str, Any], taken: Taken) -> None:
    entry = consumed.setdefault(taken.log, {"segments": [], "lines": 0})
    entry["segments"] = sorted(set(entry.get("segments", [])) | set(taken.segments))
    entry["lines"] = max(int(entry.get("lines", 0)), taken.lines_to)


def version_with_dvc(layout: Layout) -> bool:
    """`dvc add` the collected records (when the root is a DVC repository); whether it ran."""
    if not (layout.root / ".dvc").is_dir() or not clusters_dir(layout).is_dir():
        return False
    command = [sys.executable, "-m", "dvc", "add", "-q", str(clusters_dir(layout).relative_to(layout.root))]
    subprocess.run(command, cwd=layout.root, check=True, capture_output=True, text=True)
    return True


def run(params: Params, layout: Layout | None = None, window: str | None = None) -> StageResult:
    layout = layout or Layout()
    window = window or datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    result = collect(params, layout, window)
    changed = bool(result.collected or result.quarantined)
    versioned = version_with_dvc(layout) if changed else False
    outputs = (layout.relative(clusters_dir(layout)),) if result.collected else ()
    summary = {
        "window": window,
        "collected": result.collected,
        "records": sum(result.collected.values()),
        "quarantined": result.quarantined,
        "changed": changed,
        "dvc_add": versioned,
    }
    return StageResult("collect", outputs, summary=summary)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--window", default=None, help="name of this collection (default: the UTC time)")


def _run(params: Params, args: argparse.Namespace) -> StageResult:
    result = run(params, window=args.window)
    for log, where in result.summary["quarantined"].items():
        print(f"collect: quarantined {log}: {where}", file=sys.stderr)
    return result


def cli(argv: Sequence[str] | None = None) -> int:
    return main("collect", "Collect new decision records into the versioned training feedback.", _run, _arguments, argv)


if __name__ == "__main__":
    raise SystemExit(cli())
