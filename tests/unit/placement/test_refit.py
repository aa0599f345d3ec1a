"""Harmony refit from a decision log (`dl2.placement.refit`, `dl2 refit-harmony`): the held-out split, the
speed model kept only when it errs less than the deployed one, and the written folders, on a tiny cluster."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dl2.core import DecisionRecord, InputError
from dl2.placement import refit as refit_module
from dl2.placement.policy import HarmonyPlacer
from dl2.placement.predictor import PredictorResult
from dl2.placement.refit import (
    HarmonyRefitConfig,
    load_speed_model,
    mean_error,
    refit_harmony,
    refit_speed_model,
    split_by_time,
)
from dl2.placement.samples import samples_from_records
from dl2.placement.speed_model import NumpySpeedModel
from dl2.sim.config import SimConfig
from dl2.sim.run import interference_model, speed_model
from dl2.workload.source import workload
from tests.builders import PACKED_SOURCE, doubled_interference, packed_records, write_log

ROOT = Path(__file__).resolve().parents[3]
DEPLOYED_SPEED = ROOT / "models" / "harmony-speed-philly"
DEPLOYED_PLACER = ROOT / "models" / "harmony-placer-philly"
SPEED = speed_model(SimConfig.realistic().mode)
TINY = PACKED_SOURCE
SMALL = replace(
    HarmonyRefitConfig(),
    speed=replace(HarmonyRefitConfig().speed, epochs=4),
    placer=replace(HarmonyRefitConfig().placer, iterations=1, validation_seeds=(3,), schedulers=("optimus",)),
)


def _log(tmp_path: Path, records: list[DecisionRecord]) -> Path:
    return write_log(tmp_path / "log", records, workload(TINY, 0).cluster)


def test_the_held_out_samples_are_the_last_slots() -> None:
    samples = samples_from_records(packed_records(doubled_interference()), workload(TINY, 0).cluster)
    train, held_out = split_by_time(samples, 0.25)
    assert len(train) + len(held_out) == len(samples) and len(held_out) == round(len(samples) * 0.25)
    np.testing.assert_array_equal(held_out.log_throughput, samples.log_throughput[len(train) :])


def test_the_refit_errs_less_than_the_deployed_model_on_a_cluster_unlike_the_catalogue() -> None:
    records = packed_records(doubled_interference())
    deployed = load_speed_model(DEPLOYED_SPEED)
    refit = refit_speed_model(records, workload(TINY, 0).cluster, deployed, SMALL)
    assert refit.kept == "refit" and refit.error_refit < refit.error_deployed
    assert refit.model is not deployed and refit.train_samples > refit.held_out_samples > 0
    _, held_out = split_by_time(samples_from_records(records, workload(TINY, 0).cluster), 0.25)
    assert mean_error(refit.model, held_out) == pytest.approx(refit.error_refit)


def test_a_refit_that_errs_more_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    deployed = load_speed_model(DEPLOYED_SPEED)
    worse = PredictorResult(deployed.state, replace(deployed.config, target_mean=deployed.config.target_mean + 1), [])
    monkeypatch.setattr(refit_module, "train_predictor", lambda *args, **kwargs: worse)
    refit = refit_speed_model(packed_records(interference_model()), workload(TINY, 0).cluster, deployed, SMALL)
    assert refit.kept == "deployed" and refit.model is deployed and refit.error_refit > refit.error_deployed


def test_too_few_samples_are_refused() -> None:
    records = packed_records(interference_model())[:3]
    with pytest.raises(InputError, match="too few"):
        refit_speed_model(records, workload(TINY, 0).cluster, load_speed_model(DEPLOYED_SPEED), SMALL)


def test_refit_writes_a_speed_model_and_a_placer_that_load(tmp_path: Path) -> None:
    log = _log(tmp_path, packed_records(doubled_interference()))
    result = refit_harmony(log, DEPLOYED_SPEED, DEPLOYED_PLACER, tmp_path / "out", SPEED, SMALL)
    assert result.speed_dir == tmp_path / "out" / "speed-model" and result.placer_dir == tmp_path / "out" / "placer"
    NumpySpeedModel.from_dir(result.speed_dir)
    placer = HarmonyPlacer.from_dir(result.placer_dir)
    assert placer.config.hidden == (128, 64)
    # the best placer on validation is kept: the deployed one unless an iteration beat it
    assert result.best_validation_h <= result.untrained_validation_h
    metadata = json.loads((result.placer_dir / "config.json").read_text())["metadata"]
    assert metadata["refit_from"] == str(log) and metadata["best_iteration"] in (-1, 0)
    record = result.record()
    assert record["speed_model_kept"] == "refit" and record["speed_error_refit"] < record["speed_error_deployed"]


def test_cli_refits_and_refuses_what_it_cannot_use(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dl2.cli.main import main

    log = _log(tmp_path, packed_records(doubled_interference()))
    out = tmp_path / "refit"
    flags = ["--log", str(log), "--epochs", "2", "--iterations", "1", "--validation-seeds", "3", "--out", str(out)]
    assert main(["refit-harmony", *flags]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["placer"] == str(out / "placer") and HarmonyPlacer.from_dir(out / "placer")
    assert not list(tmp_path.glob(".refit*"))  # the staging folder is gone
    assert main(["refit-harmony", *flags]) == 2  # exists: --overwrite replaces it
    assert "--overwrite" in capsys.readouterr().err
    assert main(["refit-harmony", *flags[:-1], str(tmp_path / "x"), "--epochs", "0"]) == 2
    assert "epochs" in capsys.readouterr().err
    assert main(["refit-harmony", "--log", str(tmp_path / "nowhere"), "--out", str(tmp_path / "y")]) == 2
    assert "nowhere" in capsys.readouterr().err and not (tmp_path / "y").exists()


def _middle(records: list[DecisionRecord]) -> int:
    """The index of a placed record of a middle slot (its samples are the ones the refit reads)."""
    times = sorted({r.time_s for r in records})
    return next(i for i, r in enumerate(records) if r.time_s == times[len(times) // 2] and r.applied_worker_nodes)


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        pytest.param(
            lambda r: replace(r, applied_worker_nodes=(*r.applied_worker_nodes[:-1], 7)),
            "applied_worker_nodes",
            ["node 7", "3 nodes"],
            id="worker-off-the-cluster",
        ),
        pytest.param(
            lambda r: replace(r, applied_ps_nodes=(3,)),
            "applied_ps_nodes",
            ["node 3", "3 nodes"],
            id="ps-off-the-cluster",
        ),
        pytest.param(lambda r: replace(r, cluster="elsewhere"), "cluster", ["'elsewhere'"], id="another-cluster"),
    ],
)
def test_cli_refuses_a_record_the_logs_cluster_cannot_hold_naming_file_row_and_field(
    change: Any, field: str, words: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dl2.cli.main import main

    records = packed_records(doubled_interference())
    bad = _middle(records)
    records[bad] = change(records[bad])
    log = _log(tmp_path, records)
    before = sorted(tmp_path.rglob("*"))
    out = tmp_path / "refit"
    code = main(["refit-harmony", "--log", str(log), "--epochs", "1", "--iterations", "1", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "", captured.err
    (line,) = captured.err.splitlines()
    (segment,) = log.glob("segment-*.jsonl")
    for word in (str(segment), f"row {bad + 1}", f"field '{field}'", *words):
        assert word in line, (word, line)
    assert sorted(tmp_path.rglob("*")) == before  # nothing written, no staging left
    with pytest.raises(InputError, match=field):  # the library refuses it too (the `harmony` stage calls it)
        refit_harmony(log, DEPLOYED_SPEED, DEPLOYED_PLACER, out, SPEED, SMALL)
    assert sorted(tmp_path.rglob("*")) == before
