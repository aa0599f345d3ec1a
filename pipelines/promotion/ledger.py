"""The deployment ledger: numbered records under `data/deployments/` saying which version should run.

`<n>-dl2-policy-v<version>.json` (or `-none` when no version should run), written atomically and never
overwritten; the latest record is the desired state. `publish` writes a deploy record, then moves `champion`;
`rollback` puts the previous champion back (or none), then records it.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dl2.paths import git_commit
from pipelines import registry
from pipelines.registry import CHAMPION, NAME, Version
from pipelines.stage import Layout

RECORD = re.compile(r"^(?P<n>\d+)-dl2-policy-(?:v(?P<version>\d+)|none)\.json$")


def now() -> str:
    """The time of a record or a decision (UTC, to the second)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def deployments_dir(layout: Layout) -> Path:
    return layout.root / "data" / "deployments"


def records(directory: Path) -> list[tuple[int, Path]]:
    """Deployment records in order."""
    if not directory.is_dir():
        return []
    found = [(int(m["n"]), path) for path in directory.iterdir() if (m := RECORD.match(path.name))]
    return sorted(found)


def latest_record(directory: Path) -> dict[str, Any] | None:
    found = records(directory)
    return json.loads(found[-1][1].read_text()) if found else None


def write_record(directory: Path, document: Mapping[str, Any]) -> Path:
    """Write the next numbered record; an existing record is never replaced (a racing writer takes the next n)."""
    directory.mkdir(parents=True, exist_ok=True)
    version = document.get("version")
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".record-", suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as stream:
            json.dump({**document}, stream, indent=2, sort_keys=True)
            stream.write("\n")
        os.chmod(temporary, 0o644)
        while True:
            n = (records(directory)[-1][0] + 1) if records(directory) else 1
            path = directory / f"{n:04d}-{NAME}-{f'v{version}' if version is not None else 'none'}.json"
            try:
                os.link(temporary, path)  # atomic, and fails instead of overwriting
            except FileExistsError:
                continue
            return path
    finally:
        Path(temporary).unlink(missing_ok=True)


def publish(layout: Layout, challenger: Version, previous: Version | None, scores: Mapping[str, Any]) -> Path:
    """Record the deployment, then move `champion` (the record first: the latest record is the desired state)."""
    path = write_record(
        deployments_dir(layout),
        {
            "action": "deploy",
            "model": NAME,
            "version": challenger.version,
            "uri": challenger.uri,
            "digest": challenger.digest,
            "previous_version": previous.version if previous else None,
            "metrics": dict(scores),
            "created_at": now(),
            "git_commit": git_commit(),
        },
    )
    registry.set_alias(CHAMPION, challenger.version)
    return path


def rollback(layout: Layout, failed: Version, previous: Version | None, reason: str) -> Path:
    """Put the previous champion back (or no champion, if there was none) and record it."""
    if previous is not None:
        registry.set_alias(CHAMPION, previous.version)
    else:
        registry.delete_alias(CHAMPION)
    return write_record(
        deployments_dir(layout),
        {
            "action": "rollback",
            "model": NAME,
            "version": previous.version if previous else None,
            "uri": previous.uri if previous else None,
            "digest": previous.digest if previous else None,
            "rolled_back_version": failed.version,
            "reason": reason,
            "created_at": now(),
            "git_commit": git_commit(),
        },
    )
