"""What the speed model saves: the placer trained in the simulator directly, against the one trained on the model.

Harmony §4 trains against the reward-prediction model so that the policy never needs the cluster itself. The
ablation trains the same placer, with the same hyper-parameters, in the simulator (`dl2 train-placer --world
simulator`: the episodes run there and the counterfactual rewards come from its speed function and
interference). Both placers are first run greedily on the validation workloads in the true simulator; then,
along the ablation's learning curve (its validations run in the simulator too), this finds the first checkpoint
whose validation average JCT is at least as good as the model-trained placer's, and counts what it cost:

- simulator steps (slots): the ablation's training and validation episodes up to that checkpoint, against the
  slots the speed model's logs took (`logged_slots`; the model-trained placer's episodes run in the model's
  world and take none);
- wall time: the ablation's training up to that checkpoint, against the speed model's logging and training plus
  the placer's training.

    .venv/bin/python benchmarks/harmony_ablation.py --placer models/harmony-placer --ablation work/harmony-direct

Prints a table and writes `benchmarks/results/harmony_ablation.json`.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
from pathlib import Path
from typing import Any

import numpy as np
from common import environment, print_table, project_path, write_json

from dl2.placement.episodes import World, run_episode
from dl2.placement.policy import HarmonyPlacer
from dl2.sim.config import Mode, SimConfig
from dl2.sim.run import interference_model, speed_model
from dl2.workload.source import workload


def validate(task: tuple[str, str, int, str]) -> float:
    """Average JCT of the greedy placer on one validation workload in the true simulator."""
    folder, source, seed, scheduler = task
    world = World(speed_model(Mode.REALISTIC), interference_model(), None)
    placer = HarmonyPlacer.from_dir(folder)
    return run_episode(world, workload(source, seed), scheduler, placer, SimConfig.realistic(seed)).avg_jct_s


def metadata(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / "config.json").read_text())["metadata"]
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--placer", type=Path, default=Path("models/harmony-placer"))
    parser.add_argument("--ablation", type=Path, required=True, help="placer folder trained with --world simulator")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    harmony, direct = metadata(args.placer), metadata(args.ablation)
    training = harmony["training"]
    if direct["training"]["world"] != "simulator" or training["world"] != "predicted":
        raise SystemExit("--placer must be trained in the model's world and --ablation in the simulator")
    speed_meta = metadata(Path(training["speed_model"]))
    tasks = [
        (str(folder), training["source"], seed, scheduler)
        for folder in (args.placer, args.ablation)
        for seed in training["validation_seeds"]
        for scheduler in training["schedulers"]
    ]
    with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
        jcts = pool.map(validate, tasks, chunksize=1)
    half = len(tasks) // 2
    target, ablation_final = float(np.mean(jcts[:half])), float(np.mean(jcts[half:]))
    slots = 0
    reached: dict[str, Any] | None = None
    best: dict[str, Any] = {}
    for entry in direct["history"]:
        slots += entry["slots"]
        if entry["validation_jct_s"] is not None and entry["validation_jct_s"] <= target and reached is None:
            reached = {"iteration": entry["iteration"], "slots": slots, "seconds": entry["elapsed_s"]}
        if entry["iteration"] == direct["best_iteration"]:
            best = {"iteration": entry["iteration"], "slots": slots, "seconds": entry["elapsed_s"]}
    model_seconds = speed_meta["seconds"] + harmony["seconds"]
    rows = [
        [
            "speed model, then the model's world (Harmony)",
            f"{target / 3600:.3f} h",
            f"{speed_meta['data']['logged_slots']:,}",
            f"{model_seconds:,.0f} s",
        ],
        [
            "simulator directly, to the same validation JCT",
            f"{target / 3600:.3f} h" if reached else "not reached",
            f"{reached['slots']:,}" if reached else f"> {slots:,}",
            f"{reached['seconds']:,.0f} s" if reached else f"> {direct['seconds']:,.0f} s",
        ],
        [
            f"simulator directly, to its best checkpoint (iteration {best['iteration']})",
            f"{ablation_final / 3600:.3f} h",
            f"{best['slots']:,}",
            f"{best['seconds']:,.0f} s",
        ],
    ]
    columns = ["training", "validation avg JCT (true simulator)", "simulator slots", "wall time"]
    print_table("Sample cost of learning placement with and without the speed model", columns, rows)
    write_json(
        "harmony_ablation.json",
        {
            "environment": environment(),
            "placer": project_path(args.placer),
            "ablation": project_path(args.ablation),
            "validation": {"source": training["source"], "seeds": training["validation_seeds"]},
            "harmony_validation_avg_jct_s": target,
            "ablation_best_validation_avg_jct_s": ablation_final,
            "harmony_simulator_slots": speed_meta["data"]["logged_slots"],
            "harmony_seconds": model_seconds,
            "ablation_reached": reached,
            "ablation_best": best,
            "ablation_total_slots": slots,
            "ablation_total_seconds": direct["seconds"],
        },
    )


if __name__ == "__main__":
    main()
