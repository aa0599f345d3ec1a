"""dl2_promote: the gate. The challenger becomes champion only if it beats the champion and the best heuristic on
the held-out workloads by `promote.margin` with no safety violation; then it is published and confirmed, or rolled
back (the task fails). Runs whenever a challenger is registered (asset `dl2://models/dl2-policy/challenger`) and on
demand; a re-run with the same challenger and champion changes nothing.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import Asset, dag, task

from pipelines.dag_defaults import default_args, run_params

CHALLENGER = Asset("dl2://models/dl2-policy/challenger")


@dag(
    dag_id="dl2_promote",
    schedule=[CHALLENGER],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args=default_args(retries=1),
    params=run_params("promote.margin=0.05"),
    tags=["dl2", "deployment"],
)
def dl2_promote() -> None:
    @task
    def promote(params: dict[str, Any] | None = None) -> dict[str, Any]:
        from pipelines import dag_tasks

        return dag_tasks.promote(params)

    promote()


dl2_promote()
