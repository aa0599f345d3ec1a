"""Stage `warmup`: supervised warm-up (DL2 §4.2), imitating a heuristic; writes `models/staging/warmup`.

`dl2.rl.training.warm_up` does the work. The MLflow run logs the parameters, the loss and held-out imitation
accuracy per epoch, the learning-curve PNG and the model folder (artefact `model/`).

    python -m pipelines.warmup [--smoke]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from dl2.env.observation import ObservationConfig
from dl2.rl.supervised import SupervisedConfig
from dl2.rl.training import WarmUpConfig
from pipelines import tracking
from pipelines.code import code_version
from pipelines.params import Params
from pipelines.rl import jsonable, network_config, save
from pipelines.stage import Layout, StageResult, main, write_json
from pipelines.workloads import require_within, training_dataset


def warm_up_config(params: Params) -> WarmUpConfig:
    w = params.warmup
    return WarmUpConfig(
        teacher=w.teacher,
        source=params.workloads.train_source,
        mode=params.workloads.mode,
        episodes=w.episodes,
        dagger_rounds=w.dagger_rounds,
        dagger_episodes=w.dagger_episodes,
        record_every=w.record_every,
        workers=w.workers,
        observation=ObservationConfig(window=w.window, packed=w.packed),
        supervised=SupervisedConfig(
            epochs=w.epochs,
            learning_rate=w.learning_rate,
            label_smoothing=w.label_smoothing,
            network=network_config(params),
            seed=w.seed,
        ),
    )


def run(params: Params, layout: Layout | None = None) -> StageResult:
    import mlflow
    from tqdm import tqdm

    from dl2.rl.plots import plot_warm_up
    from dl2.rl.training import policy_config, recorded_workloads, warm_up

    layout = layout or Layout()
    config = warm_up_config(params)
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
        recording = tqdm(total=recorded_workloads(config), desc="warm-up: recording", unit="workload", file=sys.stderr)
        trainings = (1 if config.episodes else 0) + config.dagger_rounds
        total = config.supervised.epochs * trainings
        epochs = tqdm(total=total, desc="warm-up: training", unit="epoch", file=sys.stderr)

        def on_epoch(_: int, loss: float, accuracy: float) -> None:
            nonlocal epoch
            mlflow.log_metrics({"train_loss": loss, "held_out_accuracy": accuracy}, step=epoch)
            epochs.set_postfix(loss=f"{loss:.3f}", held_out_accuracy=f"{accuracy:.3f}")
            epochs.update()
            epoch += 1

        policy, history, facts = warm_up(config, on_epoch, recording.update)
        recording.close()
        epochs.close()
        seconds = time.perf_counter() - started
        metadata = {
            "kind": "warm-up",
            "warm_up": jsonable(config),
            "facts": facts,
            "seconds": seconds,
            "history": jsonable(history),
            "code_version": version,
        }
        network = config.supervised.network
        mode = params.workloads.mode
        save(
            folder,
            policy_config(config.observation, network, mode, config.placer),
            policy.state_dict(),
            None,
            f"DL2 policy warmed up on {params.warmup.teacher}",
            metadata,
        )
        rows = zip(history.train_loss, history.held_out_accuracy, strict=False)
        curve_rows = [{"epoch": i, "train_loss": loss, "held_out_accuracy": acc} for i, (loss, acc) in enumerate(rows)]
        write_json(folder / "history.json", curve_rows)
        curve = folder / "learning_curve.png"
        title = f"warm-up: imitating {params.warmup.teacher} ({params.workloads.train_source})"
        plot_warm_up(history, curve, title)
        mlflow.log_metrics({k: float(v) for k, v in facts.items() if isinstance(v, int | float)})
        mlflow.log_metric("seconds", seconds)
        mlflow.log_artifact(str(curve), artifact_path="plots")
        mlflow.log_artifacts(str(folder), artifact_path="model")
        summary = {"held_out_accuracy": facts["held_out_accuracy"], "seconds": round(seconds, 1)}
        return StageResult("warmup", (layout.relative(folder),), version, active.info.run_id, summary)


def _run(params: Params, args: argparse.Namespace) -> StageResult:
    return run(params)


def cli(argv: Sequence[str] | None = None) -> int:
    return main("warmup", "Supervised warm-up of the DL2 policy (imitating a heuristic).", _run, None, argv)


if __name__ == "__main__":
    raise SystemExit(cli())
