"""Helpers shared by the registry/promotion tests and the DAG tests (not a test module).

Models: a tiny warm-up trained with `dl2 train-sl` (seconds) and two hand-set networks derived from it (zero
weights, biases only): `bundle` always gives the next job a worker and a PS, which is exactly FIFO on the
authors' setting, `stopper` stops as soon as the work-conserving rule lets it (one task per slot), which
finishes every job but slowly: a challenger that the gate must reject, and `starver` gives workers only, never a
parameter server, so no job ever progresses: the stall guard stops it.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

from pipelines.params import Params

ROOT = Path(__file__).resolve().parent.parent


def smoke_params(*overrides: str) -> Params:
    from pipelines.params import load

    return load(smoke=True, overrides=overrides)


def empty_mlflow_db(folder: Path) -> Path:
    """An MLflow SQLite database with its schema created (creating it takes seconds: tests copy this one)."""
    from mlflow import MlflowClient

    folder.mkdir(parents=True, exist_ok=True)
    MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}").search_experiments()
    return folder / "mlflow.db"


def new_store(template: Path, folder: Path) -> Path:
    """A fresh MLflow store (`DL2_MLRUNS` folder) from the template database."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(template, folder / "mlflow.db")
    return folder


def build_models(folder: Path, trained: Path | None = None) -> dict[str, Path]:
    """`tiny` (trained, unless `trained` is given: a per-job compat model), `bundle` (FIFO), `stopper` (slow
    but safe) and `starver` (starves every job) model folders under `folder`."""
    import torch

    from dl2.rl.model_io import load_config, load_state, save_model

    if trained is None:
        trained = folder / "tiny"
        command = ["train-sl", "--teacher", "srpt-knee", "--mode", "compat", "--source", "authors-tiny"]
        command += ["--episodes", "1", "--epochs", "1", "--dagger-rounds", "0", "--window", "10", "--hidden", "16"]
        subprocess.run(
            [str(ROOT / ".venv" / "bin" / "dl2"), *command, "--out", str(trained)], check=True, capture_output=True
        )
    config, _ = load_config(trained)
    zeros = {key: torch.zeros_like(value) for key, value in load_state(trained).items()}

    def hand_set(name: str, roles: list[float], stop: float) -> Path:
        # job_head's last layer scores (worker, PS, bundle) for every job; ties go to the earliest job
        state = {**zeros, "job_head.2.bias": torch.tensor(roles), "stop_head.bias": torch.tensor([stop])}
        return save_model(folder / name, config, state, card=f"hand-set test policy {name}\n")

    return {
        "tiny": trained,
        "bundle": hand_set("bundle", [0.0, 0.0, 1.0], -1.0),
        "stopper": hand_set("stopper", [0.0, 0.0, 1.0], 5.0),
        "starver": hand_set("starver", [1.0, 0.0, 0.0], -1.0),
    }


def decision_log(folder: Path, seed: int = 9000) -> int:
    """A real decision log (DRF deciding, FIFO proposing, shadow mode) of a tiny workload, with its cluster.json,
    as a controller writes it; the number of records."""
    import json

    from dl2.schedulers.registry import make_scheduler
    from dl2.sim.config import Mode, SimConfig
    from dl2.sim.decision_log import log_run
    from dl2.sim.run import speed_model
    from dl2.workload.source import workload
    from pipelines.feedback import cluster_to_json

    jobs = workload("authors-tiny", seed)
    speed = speed_model(Mode.COMPAT)
    records, _ = log_run(
        jobs, make_scheduler("drf", speed, True), make_scheduler("fifo", speed, True), "shadow",
        SimConfig.for_mode(Mode.COMPAT, seed), speed, None, folder, model_version="test",
    )  # fmt: skip
    (folder / "cluster.json").write_text(json.dumps(cluster_to_json(jobs.cluster)))
    return records


def placed_decision_log(folder: Path, seed: int = 0, placements: bool = True) -> int:
    """A realistic-mode decision log that says where each job ran (DRF packing jobs onto shared servers of a tiny
    cluster whose interference is twice the profiled), with its cluster.json; the number of records. Without
    `placements`, the same records with no nodes (as a controller that does not record them writes)."""
    from dl2.workload.source import workload
    from tests.builders import PACKED_SOURCE, doubled_interference, packed_records, write_log

    records = packed_records(doubled_interference(), seed)
    if not placements:
        records = [replace(r, applied_worker_nodes=(), applied_ps_nodes=()) for r in records]
    write_log(folder, records, workload(PACKED_SOURCE, seed).cluster)
    return len(records)
