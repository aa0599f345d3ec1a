"""Stage `finetune`: online RL in the simulator (DL2 §4.3), then advantage-weighted steps on the simulated
cluster's decision logs (`feedback` stage); writes `models/staging/finetune`. Records that real clusters logged
are learned from by the next stage, `online`.

RL starts from the warm-up (or from any model folder given by `--init`, e.g. the current champion) and keeps
the checkpoint with the best average JCT on the validation workloads (`dl2.rl.training.fine_tune`). Then every
decision log under `data/feedback/simulated` is validated with the decision-log suite (a failing log is skipped
and named in the output and the summary; the others are used) and turned into samples
(`dl2.rl.feedback.feedback_batch`) for `learn_from_feedback`; the policy after feedback is kept only if it does
not validate worse. The MLflow run logs per-iteration metrics, the learning curve and the model folder.

    python -m pipelines.finetune [--smoke] [--init models/champion]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dl2.core import InputError
from dl2.sim.metrics import report_unit
from pipelines import tracking
from pipelines.code import code_version
from pipelines.params import Params
from pipelines.rl import continued, rl_seeds, save
from pipelines.stage import Layout, StageResult, main, write_json
from pipelines.workloads import require_within, training_dataset


def init_folder(params: Params, layout: Layout, init: Path | None) -> Path:
    if init is not None:
        return init
    return layout.root / params.finetune.init if params.finetune.init else layout.model("warmup")


def usable_logs(params: Params, layout: Layout, logs: Sequence[Path]) -> tuple[list[Path], dict[str, str]]:
    """The logs that pass the decision-log suite, and {log: why} for those that do not: a malformed log is
    skipped and named, never a reason to stop learning from the others (`pipelines.collect` quarantines such
    logs before they reach `data/feedback/clusters`; this catches one put there by other means)."""
    from dl2.core.log_format import CLUSTER_FILE, read_cluster
    from pipelines.validate import failure_summary, validate_log

    good, skipped = [], {}
    for log in logs:
        try:
            report = validate_log(log, params, layout)
            problem = None if report["success"] else failure_summary(report)
            described = (log if log.is_dir() else log.parent) / CLUSTER_FILE
            if problem is None and described.is_file():
                read_cluster(described)
        except InputError as error:
            problem = str(error)
        if problem is None:
            good.append(log)
        else:
            skipped[layout.relative(log)] = problem
            print(f"finetune: skipped decision log {layout.relative(log)}: {problem}", file=sys.stderr)
    return good, skipped


def skipped_summary(skipped: dict[str, str]) -> dict[str, Any]:
    """A stage summary's entry for the malformed logs it left out, when there were any."""
    return {"skipped_logs": skipped} if skipped else {}


def feedback_batches(
    params: Params, layout: Layout, policy_config: Any, logs: Sequence[Path]
) -> tuple[list[Any], list[dict[str, Any]]]:
    """Samples of the given (validated) decision logs, one batch per log and cluster."""
    from dl2.core.log_format import read_log
    from dl2.rl.feedback import feedback_batch
    from dl2.schedulers.registry import PLACERS
    from pipelines.feedback import log_cluster

    batches, facts = [], []
    for log in logs:
        records = read_log(log)
        by_cluster: dict[str, list[Any]] = {}
        for record in records:
            by_cluster.setdefault(record.cluster, []).append(record)
        for cluster_name, cluster_records in sorted(by_cluster.items()):
            batch = feedback_batch(
                cluster_records,
                log_cluster(log, cluster_name),
                policy_config.observation,
                PLACERS[policy_config.placer](),
                compat=params.workloads.mode == "compat",
                reward=params.finetune.env.reward,
                gamma=params.finetune.rl.gamma,
            )
            batches.append(batch)
            facts.append({"log": layout.relative(log), "cluster": cluster_name, "decisions": len(batch)})
    return batches, facts


def run(params: Params, layout: Layout | None = None, init: Path | None = None) -> StageResult:
    """RL from the starting model, then the logged feedback; the model folder and its MLflow run."""
    import mlflow
    import torch

    from dl2.rl.training import load_trained, rl_metadata, rl_with_progress
    from dl2.rl.workers import make_pool
    from pipelines.feedback import find_logs

    layout = layout or Layout()
    start = init_folder(params, layout, init)
    logs, skipped = usable_logs(params, layout, find_logs(layout.simulated_feedback))
    trained = load_trained(start)
    env, config = continued(params, trained.config, layout.relative(start))
    require_within(layout, params, "rl", rl_seeds(config))
    settings = {
        "finetune": params.section("finetune"),
        "workloads": params.section("workloads"),
        "init": layout.relative(start),
    }
    version = code_version("pipelines.finetune")
    with tracking.stage_run("finetune", settings, tags={"dl2.code_version": version}, root=layout.root) as active:
        batches, feedback_facts = feedback_batches(params, layout, trained.config, logs)
        tracking.log_inputs([(training_dataset(layout), "training"), *feedback_datasets(layout, logs)])
        torch.manual_seed(config.seed)
        started = time.perf_counter()
        pool = make_pool("local", params.finetune.workers)
        try:
            trainer, state = rl_with_progress(env, config, pool, trained, on_iteration=log_iteration)
            mlflow.log_metric("validation_avg_jct_s_initial", trainer.initial_validation_jct_s)
            chosen, feedback = learn_from_logs(params, trainer, state, batches, feedback_facts, pool)
        finally:
            pool.close()
        seconds = time.perf_counter() - started
        metadata = rl_metadata(
            config, env, state, seconds, initialised_from=layout.relative(start), initial_metadata=trained.metadata,
            feedback=feedback, code_version=version, initial_validation_avg_jct_s=trainer.initial_validation_jct_s,
        )  # fmt: skip
        folder = write_model(params, layout, trained.config, chosen, state, metadata)
        mlflow.log_metrics({"best_validation_avg_jct_s": state.best_validation_jct_s,
                            "best_iteration": state.best_iteration, "seconds": seconds})  # fmt: skip
        mlflow.log_artifact(str(folder / "learning_curve.png"), artifact_path="plots")
        mlflow.log_artifacts(str(folder), artifact_path="model")
        summary = {
            "best_validation_avg_jct_s": state.best_validation_jct_s,
            "feedback_logs": len(logs),
            **skipped_summary(skipped),
            "seconds": round(seconds, 1),
        }
        return StageResult("finetune", (layout.relative(folder),), version, active.info.run_id, summary)


def learn_from_logs(
    params: Params, trainer: Any, state: Any, batches: list[Any], facts: list[dict[str, Any]], pool: Any
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Advantage-weighted steps on the logged decisions from the best RL checkpoint, kept only if the policy
    does not then validate worse (logged behaviour can mislead); (the policy chosen, what happened)."""
    import mlflow

    from dl2.rl.actor_critic import learn_from_feedback

    if not batches or params.finetune.feedback_steps == 0:
        return state.best_policy, None
    trainer.policy.load_state_dict(state.best_policy)
    trainer.value.load_state_dict(state.best_value)
    losses = [learn_from_feedback(trainer, batch, params.finetune.feedback_steps) for batch in batches]
    after = trainer.validate(pool)
    kept = after <= state.best_validation_jct_s
    summary = {
        "logs": facts,
        "validation_avg_jct_s_before": state.best_validation_jct_s,
        "validation_avg_jct_s_after": after,
        "kept": kept,
        "policy_loss": losses[-1][0],
        "value_loss": losses[-1][1],
    }
    mlflow.log_metrics(
        {
            "feedback.decisions": float(sum(len(b) for b in batches)),
            "feedback.validation_avg_jct_s": after,
            "feedback.kept": float(kept),
            "feedback.policy_loss": losses[-1][0],
            "feedback.value_loss": losses[-1][1],
        }
    )
    if not kept:
        return state.best_policy, summary
    state.best_value = _copy(trainer.value)
    state.best_validation_jct_s = after
    return _copy(trainer.policy), summary


def write_model(
    params: Params, layout: Layout, start: Any, policy: dict[str, Any], state: Any, metadata: dict[str, Any]
) -> Path:
    """The fine-tuned model folder with its learning curve and history."""
    from dl2.rl.plots import plot_rl
    from dl2.rl.training import policy_config

    folder = layout.model("finetune")
    mode = params.workloads.mode
    config = policy_config(start.observation, start.network, mode, start.placer)
    save(folder, config, policy, state.best_value, "DL2 policy trained with actor-critic RL", metadata)
    scale, unit_name = report_unit(mode)
    plot_rl(state.history, folder / "learning_curve.png", f"RL on {params.workloads.train_source} ({mode})",
            scale, unit_name)  # fmt: skip
    write_json(folder / "history.json", metadata["history"])
    return folder


def feedback_datasets(layout: Layout, logs: Sequence[Path]) -> list[tuple[Any, str]]:
    """Each decision log learned from, as an MLflow dataset (digest: its records' bytes)."""
    import hashlib

    from dl2.core.log_format import segments

    inputs = []
    for log in logs:
        digest = hashlib.md5()
        for path in segments(log):
            digest.update(path.read_bytes())
        inputs.append(
            (tracking.dataset(f"decision log {log.name}", digest.hexdigest(), layout.relative(log)), "feedback")
        )
    return inputs


def _copy(module: Any) -> dict[str, Any]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def log_iteration(stats: Any) -> None:
    """Per-iteration RL metrics of the active MLflow run (the learning curve)."""
    import mlflow

    metrics = {
        "train_avg_jct_s": stats.train_jct_s,
        "mean_return": stats.mean_return,
        "policy_loss": stats.policy_loss,
        "value_loss": stats.value_loss,
        "entropy": stats.entropy,
        "decisions": float(stats.decisions),
        "iteration_seconds": stats.seconds,
    }
    if stats.validation_jct_s is not None:
        metrics["validation_avg_jct_s"] = stats.validation_jct_s
    mlflow.log_metrics({k: v for k, v in metrics.items() if math.isfinite(v)}, step=stats.iteration)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--init", type=Path, default=None, help="model folder to start from (default: the warm-up)")


def _run(params: Params, args: argparse.Namespace) -> StageResult:
    return run(params, init=args.init)


def cli(argv: Sequence[str] | None = None) -> int:
    return main("finetune", "Fine-tune the DL2 policy with RL and logged feedback.", _run, _arguments, argv)


if __name__ == "__main__":
    raise SystemExit(cli())
