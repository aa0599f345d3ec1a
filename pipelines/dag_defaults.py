"""What every dl2 DAG declares alike: its run parameters and its retry policy (imported when Airflow parses
`dags/`, so only `airflow.sdk` here, nothing heavy)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import Param


def run_params(override_example: str) -> dict[str, Param]:
    """The parameters `pipelines.dag_tasks.context` reads from a DAG run's conf."""
    return {
        "smoke": Param(False, type="boolean", description="the smoke profile (tiny budgets)"),
        "root": Param("", type="string", description="folder for data/, models/, reports/ (empty: the repository)"),
        "params_file": Param("", type="string", description="params file (empty: the repository's params.yaml)"),
        "set": Param([], type="array", description=f"parameter overrides, e.g. ['{override_example}']"),
    }


def default_args(retries: int = 2) -> dict[str, Any]:
    return {"retries": retries, "retry_delay": timedelta(minutes=5)}
