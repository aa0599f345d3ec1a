"""dl2_promote: the gate. Runs whenever a new challenger is registered (asset
`dl2://models/dl2-policy/challenger`) and on demand. The challenger becomes champion only if it beats what it would
replace (the champion, else the incumbent scheduler) on the held-out workloads by `promote.margin`, safely; then it
is published and confirmed, or rolled back. A rejected challenger fails the run at once (no retry: the same
models give the same verdict), and so does a rollback; a re-run with the same challenger and champion replays
the recorded decision. The decision and deployment records are committed.
"""

from __future__ import annotations

from typing import Any

import dl2_airflow as dl2
import pendulum
from airflow.sdk import Asset, dag, task
from airflow.sdk.exceptions import AirflowFailException

CHALLENGER = Asset("dl2://models/dl2-policy/challenger")


@dag(
    dag_id="dl2_promote",
    schedule=[CHALLENGER],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args=dl2.default_args(),
    tags=["dl2", "deployment"],
)
def dl2_promote() -> None:
    @task(pool=dl2.POOL, execution_timeout=dl2.TRAINING)
    def promote(run_id: str | None = None) -> dict[str, Any]:
        try:
            result = dl2.pipeline("promote")
        finally:  # a rollback fails the task, and its records are committed all the same
            dl2.commit(f"dl2_promote {run_id}: promotion gate")
        summary: dict[str, Any] = result["summary"]
        if summary.get("status") == "rejected":
            raise AirflowFailException(f"rejected dl2-policy v{summary['version']}: {summary['reason']}")
        return summary

    promote()


dl2_promote()
