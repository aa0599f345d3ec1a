"""dl2_trace_ingest: version new trace data (`ingest`) and validate it (`validate`, Great Expectations), through
DVC. When the ingested data changed, the asset `dl2://traces/validated` gets an event saying what changed, which
schedules `dl2_warmup`; a day with no new data runs nothing and schedules nothing. A failed validation fails at
once (no retry: the same data fails the same way).
"""

from __future__ import annotations

from typing import Any

import dl2_airflow as dl2
import pendulum
from airflow.sdk import Asset, dag, task
from airflow.sdk.exceptions import AirflowSkipException

VALIDATED_TRACES = Asset("dl2://traces/validated")


@dag(
    dag_id="dl2_trace_ingest",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args=dl2.default_args(),
    tags=["dl2", "data"],
)
def dl2_trace_ingest() -> None:
    @task(pool=dl2.POOL)
    def ingest() -> dict[str, Any]:
        return dl2.dvc_stage("ingest")

    @task(pool=dl2.POOL)
    def validate(ingested: dict[str, Any]) -> dict[str, Any]:
        return dl2.dvc_stage("validate")

    @task(outlets=[VALIDATED_TRACES])
    def publish(ingested: dict[str, Any], validated: dict[str, Any], *, outlet_events: Any = None) -> dict[str, Any]:
        if not ingested["changed"]:
            raise AirflowSkipException("the ingested traces did not change: no asset event")
        extra = dl2.changed_extra({"ingest": ingested["outs"], "validate": validated["outs"]})
        outlet_events[VALIDATED_TRACES].extra = extra
        return extra

    @task(pool=dl2.POOL, trigger_rule="none_failed")
    def commit(validated: dict[str, Any], run_id: str | None = None) -> dict[str, Any]:
        return dl2.commit(f"dl2_trace_ingest {run_id}: ingested and validated traces")

    ingested = ingest()
    # ignore[arg-type]: Airflow types a task's call with its function's parameters; it takes upstream XComArgs
    validated = validate(ingested)  # type: ignore[arg-type]
    publish(ingested, validated) >> commit(validated)  # type: ignore[arg-type]


dl2_trace_ingest()
