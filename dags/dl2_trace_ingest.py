"""dl2_trace_ingest: copy new trace data into data/ingested (versioned by a manifest of sha256s), then validate it.

Produces the asset `dl2://traces/validated`, which schedules `dl2_warmup`. Both stages skip unchanged input, so a
daily run with no new data changes nothing.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import Asset, dag, task

from pipelines.dag_defaults import default_args, run_params

VALIDATED_TRACES = Asset("dl2://traces/validated")


@dag(
    dag_id="dl2_trace_ingest",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args=default_args(),
    params=run_params("warmup.epochs=3"),
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
