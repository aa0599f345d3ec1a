"""Learning in a cluster's calibrated twin (`dl2.rl.in_twin`): the paired verdict, and a tiny end-to-end run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dl2.core.log_format import CLUSTER_FILE, cluster_to_json
from dl2.placement.samples import record_run
from dl2.rl.config import TwinLearningConfig
from dl2.rl.in_twin import TEACHERS, learn_in_twin, paired_difference, twin_jcts_h
from dl2.rl.learned import LearnedScheduler
from dl2.rl.training import load_trained
from dl2.schedulers.registry import make_scheduler
from dl2.sim.calibrated import calibrated_world
from dl2.sim.config import SimConfig
from dl2.sim.decision_log import write_segment
from dl2.sim.run import catalogue_speed, interference_model
from dl2.twin.workloads import first_jobs, first_nodes
from dl2.workload.registry import load_workloads

ROOT = Path(__file__).resolve().parents[3]


def test_paired_difference_by_hand() -> None:
    # candidate/incumbent - 1: -0.2 and 0.0, mean -0.1, sd 0.1414, t(0.975, 1) = 12.706: half 12.706 * 0.1
    difference = paired_difference([8.0, 10.0], [10.0, 10.0])
    assert difference["mean"] == pytest.approx(-0.1)
    assert difference["high"] == pytest.approx(-0.1 + 12.7062 * 0.1, abs=1e-3)
    assert difference["low"] == pytest.approx(-0.1 - 12.7062 * 0.1, abs=1e-3)
    assert paired_difference([9.0], [10.0]) == pytest.approx({"mean": -0.1, "low": -0.1, "high": -0.1})


def test_a_compat_mode_policy_is_refused(tmp_path: Path) -> None:
    running = load_trained(ROOT / "models" / "dl2-compat-hull")
    with pytest.raises(ValueError, match="realistic"):
        learn_in_twin(tmp_path, running, TwinLearningConfig(), 1, tmp_path / "out", "challenger")


def test_learning_in_the_twin_of_a_small_log(tmp_path: Path) -> None:
    workload = first_jobs(first_nodes(load_workloads("philly", seed=0)[0], 4), 12)
    records = record_run(workload, make_scheduler("drf", catalogue_speed(), False), SimConfig.realistic(seed=0),
                         catalogue_speed(), interference_model())  # fmt: skip
    log = tmp_path / "log"
    write_segment(log, records, 0)
    (log / CLUSTER_FILE).write_text(json.dumps(cluster_to_json(workload.cluster)))
    champion = ROOT / "models" / "dl2-philly"
    config = TwinLearningConfig(workloads=2, episodes=1, dagger_rounds=0, epochs=1)
    verdict = learn_in_twin(log, load_trained(champion), config, 1, tmp_path / "challenger", "challenger")

    assert verdict.teacher == min(TEACHERS, key=verdict.teachers_h.__getitem__)
    assert len(verdict.running_h) == len(verdict.challenger_h) == 2
    assert verdict.difference == pytest.approx(paired_difference(verdict.challenger_h, verdict.running_h))
    assert verdict.kept is (verdict.difference["high"] < 0)
    # the running policy, saved and reloaded for the twin, plays as its own folder does
    world, _ = calibrated_world(log)
    assert twin_jcts_h(log, world, LearnedScheduler.from_dir(champion, compat=False), config) == verdict.running_h
    saved = load_trained(tmp_path / "challenger")
    assert saved.metadata["teacher_in_twin"] == verdict.teacher
    assert saved.config == load_trained(champion).config
    assert json.loads(json.dumps(verdict.record()))["kept"] is verdict.kept
