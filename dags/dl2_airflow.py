"""What the dl2 DAGs share (not a DAG; `.airflowignore` keeps the DAG processor from parsing it alone).

Every task runs a command in the dl2 repository the DAGs operate on (the *root*: the Airflow Variable `dl2_root`,
else the repository this folder belongs to) with the interpreter Airflow runs on, so the root's own code and
`params.yaml` decide what happens (its `profile` included): the same as a person typing the command there.

- Stages run through DVC (`dvc repro --single-item <stage>`): DVC alone decides whether a stage is stale, and a
  scheduled run, `dvc repro` and a person at the shell agree. DVC locks the repository, so every task that runs
  DVC or writes what DVC tracks takes a slot of the one-slot pool `dl2_dvc` (`airflow pools set dl2_dvc 1
  "dl2: DVC locks the repository"`), whichever DAG it belongs to.
- A command that refuses its input (exit 1: a failed validation, a rolled-back promotion) or its parameters (exit
  2) fails at once (`AirflowFailException`): a retry would fail the same way. Anything else may be transient and
  is retried.
- What a run produced is committed: `dvc.lock` and the small tracked outputs go into a git commit of the root
  (naming the DAG run), and `dvc push` stores the data in the remote.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

REPOSITORY = Path(__file__).resolve().parent.parent
POOL = "dl2_dvc"
"""The one-slot pool of every task that runs DVC or writes what it tracks."""
ROOT_VARIABLE = "dl2_root"
SHORT = timedelta(minutes=15)
"""`execution_timeout` of tasks that copy, check, register or commit."""
TRAINING = timedelta(hours=3)
"""`execution_timeout` of the training and evaluation stages (the full profile's budgets are minutes)."""
TRACKED = ("dvc.lock", "reports", "data/deployments", "data/feedback", "data/quarantine")
"""What a DAG run commits to git in the root (DVC's pointers, the small reports, deployment records)."""
GIT_IDENTITY = ("-c", "user.name=dl2 airflow", "-c", "user.email=dl2-airflow@localhost")


def default_args() -> dict[str, Any]:
    return {"retries": 2, "retry_delay": timedelta(minutes=5), "execution_timeout": SHORT}


def root() -> Path:
    """The repository the DAGs operate on (read at run time, never when the DAG file is parsed)."""
    from airflow.sdk import Variable

    value = Variable.get(ROOT_VARIABLE, default=None)
    return Path(value) if value else REPOSITORY


def command(arguments: Sequence[str], where: Path | None = None) -> str:
    """Run a command in the root, its output in the task log; its stdout. Exit 1 or 2 (the input or the
    parameters were refused) is a non-retryable failure, any other failure a retryable one."""
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    from pipelines.environment import environment

    location = where or root()
    print(f"$ {' '.join(arguments)}   (in {location})", flush=True)
    done = subprocess.run(list(arguments), cwd=location, env=environment(), capture_output=True, text=True)
    for stream in (done.stdout, done.stderr):
        if stream.strip():
            print(stream.rstrip(), flush=True)
    if done.returncode in (1, 2):
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        raise AirflowFailException(f"{arguments[2] if len(arguments) > 2 else arguments[0]}: {last[0]}")
    if done.returncode != 0:
        raise AirflowException(f"`{' '.join(arguments)}` exited with {done.returncode}")
    return done.stdout


def pipeline(module: str, *arguments: str) -> dict[str, Any]:
    """`python -m pipelines.<module> --json ARGUMENTS`: the stage's result."""
    output = command([sys.executable, "-m", f"pipelines.{module}", "--json", *arguments])
    result: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    return result


def lock_outs(stage: str) -> dict[str, str]:
    """The outputs of `stage` as `dvc.lock` records them (path -> md5)."""
    import yaml

    path = root() / "dvc.lock"
    if not path.is_file():
        return {}
    entry = (yaml.safe_load(path.read_text()) or {}).get("stages", {}).get(stage, {})
    return {out["path"]: str(out.get("md5")) for out in entry.get("outs", [])}


def dvc_stage(stage: str) -> dict[str, Any]:
    """`dvc repro --single-item STAGE`; which outputs changed (none when DVC found the stage up to date)."""
    before = lock_outs(stage)
    command([sys.executable, "-m", "dvc", "repro", "--single-item", stage])
    after = lock_outs(stage)
    changed = {
        path: {"before": before.get(path), "after": md5} for path, md5 in after.items() if before.get(path) != md5
    }
    return {"stage": stage, "changed": bool(changed), "outs": changed}


def profile() -> str:
    """The profile the root's params.yaml selects (what every stage of this run uses)."""
    import yaml

    return str((yaml.safe_load((root() / "params.yaml").read_text()) or {}).get("profile", "full"))


def commit(message: str) -> dict[str, Any]:
    """Commit what DVC and the stages recorded (when the root is a git repository), then `dvc push`."""
    location = root()
    committed = None
    if (location / ".git").exists():
        present = [path for path in TRACKED if (location / path).exists()]
        subprocess.run(["git", "add", "-A", "--", *present], cwd=location, check=True)
        staged = subprocess.run(["git", "diff", "--cached", "--quiet"], cwd=location, check=False).returncode
        if staged:
            subprocess.run(["git", *GIT_IDENTITY, "commit", "-q", "-m", message], cwd=location, check=True)
            committed = subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=location, capture_output=True, text=True, check=True
            ).stdout.strip()
    command([sys.executable, "-m", "dvc", "push", "-q"])
    return {"commit": committed, "pushed": True}


def changed_extra(results: Mapping[str, Any]) -> dict[str, Any]:
    """Asset-event metadata: what changed, per stage, and the profile."""
    return {"profile": profile(), **{name: value for name, value in results.items() if value}}
