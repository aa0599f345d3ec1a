"""Stage `online`: the fine-tuned policy learns from the decision records that clusters logged (DL2 §4.3, run
online); writes `models/staging/online`, the model `evaluate` and `register` take as the candidate.

The records are those `pipelines.collect` versioned under `data/feedback/clusters` (what `dl2 serve` wrote in
shadow, canary or active mode). Each log is validated with the decision-log suite first (a failing log is
skipped and named in the output and the summary: one poison log never blocks the others); then
advantage-weighted steps on its decisions (`learn_from_feedback`), and the result is kept only if it does not
validate worse than the fine-tuned model: logged behaviour can mislead. Then, for a realistic-mode policy, a
re-warming in each log's calibrated twin (`dl2.rl.in_twin`), kept only if the twin finds it faster
(`online.learn_in_twin`, `online.twin`).
Without collected records, or when nothing learned is kept, the fine-tuned model passes through byte for
byte (so DVC reruns nothing downstream and `register` has no new version to offer); `reports/online.json`
says what was tried. Split from `finetune` so that new cluster feedback reruns this short stage, not
reinforcement learning in the simulator.

    python -m pipelines.online [--smoke]
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dl2.io import to_json
from pipelines import tracking
from pipelines.code import code_version
from pipelines.feedback_logs import (
    cluster_file,
    feedback_datasets,
    find_logs,
    learning_inputs,
    log_feedback,
    log_twin,
    skipped_summary,
)
from pipelines.params import Params
from pipelines.rl import save
from pipelines.stage import Layout, StageResult, main_without_arguments, replace_folder, write_json

RECORD = "online.json"
"""What the stage did, under reports/: its code version, the logs learned from and what the steps on them gave.
Outside the model folder, so that a model passed through unchanged is the fine-tuned one to the byte, and DVC
reruns nothing downstream of it."""


def cluster_logs(layout: Layout) -> list[Path]:
    """The collected cluster decision logs (`pipelines.collect`)."""
    from pipelines.collect import clusters_dir

    return find_logs(clusters_dir(layout))


def run(params: Params, layout: Layout | None = None) -> StageResult:
    """The fine-tuned model and the collected logs in, `dl2.rl.refine.learn_online`, the model (new, or the
    fine-tuned one passed through) and `reports/online.json` out."""
    import mlflow

    from dl2.rl.refine import learn_online

    layout = layout or Layout()
    start, folder = layout.model("finetune"), layout.model("online")
    inputs = learning_inputs(params, layout, start, cluster_logs(layout), "online")
    version = code_version("pipelines.online")
    settings = {
        "finetune": params.section("finetune"), "online": params.section("online"), "init": layout.relative(start),
    }  # fmt: skip
    outputs = (layout.relative(folder), layout.relative(layout.reports / RECORD))
    twin = params.online.twin if params.online.learn_in_twin else None
    twin_logs = [log for log in inputs.logs if cluster_file(log).is_file()]
    with (
        tracking.stage_run("online", settings, tags={"dl2.code_version": version}, root=layout.root) as active,
        tempfile.TemporaryDirectory(prefix="dl2-online-") as scratch,
    ):
        tracking.log_inputs(feedback_datasets(layout, inputs.logs))
        trained = inputs.trained
        learned = learn_online(
            inputs.env, inputs.config, trained, inputs.batches, inputs.feedback_steps, inputs.workers,
            _validated(trained.metadata), twin_logs if inputs.logs else [], twin, Path(scratch),
        )  # fmt: skip
        chosen, outcome = learned.feedback if learned.feedback is not None else (None, None)
        # JSON-ready: a validation that did not finish is infinite, which JSON cannot hold (to_json makes it null)
        attempt = to_json(outcome.record(inputs.facts)) if outcome is not None else None
        in_twin: Any = [to_json(verdict.record()) for verdict in learned.twin] or {"skipped": learned.twin_skipped}
        final = learned.final
        if final is not None:
            metadata = {**trained.metadata, "online_code_version": version}
            metadata |= {"online": attempt} if chosen is not None and outcome is not None and outcome.kept else {}
            metadata |= {"online_twin": in_twin} if any(verdict.kept for verdict in learned.twin) else {}
            title = "DL2 policy trained with actor-critic RL, then on logged cluster feedback"
            value = final.value.state_dict() if final.value is not None else None
            save(folder, final.config, final.policy.state_dict(), value, title, metadata)
        else:  # the fine-tuned model unchanged, byte for byte: the same digest, nothing new to register or evaluate
            replace_folder(start, folder)
        logs = inputs.logs
        kept = final is not None if logs else None
        summary: dict[str, Any] = {"cluster_logs": len(logs), "kept": kept, **skipped_summary(inputs.skipped)}
        record: dict[str, Any] = {"code_version": version, "from": layout.relative(start), **summary}
        if outcome is not None:
            log_feedback(outcome)
        log_twin(learned.twin)
        if logs:
            record["online"] = attempt
            record["twin"] = in_twin
            mlflow.log_artifacts(str(folder), artifact_path="model")
        else:
            mlflow.log_metric("feedback.decisions", 0.0)
        write_json(layout.reports / RECORD, record)
        return StageResult("online", outputs, version, active.info.run_id, summary)


def _validated(metadata: dict[str, Any]) -> float | None:
    """The fine-tuned model's validation JCT as `finetune` measured it: the same greedy runs on the same seeds
    (both stages take them from the same parameters), so it is not run again; None when there is no finite one."""
    value = metadata.get("best_validation_avg_jct_s")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def cli(argv: Sequence[str] | None = None) -> int:
    return main_without_arguments("online", "Learn from the decision records clusters logged.", run, argv)


if __name__ == "__main__":
    raise SystemExit(cli())
