"""Where dl2 finds its shipped data: `data/` at the repository root, or `$DL2_DATA_DIR`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def data_dir() -> Path:
    return Path(os.environ.get("DL2_DATA_DIR", REPO_ROOT / "data"))


def reference_dir() -> Path:
    """The DL2 authors' measured speeds, validation workloads and results."""
    return data_dir() / "reference" / "dl2-official"


def traces_dir() -> Path:
    """Slices of real cluster traces (Philly, Alibaba GPU 2023)."""
    return data_dir() / "traces"


def git_commit(root: Path = REPO_ROOT) -> str:
    """HEAD of the git repository at `root` ('unknown' outside git): which code produced a result."""
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else "unknown"
