"""Stage `warmup`: supervised warm-up (DL2 §4.2), imitating a heuristic; writes `models/staging/warmup`.

`dl2.rl.training.warm_up` does the work. The MLflow run logs the parameters, the loss and held-out imitation
accuracy per epoch, the learning-curve PNG and the model folder (artefact `model/`).

    python -m pipelines.warmup [--smoke]
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from pipelines import tracking
from pipelines.code import code_version
from pipelines.params import Params
from pipelines.rl import save
from pipelines.stage import Layout, StageResult, main_without_arguments, write_json
from pipelines.workloads import require_within, training_dataset


def run(params: Params, layout: Layout | None = None) -> StageResult:
    import mlflow

    from dl2.rl.plots import plot_warm_up
    from dl2.rl.training import policy_config, warm_up_metadata, warm_up_with_progress

    layout = layout or Layout()
    config = params.warmup  # the library's WarmUpConfig, its source and mode from the `workloads` section
    demonstrations = config.episodes + config.dagger_rounds * config.dagger_episodes
    require_within(layout, params, "warmup", range(config.seed_offset, config.seed_offset + demonstrations))
    require_within(layout, params, "warmup_held_out", [config.held_out_seed])
    settings = {"warmup": params.section("warmup"), "workloads": params.section("workloads")}
    folder = layout.model("warmup")
    version = code_version("pipelines.warmup")
    with tracking.stage_run("warmup", settings, tags={"dl2.code_version": version}, root=layout.root) as active:
        tracking.log_inputs([(training_dataset(layout), "training")])
        started = time.perf_counter()
        epoch = 0

        def on_epoch(_: int, loss: float, accuracy: float) -> None:
            nonlocal epoch
            mlflow.log_metrics({"train_loss": loss, "held_out_accuracy": accuracy}, step=epoch)
            epoch += 1

        policy, history, facts = warm_up_with_progress(config, on_epoch=on_epoch)
        seconds = time.perf_counter() - started
        metadata = warm_up_metadata(config, history, facts, seconds, code_version=version)
        policy_cfg = policy_config(config.observation, config.supervised.network, config.mode, config.placer)
        save(folder, policy_cfg, policy.state_dict(), None, f"DL2 policy warmed up on {config.teacher}", metadata)
        rows = zip(history.train_loss, history.held_out_accuracy, strict=False)
        curve_rows = [{"epoch": i, "train_loss": loss, "held_out_accuracy": acc} for i, (loss, acc) in enumerate(rows)]
        write_json(folder / "history.json", curve_rows)
        curve = folder / "learning_curve.png"
        plot_warm_up(history, curve, f"warm-up: imitating {config.teacher} ({config.source})")
        mlflow.log_metrics({k: float(v) for k, v in facts.items() if isinstance(v, int | float)})
        mlflow.log_metric("seconds", seconds)
        mlflow.log_artifact(str(curve), artifact_path="plots")
        mlflow.log_artifacts(str(folder), artifact_path="model")
        summary = {"held_out_accuracy": facts["held_out_accuracy"], "seconds": round(seconds, 1)}
        return StageResult("warmup", (layout.relative(folder),), version, active.info.run_id, summary)


def cli(argv: Sequence[str] | None = None) -> int:
    return main_without_arguments("warmup", "Supervised warm-up of the DL2 policy (imitating a heuristic).", run, argv)


if __name__ == "__main__":
    raise SystemExit(cli())
