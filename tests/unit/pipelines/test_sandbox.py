"""The sandbox copy (`pipelines.sandbox`) starts from nothing, also in a checkout where `make demo` ran."""

from __future__ import annotations

import subprocess
from pathlib import Path

from pipelines.sandbox import source_files


def test_what_the_pipeline_and_the_loop_wrote_is_not_copied(tmp_path: Path) -> None:
    written = ["dvc.lock", "reports/online.json", "data/feedback/clusters.dvc", "data/feedback/clusters/log/a.jsonl",
               "data/deployments/0001-dl2-policy-v1.json", "data/feedback/simulated/x/segment-0.jsonl"]  # fmt: skip
    sources = ["params.yaml", "pipelines/stage.py", "data/feedback/.gitignore"]
    for name in written + sources:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x\n")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    assert sorted(source_files(tmp_path)) == sorted(sources)
