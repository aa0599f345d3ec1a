"""dl2_warmup: training workloads from the validated traces, supervised warm-up, then register a challenger.

Scheduled by the asset `dl2://traces/validated` (`dl2_trace_ingest`); produces `dl2://models/dl2-policy/challenger`,
which schedules `dl2_promote`. Each stage is skipped when its inputs are unchanged, and registering an already
registered model reuses its version.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import Asset, dag, task

from pipelines.dag_defaults import default_args, run_params

VALIDATED_TRACES = Asset("dl2://traces/validated")
CHALLENGER = Asset("dl2://models/dl2-policy/challenger")


@dag(
    dag_id="dl2_warmup",
    schedule=[VALIDATED_TRACES],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args=default_args(),
    params=run_params("warmup.epochs=3"),
    tags=["dl2", "training"],
)
def dl2_warmup() -> None:
    @task
    def workloads(params: dict[str, Any] | None = None) -> dict[str, Any]:
        from pipelines import dag_tasks

        return dag_tasks.workloads(params)

    @task
    def warmup(built: dict[str, Any], params: dict[str, Any] | None = None) -> dict[str, Any]:
        from pipelines import dag_tasks

        return dag_tasks.warmup(params)

    @task(outlets=[CHALLENGER])
    def register(trained: dict[str, Any], params: dict[str, Any] | None = None) -> dict[str, Any]:
        from pipelines import dag_tasks

        return dag_tasks.register(params, model="warmup", with_metrics=False)

    register(warmup(workloads()))


dl2_warmup()
