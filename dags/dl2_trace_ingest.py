"""dl2_trace_ingest: copy new trace data into data/ingested (versioned by a manifest of sha256s), then validate it.

Produces the asset `dl2://traces/validated`, which schedules `dl2_warmup`. Both stages skip unchanged input, so a
daily run with no new data changes nothing.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import Asset, Param, dag, task

VALIDATED_TRACES = Asset("dl2://traces/validated")


@dag(
    dag_id="dl2_trace_ingest",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=5)},
    params={
        "smoke": Param(False, type="boolean", description="the smoke profile (tiny budgets)"),
        "root": Param("", type="string", description="folder for data/, models/, reports/ (empty: the repository)"),
        "params_file": Param("", type="string", description="params file (empty: the repository's params.yaml)"),
        "set": Param([], type="array", description="parameter overrides, e.g. ['warmup.epochs=3']"),
    },
    tags=["dl2", "data"],
)
def dl2_trace_ingest() -> None:
    @task
    def ingest(params: dict[str, Any] | None = None) -> dict[str, Any]:
        from pipelines import dag_tasks

        return dag_tasks.ingest(params)

    @task(outlets=[VALIDATED_TRACES])
    def validate(ingested: dict[str, Any], params: dict[str, Any] | None = None) -> dict[str, Any]:
        from pipelines import dag_tasks

        return dag_tasks.validate_traces(params)

    validate(ingest())


dl2_trace_ingest()
