"""A cluster's own jobs from its decision records (`dl2.workload.observed`) and the `records:<folder>` source: the
jobs of a logged run come back as they were submitted, with the epochs they needed, and bootstraps are seeded."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dl2.core import InputError, JobAllocation
from dl2.core.log_format import CLUSTER_FILE, cluster_to_json
from dl2.placement.samples import record_run
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import Mode, SimConfig
from dl2.sim.decision_log import write_segment
from dl2.sim.run import interference_model, speed_model
from dl2.workload.observed import observed_jobs, observed_workload, resampled_workload
from dl2.workload.registry import load_workloads
from dl2.workload.source import is_generated, source_problem, workload, workloads_of
from testbed.twin.workloads import first_jobs, first_nodes

CONFIG = SimConfig.realistic(seed=0, speed_noise=0.0)


@pytest.fixture(scope="module")
def logged():
    """A small Philly slice run to the end under DRF, and its records."""
    original = first_nodes(first_jobs(load_workloads("philly")[0], 30), 4)
    speed = speed_model(Mode.REALISTIC)
    records = record_run(original, make_scheduler("drf", speed, False), CONFIG, speed, interference_model())
    return original, records


def test_a_logged_run_gives_back_its_jobs(logged):
    original, records = logged
    observed = observed_workload(records, original.cluster)
    assert [j.spec.job_id for j in observed.jobs] == [j.spec.job_id for j in original.jobs]
    start = original.jobs[0].spec.arrival_s
    final = max(r.time_s for r in records)
    for job, submitted in zip(observed.jobs, original.jobs, strict=True):
        assert job.spec.arrival_s == pytest.approx(submitted.spec.arrival_s - start)
        assert (job.spec.model, job.spec.worker_demand, job.spec.max_workers) == (
            submitted.spec.model, submitted.spec.worker_demand, submitted.spec.max_workers,
        )  # fmt: skip
        last = max((r for r in records if r.job_id == job.spec.job_id), key=lambda r: r.time_s)
        # finished while logged: the epochs it made; still there at the end: the declared ones
        expected = submitted.true_epochs if last.time_s < final else submitted.spec.declared_epochs
        assert job.true_epochs == pytest.approx(expected, rel=1e-6)
    assert observed.slot_s == original.slot_s and observed.cluster == original.cluster


def test_a_job_still_running_when_the_log_ends_keeps_its_declared_epochs(logged):
    _, records = logged
    cut = sorted({r.time_s for r in records})[3]
    jobs = {job.spec.job_id: job for job in observed_jobs([r for r in records if r.time_s <= cut])}
    running = [r for r in records if r.time_s == cut]
    assert running and all(jobs[r.job_id].true_epochs == r.declared_epochs for r in running)
    assert observed_jobs([]) == []


def test_bootstraps_keep_the_arrivals_and_the_mix_and_are_seeded(logged):
    original, records = logged
    observed = observed_workload(records, original.cluster)
    one, again, other = (
        resampled_workload(observed, 1),
        resampled_workload(observed, 1),
        resampled_workload(observed, 2),
    )
    assert one == again and one.jobs != other.jobs
    assert sorted(j.spec.arrival_s for j in one.jobs) == sorted(j.spec.arrival_s for j in observed.jobs)
    assert len({j.spec.job_id for j in one.jobs}) == len(one.jobs) == len(observed.jobs)
    models = {j.spec.model for j in observed.jobs}
    assert {j.spec.model for j in one.jobs} <= models


def test_the_records_source_reads_a_decision_log_folder(logged, tmp_path):
    original, records = logged
    folder = tmp_path / "cluster-a"
    write_segment(folder, records, 0)
    assert source_problem(f"records:{folder}") == f"no {CLUSTER_FILE} beside the decision log"
    (folder / CLUSTER_FILE).write_text(json.dumps(cluster_to_json(replace(original.cluster, name="a"))))
    with pytest.raises(InputError, match="field 'cluster': a record of cluster 'philly-4' in a log of 'a'"):
        workload(f"records:{folder}", 4)  # records of another cluster than the log's description
    (folder / CLUSTER_FILE).write_text(json.dumps(cluster_to_json(original.cluster)))
    assert source_problem(f"records:{folder}") is None
    drawn = workload(f"records:{folder}", 4)
    assert drawn == resampled_workload(observed_workload(records, drawn.cluster, "cluster-a"), 4)
    # a source drawn anew for each seed, as the generators are; a fixed set is all of itself
    assert is_generated(f"records:{folder}") and is_generated("authors-tiny") and not is_generated("philly")
    assert workloads_of(f"records:{folder}", 4) == (drawn,)
    assert workloads_of("dl2-official-small", 0) == load_workloads("dl2-official-small", 0)
    assert source_problem(f"records:{tmp_path / 'missing'}") == "expected records:<the folder of a decision log>"
    with pytest.raises(InputError, match="expected records"):
        workload(f"records:{tmp_path / 'missing'}", 0)


def shifted_cluster_log(folder: Path) -> tuple[Any, Path]:
    """A cluster under the `speed-shift` truth (60 Philly jobs, 4 nodes) and the decision log of its run under DRF,
    with its cluster.json: what `--calibrate-from` and `records:` read."""
    from dl2.truth import SCENARIOS, realise

    cluster = realise(SCENARIOS["speed-shift"], first_nodes(first_jobs(load_workloads("philly")[0], 60), 4))
    drf = make_scheduler("drf", speed_model(Mode.REALISTIC), False)
    records = record_run(cluster.workload, drf, cluster.config(CONFIG), cluster.speed, cluster.interference)
    log = folder / "cluster-a"
    write_segment(log, records, 0)
    (log / CLUSTER_FILE).write_text(json.dumps(cluster_to_json(cluster.workload.cluster)))
    return cluster, log


def test_train_rl_in_the_twin_a_clusters_log_calibrates(tmp_path, capsys):
    """`dl2 train-rl --calibrate-from LOG --source records:LOG`: a cluster whose speeds depart from the catalogue
    (the `speed-shift` truth) logs a week under DRF; a policy then trains on that cluster's jobs in the world its
    records calibrate, and the model says what the calibration found."""
    from dl2.cli.main import main
    from dl2.rl.model_io import load_config
    from dl2.sim.calibrated import calibrated_world

    cluster, log = shifted_cluster_log(tmp_path)
    speed = speed_model(Mode.REALISTIC)
    world, calibration = calibrated_world(log)
    assert calibration.types  # the shifted types were measured and kept
    allocation = JobAllocation((0, 0), (1,))
    specs = [job.spec for job in cluster.workload.jobs]

    def error(model) -> float:
        return float(
            np.mean(
                [
                    abs(model.placed_throughput(s, allocation) / cluster.speed.placed_throughput(s, allocation) - 1)
                    for s in specs
                ]
            )
        )

    assert error(world.speed) < error(speed)  # the twin is closer to the cluster's truth than the catalogue
    out = tmp_path / "tuned"
    code = main(
        [
            *("train-rl", "--mode", "realistic", "--calibrate-from", str(log), "--source", f"records:{log}"),
            *("--iterations", "1", "--episodes-per-iteration", "1", "--workers", "0", "--validation-seeds", "1"),
            *("--window", "8", "--hidden", "16", "--episode-slots", "300", "--validation-max-slots", "300"),
            *("--out", str(out)),
        ]
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["model"] == str(out)
    _, metadata = load_config(out)
    assert metadata["calibrated_from"] == str(log)
    kept = metadata["calibration"]["types_kept"]
    assert len(kept) == len(calibration.types) and all(len(entry["factors"]) == 4 for entry in kept.values())
    assert metadata["rl"]["train_source"] == f"records:{log}"


def test_train_sl_in_the_twin_a_clusters_log_calibrates(tmp_path, capsys):
    """`dl2 train-sl --calibrate-from LOG`: the teacher reads the speeds the cluster's records calibrate and is
    recorded in that world (a re-warm-up on what the cluster showed, not the catalogue); the model says so."""
    from dl2.cli.main import main
    from dl2.rl.config import WarmUpConfig
    from dl2.rl.model_io import load_config
    from dl2.rl.training import make_teacher, record_teacher
    from dl2.sim.calibrated import calibrated_world

    _, log = shifted_cluster_log(tmp_path)
    world, _ = calibrated_world(log)
    config = WarmUpConfig(teacher="speedup-hull", mode="realistic", source=f"records:{log}", workers=1)
    assert make_teacher(config, world).speed is world.speed  # type: ignore[union-attr]
    in_twin = record_teacher(config, [0], world=world)[0]
    in_catalogue = record_teacher(config, [0])[0]
    assert len(in_twin[0]) > 0 and in_twin[1] != in_catalogue[1]  # another world: other runs, other JCTs
    out = tmp_path / "rewarmed"
    code = main(
        [
            *("train-sl", "--mode", "realistic", "--calibrate-from", str(log), "--source", f"records:{log}"),
            *("--teacher", "speedup-hull", "--episodes", "1", "--dagger-rounds", "1", "--dagger-episodes", "1"),
            *("--epochs", "1", "--workers", "1", "--window", "8", "--hidden", "16", "--out", str(out)),
        ]
    )
    assert code == 0
    capsys.readouterr()
    _, metadata = load_config(out)
    assert metadata["calibrated_from"] == str(log) and metadata["calibration"]["types_kept"]
    assert metadata["warm_up"]["source"] == f"records:{log}"


@pytest.mark.parametrize("command", ["train-rl", "train-sl"])
def test_calibrate_from_needs_realistic_mode(tmp_path, capsys, command):
    from dl2.cli.main import main

    code = main([command, "--mode", "compat", "--calibrate-from", str(tmp_path), "--out", str(tmp_path / "m")])
    assert code == 2 and "--calibrate-from" in capsys.readouterr().err
