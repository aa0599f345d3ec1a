"""What the learning stages (`finetune`, `online`) read, `learning_inputs`: the model they continue and the
decision logs found under a folder, validated (a malformed log is skipped and named, never a reason to stop
learning from the others), turned into RL samples per cluster; the logs as MLflow datasets, and what learning
from them gave as metrics.

A log is a folder of segments with its `cluster.json` (what `dl2 serve` and the `feedback` stage write), or a
stand-alone `.jsonl` file of records.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dl2.core import ClusterSpec, InputError
from dl2.core.log_format import CLUSTER_FILE, read_cluster, read_log, segments
from pipelines import tracking
from pipelines.params import Params
from pipelines.stage import Layout

if TYPE_CHECKING:
    from dl2.rl.in_twin import TwinVerdict
    from dl2.rl.refine import FeedbackOutcome


@dataclass(frozen=True)
class LearningInputs:
    """What a learning stage (`finetune`, `online`) reads, checked: the model it continues, the decision logs
    that passed the suite (and why the others did not) with their samples, and the library's configurations
    (`dl2.env.config.EnvConfig`, `dl2.rl.config.RLConfig`) as the stage's parameters set them."""

    start: Path
    trained: Any
    env: Any
    config: Any
    logs: list[Path]
    skipped: dict[str, str]
    batches: list[Any]
    facts: list[dict[str, Any]]
    feedback_steps: int
    workers: int


def learning_inputs(params: Params, layout: Layout, start: Path, logs: Sequence[Path], stage: str) -> LearningInputs:
    """The inputs of a stage continuing the model folder `start` on the decision logs `logs`."""
    from dl2.rl.training import load_trained
    from pipelines.rl import continued

    usable, skipped = usable_logs(params, layout, logs, stage)
    trained = load_trained(start)
    env, config = continued(params, trained.config, layout.relative(start))
    batches, facts = feedback_batches(layout, trained.config, env, config.gamma, usable)
    f = params.finetune
    return LearningInputs(start, trained, env, config, usable, skipped, batches, facts, f.feedback_steps, f.workers)


def find_logs(folder: Path) -> list[Path]:
    """Every decision log under `folder`: folders of segments and stand-alone .jsonl files, sorted."""
    if not folder.is_dir():
        return []
    visible = [
        p for p in folder.rglob("*.jsonl") if not any(part.startswith(".") for part in p.relative_to(folder).parts)
    ]
    folders = {p.parent for p in visible if p.name.startswith("segment-")}
    files = {p for p in visible if not p.name.startswith("segment-")}
    return sorted(folders | files)


def cluster_file(log: Path) -> Path:
    """Where a log's cluster is described: beside its segments, or beside a stand-alone file."""
    return (log if log.is_dir() else log.parent) / CLUSTER_FILE


def log_cluster(log: Path, cluster_name: str) -> ClusterSpec:
    """The cluster of a decision log: its `cluster.json`, else a known cluster of that name (the authors'
    settings, philly, alibaba-gpu2023)."""
    from dl2.workload.authors import SETTINGS, generate_authors_workload
    from dl2.workload.traces import alibaba_cluster, philly_cluster

    described = cluster_file(log)
    if described.is_file():
        return read_cluster(described)
    if cluster_name in SETTINGS:
        return generate_authors_workload(SETTINGS[cluster_name], 0).cluster
    if cluster_name == "philly":
        return philly_cluster()
    if cluster_name == "alibaba-gpu2023":
        return alibaba_cluster()
    raise InputError(str(log), f"no {CLUSTER_FILE} and no known cluster named {cluster_name!r}")


def usable_logs(
    params: Params, layout: Layout, logs: Sequence[Path], stage: str = "finetune"
) -> tuple[list[Path], dict[str, str]]:
    """The logs that pass the decision-log suite, and {log: why} for those that do not (`pipelines.collect`
    quarantines such logs before they reach `data/feedback/clusters`; this catches one put there by other
    means)."""
    from pipelines.validate import failure_summary, validate_log

    good, skipped = [], {}
    for log in logs:
        try:
            report = validate_log(log, params, layout)
            problem = None if report["success"] else failure_summary(report)
            described = cluster_file(log)
            if problem is None and described.is_file():
                read_cluster(described)
        except InputError as error:
            problem = str(error)
        if problem is None:
            good.append(log)
        else:
            skipped[layout.relative(log)] = problem
            print(f"{stage}: skipped decision log {layout.relative(log)}: {problem}", file=sys.stderr)
    return good, skipped


def skipped_summary(skipped: dict[str, str]) -> dict[str, Any]:
    """A stage summary's entry for the malformed logs it left out, when there were any."""
    return {"skipped_logs": skipped} if skipped else {}


def feedback_batches(
    layout: Layout, policy_config: Any, env: Any, gamma: float, logs: Sequence[Path]
) -> tuple[list[Any], list[dict[str, Any]]]:
    """Samples of the given (validated) decision logs for a policy of `policy_config`, with the reward of
    `env` (`dl2.env.config.EnvConfig`) discounted by `gamma`: one batch per log and cluster, and what each holds."""
    from dl2.rl.feedback import feedback_batch
    from dl2.schedulers.registry import PLACERS
    from dl2.sim.config import Mode

    batches, facts = [], []
    for log in logs:
        by_cluster: dict[str, list[Any]] = {}
        for record in read_log(log):
            by_cluster.setdefault(record.cluster, []).append(record)
        for cluster_name, cluster_records in sorted(by_cluster.items()):
            batch = feedback_batch(
                cluster_records,
                log_cluster(log, cluster_name),
                policy_config.observation,
                PLACERS[policy_config.placer](),
                compat=env.sim.mode is Mode.COMPAT,
                reward=env.reward,
                gamma=gamma,
            )
            batches.append(batch)
            facts.append({"log": layout.relative(log), "cluster": cluster_name, "decisions": len(batch)})
    return batches, facts


def feedback_datasets(layout: Layout, logs: Sequence[Path]) -> list[tuple[Any, str]]:
    """Each decision log learned from, as an MLflow dataset (digest: its records' bytes)."""
    inputs = []
    for log in logs:
        digest = hashlib.md5()
        for path in segments(log):
            digest.update(path.read_bytes())
        inputs.append(
            (tracking.dataset(f"decision log {log.name}", digest.hexdigest(), layout.relative(log)), "feedback")
        )
    return inputs


def log_feedback(outcome: FeedbackOutcome) -> None:
    """The steps on logged decisions (`dl2.rl.refine.FeedbackOutcome`) as `feedback.*` metrics."""
    import mlflow

    mlflow.log_metrics(
        {
            "feedback.decisions": float(outcome.decisions),
            "feedback.validation_avg_jct_s": outcome.validation_jct_s_after,
            "feedback.kept": float(outcome.kept),
            "feedback.policy_loss": outcome.policy_loss,
            "feedback.value_loss": outcome.value_loss,
        }
    )


def log_twin(verdicts: Sequence[TwinVerdict]) -> None:
    """The learning in each cluster's calibrated twin (`dl2.rl.in_twin.TwinVerdict`) as `twin.*` metrics: the
    gate's prediction (the challenger against the running policy in the twin) and whether it was kept, with the
    off-policy estimate from the same records as `off_policy.*`; the last log's when there were several, each as a
    step."""
    import mlflow

    for step, verdict in enumerate(verdicts):
        difference = verdict.difference
        mlflow.log_metrics(
            {
                "twin.predicted_difference": difference["mean"],
                "twin.predicted_difference_low": difference["low"],
                "twin.predicted_difference_high": difference["high"],
                "twin.workloads": len(verdict.running_h),
                "twin.running_avg_jct_h": sum(verdict.running_h) / len(verdict.running_h),
                "twin.challenger_avg_jct_h": sum(verdict.challenger_h) / len(verdict.challenger_h),
                "twin.kept": float(verdict.kept),
                **{f"off_policy.{name}": value for name, value in verdict.off_policy.items()},
            },
            step=step,
        )
