"""Stage `online`: the fine-tuned policy learns from the decision records that clusters logged (DL2 §4.3, run
online); writes `models/staging/online`, the model `evaluate` and `register` take as the candidate.

The records are those `pipelines.collect` versioned under `data/feedback/clusters` (what `dl2 serve` wrote in
shadow, canary or active mode). Each log is validated with the decision-log suite first (a failing log is
skipped and named in the output and the summary: one poison log never blocks the others); then
advantage-weighted steps on its decisions (`learn_from_feedback`), and the result is kept only if it does not
validate worse than the fine-tuned model: logged behaviour can mislead.
Without collected records, or when the steps on them are not kept, the fine-tuned model passes through byte for
byte (so DVC reruns nothing downstream and `register` has no new version to offer); `reports/online.json`
says what was tried. Split from `finetune` so that new cluster feedback reruns this short stage, not
reinforcement learning in the simulator.

    python -m pipelines.online [--smoke]
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dl2.io import to_json
from pipelines import tracking
from pipelines.code import code_version
from pipelines.params import Params
from pipelines.rl import continued, save
from pipelines.stage import Layout, StageResult, main_without_arguments, write_json

RECORD = "online.json"
"""What the stage did, under reports/: its code version, the logs learned from and what the steps on them gave.
Outside the model folder, so that a model passed through unchanged is the fine-tuned one to the byte, and DVC
reruns nothing downstream of it."""


def cluster_logs(layout: Layout) -> list[Path]:
    """The collected cluster decision logs (`pipelines.collect`)."""
    from pipelines.collect import clusters_dir
    from pipelines.feedback import find_logs

    return find_logs(clusters_dir(layout))


def run(params: Params, layout: Layout | None = None) -> StageResult:
    import mlflow
    import torch

    from dl2.rl.actor_critic import ActorCritic, TrainingState
    from dl2.rl.training import load_trained
    from dl2.rl.workers import make_pool
    from pipelines.finetune import (
        feedback_batches,
        feedback_datasets,
        learn_from_logs,
        skipped_summary,
        usable_logs,
    )

    layout = layout or Layout()
    start, folder = layout.model("finetune"), layout.model("online")
    logs, skipped = usable_logs(params, layout, cluster_logs(layout))
    trained = load_trained(start)
    version = code_version("pipelines.online")
    settings = {"finetune": params.section("finetune"), "init": layout.relative(start)}
    outputs = (layout.relative(folder), layout.relative(layout.reports / RECORD))
    with tracking.stage_run("online", settings, tags={"dl2.code_version": version}, root=layout.root) as active:
        tracking.log_inputs(feedback_datasets(layout, logs))
        if not logs:
            _copy_model(start, folder)
            mlflow.log_metric("feedback.decisions", 0.0)
            summary: dict[str, Any] = {"cluster_logs": 0, "kept": None, **skipped_summary(skipped)}
            write_json(layout.reports / RECORD, {"code_version": version, "from": layout.relative(start), **summary})
            return StageResult("online", outputs, version, active.info.run_id, summary)
        batches, facts = feedback_batches(params, layout, trained.config, logs)
        env, config = continued(params, trained.config, layout.relative(start))
        torch.manual_seed(config.seed)
        torch.set_num_threads(1)
        pool = make_pool("local", params.finetune.workers)
        try:
            trainer = ActorCritic(env, config, trained.policy, trained.value)
            before = _validated(trained.metadata)
            if before is None:
                before = trainer.validate(pool)
            state = TrainingState(_state(trainer.policy), _state(trainer.value), before, -1, [])
            chosen, feedback = learn_from_logs(params, trainer, state, batches, facts, pool)
        finally:
            pool.close()
        # JSON-ready: a validation that did not finish is infinite, which JSON cannot hold (to_json makes it null)
        attempt = to_json(feedback)
        kept = bool(feedback and feedback["kept"])
        if kept:
            metadata = {**trained.metadata, "online": attempt, "online_code_version": version}
            title = "DL2 policy trained with actor-critic RL, then on logged cluster feedback"
            save(folder, trained.config, chosen, state.best_value, title, metadata)
        else:  # the fine-tuned model unchanged, byte for byte: the same digest, nothing new to register or evaluate
            _copy_model(start, folder)
        summary = {"cluster_logs": len(logs), "kept": kept, **skipped_summary(skipped)}
        record = {"code_version": version, "from": layout.relative(start), **summary, "online": attempt}
        write_json(layout.reports / RECORD, record)
        mlflow.log_artifacts(str(folder), artifact_path="model")
        return StageResult("online", outputs, version, active.info.run_id, summary)


def _validated(metadata: dict[str, Any]) -> float | None:
    """The fine-tuned model's validation JCT as `finetune` measured it: the same greedy runs on the same seeds
    (both stages take them from the same parameters), so it is not run again; None when there is no finite one."""
    value = metadata.get("best_validation_avg_jct_s")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _state(module: Any) -> dict[str, Any]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _copy_model(source: Path, destination: Path) -> None:
    """The folder copied byte for byte (the same digest: evaluated once), replacing what was there atomically."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=destination.parent, prefix=f".{destination.name}.") as staging:
        copy = Path(staging) / destination.name
        shutil.copytree(source, copy)
        if destination.exists():
            shutil.rmtree(destination)
        copy.rename(destination)


def cli(argv: Sequence[str] | None = None) -> int:
    return main_without_arguments("online", "Learn from the decision records clusters logged.", run, argv)


if __name__ == "__main__":
    raise SystemExit(cli())
