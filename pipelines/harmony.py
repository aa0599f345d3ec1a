"""Stage `harmony`: Harmony's speed model and placer refit from the decision records clusters logged
(`dl2.placement.refit`, as `dl2 refit-harmony`); writes `models/staging/harmony/{speed-model,placer}`, the folders
`dl2 extender --placer` and `dl2 simulate --placer` take, and `reports/harmony.json`.

The policy's learning (`online`) and Harmony's are the two learned parts a cluster's records can correct: where the
cluster's interference or speeds are not the profiled ones, both are wrong alike. Each collected log that passes
the decision-log suite and describes its cluster refits in turn, starting from what the logs before it left (the
deployed models, `harmony.speed_model` and `harmony.placer`, for the first): the speed model is kept only if it
errs less than the one it started from on the log's last slots, the placer only if it validates better in the
kept model's world. A log whose records hold no steady placement (a controller that does not record where pods
ran, or jobs that never ran alone long enough) is skipped and named.

When nothing is kept, or no log was collected, the deployed folders pass through byte for byte (so DVC reruns
nothing downstream). What each log gave is in `reports/harmony.json` and the stage's MLflow run.

    python -m pipelines.harmony [--smoke]
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from dl2.core import InputError
from dl2.paths import REPO_ROOT
from pipelines import tracking
from pipelines.code import code_version
from pipelines.feedback_logs import cluster_file, feedback_datasets, find_logs, skipped_summary, usable_logs
from pipelines.params import HarmonyParams, Params
from pipelines.stage import Layout, StageResult, main_without_arguments, replace_folder, write_json

RECORD = "harmony.json"
"""What the stage did, under reports/: per log, the speed model's held-out errors and the placer's validation."""
SPEED, PLACER = "speed-model", "placer"


def refit_config(params: HarmonyParams) -> Any:
    """The library's refit settings with the section's epochs, iterations, validation workloads and seed."""
    from dl2.placement.refit import HarmonyRefitConfig

    defaults = HarmonyRefitConfig()
    speed = replace(defaults.speed, epochs=params.epochs, seed=params.seed)
    placer = replace(
        defaults.placer, iterations=params.iterations, validation_seeds=params.validation_seeds, seed=params.seed
    )
    return replace(defaults, speed=speed, placer=placer)


def run(params: Params, layout: Layout | None = None) -> StageResult:
    """The collected logs and the deployed models in, each log's refit in turn, the kept folders out."""
    import mlflow

    from dl2.placement.refit import refit_harmony
    from dl2.sim.calibrated import calibrated_world
    from pipelines.collect import clusters_dir

    layout = layout or Layout()
    section = params.harmony
    # shipped with the code, as the library's data is: the repository's, whichever root the stage writes under
    deployed = {SPEED: REPO_ROOT / section.speed_model, PLACER: REPO_ROOT / section.placer}
    for name, folder in deployed.items():
        if not folder.is_dir():
            raise InputError(str(folder), f"harmony.{name.replace('-', '_')}: not a model folder")
    out = layout.model("harmony")
    described = [log for log in find_logs(clusters_dir(layout)) if cluster_file(log).is_file()]
    logs, skipped = usable_logs(params, layout, described, "harmony")
    version = code_version("pipelines.harmony")
    outputs = (layout.relative(out), layout.relative(layout.reports / RECORD))
    config = refit_config(section)
    with (
        tracking.stage_run("harmony", params.section("harmony"), tags={"dl2.code_version": version},
                           root=layout.root) as active,
        tempfile.TemporaryDirectory(prefix="dl2-harmony-") as scratch,
    ):  # fmt: skip
        tracking.log_inputs(feedback_datasets(layout, logs))
        current = dict(deployed)
        origin = {folder: layout.relative(folder) for folder in deployed.values()}  # a scratch one: by its log
        refits: list[dict[str, Any]] = []
        for step, log in enumerate(logs):
            name = layout.relative(log)
            try:
                world, _ = calibrated_world(log)
                result = refit_harmony(log, current[SPEED], current[PLACER], Path(scratch) / str(step),
                                       world.speed, config)  # fmt: skip
            except InputError as error:  # no records, or no steady placement: nothing to refit from
                skipped[name] = str(error)
                print(f"harmony: skipped decision log {name}: {error}")
                continue
            scratch_paths = ("speed_model", "placer")  # gone after the stage: the record says where it started from
            facts = {key: value for key, value in result.record().items() if key not in scratch_paths}
            refits.append({"log": name, "from": {k: origin[v] for k, v in current.items()}, **facts})
            if result.speed.kept == "refit":
                current[SPEED] = result.speed_dir
                origin[result.speed_dir] = f"refit to {name}"
            if result.best_iteration >= 0:
                current[PLACER] = result.placer_dir
                origin[result.placer_dir] = f"retrained on {name}"
            _log_metrics(result, step)
        kept = {name: current[name] != deployed[name] for name in deployed}
        for name, folder in current.items():
            replace_folder(folder, out / name)  # a folder kept from the scratch, or the deployed one byte for byte
        summary: dict[str, Any] = {
            "cluster_logs": len(logs), "refits": len(refits), "speed_model_kept": kept[SPEED],
            "placer_kept": kept[PLACER], **skipped_summary(skipped),
        }  # fmt: skip
        write_json(layout.reports / RECORD, {"code_version": version, **summary, "logs": refits})
        if any(kept.values()):
            mlflow.log_artifacts(str(out), artifact_path="harmony")
        return StageResult("harmony", outputs, version, active.info.run_id, summary)


def _log_metrics(result: Any, step: int) -> None:
    """One log's refit as the stage run's metrics (step: the log's place in the order refit)."""
    import mlflow

    mlflow.log_metrics(
        {
            "harmony.speed_error_deployed": result.speed.error_deployed,
            "harmony.speed_error_refit": result.speed.error_refit,
            "harmony.speed_samples": float(result.speed.train_samples),
            "harmony.placer_validation_h": result.best_validation_h,
            "harmony.placer_untrained_validation_h": result.untrained_validation_h,
        },
        step=step,
    )


def cli(argv: Sequence[str] | None = None) -> int:
    return main_without_arguments("harmony", "Refit Harmony's speed model and placer to the cluster logs.", run, argv)


if __name__ == "__main__":
    raise SystemExit(cli())
