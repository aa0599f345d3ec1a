"""dl2_online_finetune: every hour, fine-tune the champion on the decision records logged since the last run.

collect (the records past the watermark, copied into a window named after the run) -> validate them -> fine-tune
the champion with RL on that feedback plus simulated rollouts -> evaluate -> register a challenger (asset
`dl2://models/dl2-policy/challenger`, which schedules `dl2_promote`) -> commit the window into the watermark. One
run at a time, so windows follow each other; a re-run of the same run reads the same window, and a failed run
leaves its records to the next one. With no new records the champion is still fine-tuned on simulated rollouts;
the stages' digests make later hours with no records and the same champion train and register nothing.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import Asset, dag, task

from pipelines.dag_defaults import default_args, run_params

CHALLENGER = Asset("dl2://models/dl2-policy/challenger")


@dag(
    dag_id="dl2_online_finetune",
    schedule="@hourly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args=default_args(),
    params=run_params("finetune.iterations=3"),
    tags=["dl2", "training"],
)
def dl2_online_finetune() -> None:
    @task
    def collect(params: dict[str, Any] | None = None, run_id: str | None = None) -> dict[str, Any]:
        from pipelines import dag_tasks

        return dag_tasks.collect_feedback(params, window_id=str(run_id))

    @task
    def validate(window: dict[str, Any], params: dict[str, Any] | None = None) -> dict[str, Any]:
        from pipelines import dag_tasks

        return dag_tasks.validate_feedback(params, window["window"])

    @task
    def finetune(
        window: dict[str, Any], validated: dict[str, Any], params: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        from pipelines import dag_tasks

        return dag_tasks.finetune(params, window["window"])

    @task
    def evaluate(tuned: dict[str, Any], params: dict[str, Any] | None = None) -> dict[str, Any]:
        from pipelines import dag_tasks

        return dag_tasks.evaluate(params)

    @task(outlets=[CHALLENGER])
    def register(evaluated: dict[str, Any], params: dict[str, Any] | None = None) -> dict[str, Any]:
        from pipelines import dag_tasks

        return dag_tasks.register(params, model="finetune")

    @task
    def commit(
        registered: dict[str, Any], params: dict[str, Any] | None = None, run_id: str | None = None
    ) -> dict[str, Any]:
        from pipelines import dag_tasks

        return dag_tasks.commit_feedback(params, window_id=str(run_id))

    window = collect()
    commit(register(evaluate(finetune(window, validate(window)))))


dl2_online_finetune()
