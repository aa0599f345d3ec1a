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
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dl2.sim.metrics import report_unit
from pipelines import tracking
from pipelines.code import code_version
from pipelines.feedback_logs import (
    LearningInputs,
    feedback_datasets,
    find_logs,
    learning_inputs,
    log_feedback,
    skipped_summary,
)
from pipelines.params import Params
from pipelines.rl import rl_seeds, save
from pipelines.stage import Layout, StageResult, main, write_json
from pipelines.workloads import require_within, training_dataset

if TYPE_CHECKING:
    from dl2.rl.refine import FineTuned


def init_folder(params: Params, layout: Layout, init: Path | None) -> Path:
    if init is not None:
        return init
    return layout.root / params.finetune.init if params.finetune.init else layout.model("warmup")


def run(params: Params, layout: Layout | None = None, init: Path | None = None) -> StageResult:
    """The starting model and the simulated cluster's logs in, `dl2.rl.refine.fine_tune_with_feedback`, the
    model folder and its MLflow run out."""
    from dl2.rl.refine import fine_tune_with_feedback

    layout = layout or Layout()
    start = init_folder(params, layout, init)
    inputs = learning_inputs(params, layout, start, find_logs(layout.simulated_feedback), "finetune")
    require_within(layout, params, "rl", rl_seeds(inputs.config))
    settings = {
        "finetune": params.section("finetune"),
        "workloads": params.section("workloads"),
        "init": layout.relative(start),
    }
    title = f"RL on {params.workloads.train_source} ({params.workloads.mode})"
    version = code_version("pipelines.finetune")
    with tracking.stage_run("finetune", settings, tags={"dl2.code_version": version}, root=layout.root) as active:
        tracking.log_inputs([(training_dataset(layout), "training"), *feedback_datasets(layout, inputs.logs)])
        tuned = fine_tune_with_feedback(
            inputs.env, inputs.config, inputs.trained, inputs.batches, inputs.feedback_steps, inputs.workers,
            log_iteration,
        )  # fmt: skip
        folder = write_model(layout, inputs, tuned, version, title)
        log_outcome(tuned, folder)
        summary = {
            "best_validation_avg_jct_s": tuned.state.best_validation_jct_s,
            "feedback_logs": len(inputs.logs),
            **skipped_summary(inputs.skipped),
            "seconds": round(tuned.seconds, 1),
        }
        return StageResult("finetune", (layout.relative(folder),), version, active.info.run_id, summary)


def log_outcome(tuned: FineTuned, folder: Path) -> None:
    """The fine-tuning's figures, learning curve and model folder in the active MLflow run."""
    import mlflow

    state = tuned.state
    mlflow.log_metrics({"validation_avg_jct_s_initial": tuned.initial_validation_jct_s,
                        "best_validation_avg_jct_s": state.best_validation_jct_s,
                        "best_iteration": state.best_iteration, "seconds": tuned.seconds})  # fmt: skip
    if tuned.feedback is not None:
        log_feedback(tuned.feedback)
    mlflow.log_artifact(str(folder / "learning_curve.png"), artifact_path="plots")
    mlflow.log_artifacts(str(folder), artifact_path="model")


def write_model(layout: Layout, inputs: LearningInputs, tuned: FineTuned, version: str, title: str) -> Path:
    """The fine-tuned model folder, its card and metadata, learning curve (`title`) and history."""
    from dl2.rl.plots import plot_rl
    from dl2.rl.training import rl_metadata

    folder = layout.model("finetune")
    feedback = tuned.feedback.record(inputs.facts) if tuned.feedback is not None else None
    metadata = rl_metadata(
        inputs.config, inputs.env, tuned.state, tuned.seconds, initialised_from=layout.relative(inputs.start),
        initial_metadata=inputs.trained.metadata, feedback=feedback, code_version=version,
        initial_validation_avg_jct_s=tuned.initial_validation_jct_s,
    )  # fmt: skip
    state, config = tuned.state, replace(inputs.trained.config, mode=inputs.env.sim.mode.value)
    save(folder, config, state.best_policy, state.best_value, "DL2 policy trained with actor-critic RL", metadata)
    scale, unit_name = report_unit(inputs.env.sim.mode.value)
    plot_rl(state.history, folder / "learning_curve.png", title, scale, unit_name)
    write_json(folder / "history.json", metadata["history"])
    return folder


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
