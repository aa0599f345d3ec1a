"""dl2_warmup: the training workloads and the supervised warm-up, through DVC, then the warm-up registered as
`challenger`. Scheduled by the asset `dl2://traces/validated` (`dl2_trace_ingest`); when it registers a new version
the asset `dl2://models/dl2-policy/challenger` gets an event naming it, which schedules `dl2_promote`. Stages DVC
finds up to date do nothing, and an already registered model makes no event.
"""

from __future__ import annotations

from typing import Any

import dl2_airflow as dl2
import pendulum
from airflow.sdk import Asset, dag, task
from airflow.sdk.exceptions import AirflowSkipException

VALIDATED_TRACES = Asset("dl2://traces/validated")
CHALLENGER = Asset("dl2://models/dl2-policy/challenger")


@dag(
    dag_id="dl2_warmup",
    schedule=[VALIDATED_TRACES],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args=dl2.default_args(),
    tags=["dl2", "training"],
)
def dl2_warmup() -> None:
    @task(pool=dl2.POOL)
    def workloads() -> dict[str, Any]:
        return dl2.dvc_stage("workloads")

    @task(pool=dl2.POOL, execution_timeout=dl2.TRAINING)
    def warmup(built: dict[str, Any]) -> dict[str, Any]:
        return dl2.dvc_stage("warmup")

    @task
    def register(trained: dict[str, Any]) -> dict[str, Any]:
        return dl2.pipeline("register", "--model", "models/staging/warmup", "--no-metrics")

    @task(outlets=[CHALLENGER])
    def publish(registered: dict[str, Any], *, outlet_events: Any = None) -> dict[str, Any]:
        summary = registered["summary"]
        if not summary["created"]:
            raise AirflowSkipException(f"dl2-policy v{summary['version']} was registered before: no asset event")
        extra = dl2.changed_extra({"version": summary["version"], "digest": summary["digest"], "model": "warmup"})
        outlet_events[CHALLENGER].extra = extra
        return extra

    @task(pool=dl2.POOL, trigger_rule="none_failed")
    def commit(registered: dict[str, Any], run_id: str | None = None) -> dict[str, Any]:
        return dl2.commit(f"dl2_warmup {run_id}: warm-up")

    # ignore[arg-type]: Airflow types a task's call with its function's parameters; it takes upstream XComArgs
    registered = register(warmup(workloads()))  # type: ignore[arg-type]
    publish(registered) >> commit(registered)  # type: ignore[arg-type]


dl2_warmup()
