"""The environment of the commands the lifecycle runs (`dvc`, `python -m pipelines.<stage>`): this
interpreter's folder first on PATH, so `python` in dvc.yaml runs with the project's packages even when the venv
is not activated, and the tools' analytics and progress bars off.

Light on purpose (no import beyond the standard library): the Airflow DAGs import it in their tasks.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

QUIET = {"GX_ANALYTICS_ENABLED": "false", "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", "DVC_NO_ANALYTICS": "1"}
"""Analytics and progress bars off (they would phone home or fill the logs)."""


def environment() -> dict[str, str]:
    """This process's environment with the interpreter's folder first on PATH and `QUIET` as defaults (a value
    already set is kept)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    for key, value in QUIET.items():
        env.setdefault(key, value)
    return env
