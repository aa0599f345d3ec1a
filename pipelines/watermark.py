"""Which decision records online fine-tuning has consumed: a watermark over the logs under `data.feedback`.

Logs only grow: a log folder gains segments (written once, atomically, never changed) and a stand-alone `.jsonl`
file gains lines. The watermark (`work/feedback/watermark.json`) lists, per log, the segments and the number of
lines already consumed. A fine-tuning run first `collect`s a *window*: a copy of the records added since, laid out
like `data.feedback` (with each log's `cluster.json`), under `work/feedback/windows/<window id>/`; it trains on
that window and, once its model is registered, `commit`s the window into the watermark. A window is made once per
id (the Airflow run id), so a re-run of the same interval reads the same records, and committing it twice changes
nothing; a run that fails before `commit` leaves its records to the next window.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipelines.stage import Layout, write_json

MANIFEST = "MANIFEST.json"
CLUSTER_FILE = "cluster.json"


def feedback_root(layout: Layout) -> Path:
    return layout.root / "work" / "feedback"


def window_dir(layout: Layout, window_id: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", window_id).strip("._") or "window"
    return feedback_root(layout) / "windows" / safe


def state(layout: Layout) -> dict[str, Any]:
    """The watermark: {"logs": {log path relative to the feedback folder: {"segments": [...], "lines": n}}}."""
    path = feedback_root(layout) / "watermark.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {"logs": {}}
    return data if isinstance(data, dict) and isinstance(data.get("logs"), dict) else {"logs": {}}


def collect(source: Path, layout: Layout, window_id: str) -> dict[str, Any]:
    """The window of records in `source` past the watermark (made once per `window_id`); its manifest."""
    from pipelines.feedback import find_logs

    window = window_dir(layout, window_id)
    if (window / MANIFEST).is_file():
        return _summary(layout, window, json.loads((window / MANIFEST).read_text()))
    consumed = state(layout)["logs"]
    window.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=window.parent, prefix=f".{window.name}."))
    logs: dict[str, Any] = {}
    try:
        for log in find_logs(source):
            relative = str(log.relative_to(source))
            seen = consumed.get(relative, {})
            taken = (
                _take_folder(log, staging / relative, seen)
                if log.is_dir()
                else _take_file(log, staging / relative, seen)
            )
            if taken is not None:
                logs[relative] = taken
        manifest = {
            "window": window_id,
            "source": layout.relative(source),
            "logs": logs,
            "records": sum(entry["records"] for entry in logs.values()),
        }
        write_json(staging / MANIFEST, manifest)
        staging.chmod(0o755)
        staging.rename(window)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return _summary(layout, window, manifest)


def commit(layout: Layout, window_id: str) -> dict[str, Any]:
    """Advance the watermark past the window's records (idempotent)."""
    window = window_dir(layout, window_id)
    manifest = json.loads((window / MANIFEST).read_text())
    current = state(layout)
    logs = current["logs"]
    for relative, taken in manifest["logs"].items():
        entry = logs.setdefault(relative, {"segments": [], "lines": 0})
        entry["segments"] = sorted(set(entry.get("segments", [])) | set(taken.get("segments", [])))
        entry["lines"] = max(int(entry.get("lines", 0)), int(taken.get("lines_to", 0)))
    committed = sorted(set(current.get("windows", [])) | {window.name})
    write_json(feedback_root(layout) / "watermark.json", {"logs": logs, "windows": committed})
    return {"window": layout.relative(window), "records": manifest["records"], "committed": True}


def _take_folder(log: Path, target: Path, seen: Mapping[str, Any]) -> dict[str, Any] | None:
    done = set(seen.get("segments", []))
    new = [p for p in sorted(log.glob("segment-*.jsonl")) if p.name not in done]
    if not new:
        return None
    target.mkdir(parents=True)
    records = 0
    for segment in new:
        shutil.copyfile(segment, target / segment.name)
        records += sum(1 for line in segment.read_text().splitlines() if line.strip())
    if (log / CLUSTER_FILE).is_file():
        shutil.copyfile(log / CLUSTER_FILE, target / CLUSTER_FILE)
    return {"segments": [p.name for p in new], "records": records}


def _take_file(log: Path, target: Path, seen: Mapping[str, Any]) -> dict[str, Any] | None:
    lines = log.read_text().splitlines()
    start = int(seen.get("lines", 0))
    # only whole lines: a line still being appended (no newline yet) waits for the next window
    complete = len(lines) if log.read_bytes().endswith(b"\n") else len(lines) - 1
    new = lines[start:complete]
    if not any(line.strip() for line in new):
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("".join(line + "\n" for line in new))
    if (log.parent / CLUSTER_FILE).is_file() and not (target.parent / CLUSTER_FILE).exists():
        shutil.copyfile(log.parent / CLUSTER_FILE, target.parent / CLUSTER_FILE)
    return {"lines_from": start, "lines_to": complete, "records": sum(1 for line in new if line.strip())}


def _summary(layout: Layout, window: Path, manifest: Mapping[str, Any]) -> dict[str, Any]:
    return {"window": layout.relative(window), "records": manifest["records"], "logs": len(manifest["logs"])}
