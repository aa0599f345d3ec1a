"""dl2_online_finetune: every hour, learn from the decision records clusters logged since the last run.

collect (the records the controllers logged since the watermark, validated, into `data/feedback/clusters`; a
malformed log is quarantined and the rest used) -> the pipeline's stages through DVC (workloads, warm-up,
simulated feedback, fine-tune on simulated rollouts, `online` steps on every collected record, Harmony's speed model
and placer refit from the same records (`harmony`, for `dl2 extender`), evaluate against the heuristics and the
incumbent; DVC reruns only what new records or changed code made stale: new records rerun `online`, `harmony` and
`evaluate`, not RL) -> register the result as `challenger` -> an event of the asset
`dl2://models/dl2-policy/challenger` when that is a new version (it schedules `dl2_promote`) -> commit and push
what the run produced. One run at a time; an hour with no new records trains nothing.
"""

from __future__ import annotations

from typing import Any

import dl2_airflow as dl2
import pendulum
from airflow.sdk import Asset, dag, task
from airflow.sdk.exceptions import AirflowSkipException

CHALLENGER = Asset("dl2://models/dl2-policy/challenger")
STAGES = ("workloads", "warmup", "feedback", "finetune", "online", "harmony", "evaluate")
"""What a fine-tuned challenger depends on, in order, and Harmony's refit from the same records (upstream stages
are no-ops once they have run)."""


@dag(
    dag_id="dl2_online_finetune",
    schedule="@hourly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args=dl2.default_args(),
    tags=["dl2", "training"],
)
def dl2_online_finetune() -> None:
    @task(pool=dl2.POOL)
    def collect(run_id: str | None = None) -> dict[str, Any]:
        summary: dict[str, Any] = dl2.pipeline("collect", "--window", str(run_id))["summary"]
        for log, where in summary["quarantined"].items():
            print(f"quarantined {log}: {where}")
        return summary

    def stage(name: str) -> Any:
        timeout = dl2.TRAINING if name in ("warmup", "finetune", "online", "harmony", "evaluate") else dl2.SHORT

        @task(task_id=name, pool=dl2.POOL, execution_timeout=timeout)
        def run(_: dict[str, Any]) -> dict[str, Any]:
            return dl2.dvc_stage(name)

        return run

    @task
    def register(evaluated: dict[str, Any]) -> dict[str, Any]:
        return dl2.pipeline("register")

    @task(outlets=[CHALLENGER])
    def publish(collected: dict[str, Any], registered: dict[str, Any], *, outlet_events: Any = None) -> dict[str, Any]:
        summary = registered["summary"]
        if not summary["created"]:
            raise AirflowSkipException(f"dl2-policy v{summary['version']} was registered before: no asset event")
        extra = dl2.changed_extra(
            {"version": summary["version"], "digest": summary["digest"], "feedback_records": collected["records"]}
        )
        outlet_events[CHALLENGER].extra = extra
        return extra

    @task(pool=dl2.POOL, trigger_rule="none_failed")
    def commit(registered: dict[str, Any], run_id: str | None = None) -> dict[str, Any]:
        return dl2.commit(f"dl2_online_finetune {run_id}: collected feedback, fine-tuned, evaluated")

    collected = collect()
    previous: Any = collected
    for name in STAGES:
        previous = stage(name)(previous)
    registered = register(previous)
    # ignore[arg-type]: Airflow types a task's call with its function's parameters; it takes upstream XComArgs
    publish(collected, registered) >> commit(registered)  # type: ignore[arg-type]


dl2_online_finetune()
