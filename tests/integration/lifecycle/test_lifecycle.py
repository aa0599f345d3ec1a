"""`python -m pipelines.lifecycle` (what `make demo` runs), end to end in a sandbox copy of the repository at smoke
size: DVC, the stages, registration and the gate, the final table; a second run changes nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pipelines import sandbox


@pytest.mark.slow
def test_the_lifecycle_runs_end_to_end_and_a_second_run_changes_nothing(tmp_path: Path) -> None:
    root = sandbox.make(tmp_path / "repo", overrides={"data": {"traces": ["philly"]}})
    first = sandbox.run(root, [sys.executable, "-m", "pipelines.lifecycle"], timeout_s=900)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    text = first.stdout
    steps = (
        "1/7 DVC",
        "2/7 dvc repro",
        "3/7 dvc push",
        "4/7 Register",
        "5/7 Promotion gate",
        "6/7 The loop",
        "7/7 Where",
    )
    for step in steps:
        assert step in text, step
    looped = "no champion: nothing to run in the cluster" not in text
    if looped:  # the champion ran on the local cluster: shadow, fine-tune on its records, gate, active
        for part in ("a. shadow", "decision records in work/decisions/dl2-local", "b. learn", "collect:", "c. active"):
            assert part in text, part
        loop = json.loads((root / "reports" / "cluster_loop.json").read_text())
        assert loop["shadow"]["resizes"] == 0 and loop["active"]["avg_jct_h"] > 0
    assert "promotion gate on authors-tiny" in text and "verdict:" in text
    assert "mlflow ui --backend-store-uri sqlite:///mlruns/mlflow.db" in text
    decision = json.loads((root / "reports" / "promotion.json").read_text())
    assert set(decision["roles"].values()) >= {"challenger", "incumbent", "teacher"}
    assert "v1  aliases: challenger" in text or "v1  aliases: champion" in text
    lock = (root / "dvc.lock").read_text()
    stamps = {p: p.stat().st_mtime_ns for p in (root / "reports").rglob("*") if p.is_file()}

    second = sandbox.run(root, [sys.executable, "-m", "pipelines.lifecycle"], timeout_s=900)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "Running stage" not in second.stdout  # DVC: every stage up to date
    assert "already registered" in second.stdout
    assert not looped or "up to date: v" in second.stdout
    assert "recorded earlier; nothing changed" in second.stdout or "is already champion" in second.stdout
    assert (root / "dvc.lock").read_text() == lock
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # no report rewritten
