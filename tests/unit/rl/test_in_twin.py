"""Learning in a cluster's calibrated twin (`dl2.rl.in_twin`): the paired verdict, and a tiny end-to-end run."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from dl2.core.log_format import CLUSTER_FILE, cluster_to_json
from dl2.env.config import EnvConfig
from dl2.placement.samples import record_run
from dl2.rl.config import RLConfig, TwinLearningConfig
from dl2.rl.in_twin import (
    TEACHERS,
    learn_in_twin,
    pair_key,
    paired_difference,
    sequential_difference,
    twin_jct_h,
    twin_jcts_h,
)
from dl2.rl.learned import LearnedScheduler
from dl2.rl.lookahead import load_policy
from dl2.rl.refine import learn_online
from dl2.rl.rollout_teacher import rollout_name
from dl2.rl.training import Trained, load_trained
from dl2.schedulers.registry import make_scheduler
from dl2.sim.calibrated import calibrated_world
from dl2.sim.config import SimConfig
from dl2.sim.decision_log import write_segment
from dl2.sim.run import catalogue_speed, interference_model
from dl2.workload.calibration_io import CALIBRATION_FILE, read_calibration
from dl2.workload.registry import load_workloads
from testbed.twin.workloads import first_jobs, first_nodes

ROOT = Path(__file__).resolve().parents[3]


def test_paired_difference_by_hand() -> None:
    # candidate/incumbent - 1: -0.2 and 0.0, mean -0.1, sd 0.1414, t(0.975, 1) = 12.706: half 12.706 * 0.1
    difference = paired_difference([8.0, 10.0], [10.0, 10.0])
    assert difference["mean"] == pytest.approx(-0.1)
    assert difference["high"] == pytest.approx(-0.1 + 12.7062 * 0.1, abs=1e-3)
    assert difference["low"] == pytest.approx(-0.1 - 12.7062 * 0.1, abs=1e-3)
    assert paired_difference([9.0], [10.0]) == pytest.approx({"mean": -0.1, "low": -0.1, "high": -0.1})


def test_a_sequential_comparison_adds_batches_only_while_undecided() -> None:
    def pairs(differences: list[float]):
        asked: list[int] = []

        def pair(index: int) -> tuple[float, float]:
            asked.append(index)
            return 10.0 * (1 + differences[index]), 10.0

        return pair, asked

    # clearly faster in the first batch: decided there, at the level of 4 planned looks (0.05 / 4)
    pair, asked = pairs([-0.10, -0.11, -0.09, -0.10] + [0.5] * 12)
    verdict = sequential_difference(pair, 4, 16)
    assert asked == [0, 1, 2, 3] and (verdict["workloads"], verdict["looks"]) == (4, 1)
    # mean -0.1, sd 0.008165, t(1 - 0.0125 / 2, 3) = 5.3919 (scipy): half 5.3919 * 0.008165 / 2
    assert verdict["high"] == pytest.approx(-0.1 + 5.3919 * 0.008165 / 2, abs=1e-4)
    # the challenger behind after a batch: no more workloads
    pair, asked = pairs([0.02, -0.01, 0.03, 0.0] + [-0.5] * 12)
    assert sequential_difference(pair, 4, 16)["workloads"] == 4 and len(asked) == 4
    # ahead but undecided: a batch at a time, up to the most
    noisy = [-0.08, 0.06, -0.07, 0.05] * 4
    pair, asked = pairs(noisy)
    verdict = sequential_difference(pair, 4, 16)
    assert asked == list(range(16)) and (verdict["workloads"], verdict["looks"]) == (16, 4)
    assert verdict["mean"] == pytest.approx(-0.01) and verdict["low"] < 0 < verdict["high"]
    # with the most at the first batch it is the fixed-size comparison
    pair, _ = pairs(noisy)
    fixed = paired_difference([10.0 * (1 + d) for d in noisy[:4]], [10.0] * 4)
    assert sequential_difference(pair, 4, 4) == pytest.approx({**fixed, "workloads": 4, "looks": 1})


def test_a_run_that_cannot_finish_is_refused_not_an_error() -> None:
    # the candidate starved the jobs of one workload (its JCT is infinite): refused at once, whatever the others
    assert paired_difference([8.0, math.inf], [10.0, 10.0]) == {"mean": math.inf, "low": math.inf, "high": math.inf}
    verdict = sequential_difference(lambda index: (math.inf, 10.0), 4, 16)
    assert verdict["mean"] == math.inf and verdict["workloads"] == 4
    # only the incumbent could not finish: the candidate is as much faster as can be; neither: no verdict (NaN)
    assert paired_difference([9.0], [math.inf])["mean"] == -1.0
    verdict = sequential_difference(lambda index: (math.inf, math.inf), 4, 16)
    assert math.isnan(verdict["high"]) and verdict["workloads"] == 4


class Starving:
    """Gives no job anything: the simulator stops the run after `SimConfig.stall_slots` idle slots."""

    name = "starving"

    def reset(self) -> None:
        pass

    def schedule(self, view: Any) -> Any:
        from dl2.core import Allocation

        return Allocation()


def test_a_scheduler_that_starves_the_twin_s_jobs_has_an_infinite_jct(tmp_path: Path) -> None:
    log = _small_log(tmp_path)
    world, _ = calibrated_world(log)
    assert twin_jct_h(log, world, Starving(), 0) == math.inf


def test_a_compat_mode_policy_is_refused(tmp_path: Path) -> None:
    running = load_trained(ROOT / "models" / "dl2-compat-hull")
    with pytest.raises(ValueError, match="realistic"):
        learn_in_twin(tmp_path, running, TwinLearningConfig(), 1, tmp_path / "out", "challenger")


def _small_log(folder: Path) -> Path:
    """A decision log of the Philly week's first 12 jobs on 4 nodes under DRF, with its cluster.json."""
    workload = first_jobs(first_nodes(load_workloads("philly", seed=0)[0], 4), 12)
    records = record_run(workload, make_scheduler("drf", catalogue_speed(), False), SimConfig.realistic(seed=0),
                         catalogue_speed(), interference_model())  # fmt: skip
    log = folder / "log"
    write_segment(log, records, 0)
    (log / CLUSTER_FILE).write_text(json.dumps(cluster_to_json(workload.cluster)))
    return log


def test_learning_in_the_twin_of_a_small_log(tmp_path: Path) -> None:
    log = _small_log(tmp_path)
    champion = ROOT / "models" / "dl2-philly"
    config = TwinLearningConfig(
        workloads=2, max_workloads=2, episodes=1, dagger_rounds=0, epochs=1, rollout=True,
        lookahead=("optimus", "speedup-hull"),
    )  # fmt: skip
    verdict = learn_in_twin(log, load_trained(champion), config, 1, tmp_path / "challenger", "challenger")

    # every teacher with every placement (the running policy's first), the best pair chosen, the rollout teacher
    # over all the teachers based on the best
    placers = ("binpack", *(name for name in config.placers if name != "binpack"))
    assert list(verdict.teachers_h) == [pair_key(t, p) for t in TEACHERS for p in placers]
    best, placer = min(verdict.teachers_h, key=verdict.teachers_h.__getitem__).split(" / ")
    assert verdict.teacher == rollout_name(best, TEACHERS) and verdict.teacher.startswith(f"rollout:{best}+")
    assert verdict.placer == placer and verdict.running_placer == "binpack"
    assert len(verdict.running_h) == len(verdict.challenger_h) == 2
    fixed = paired_difference(verdict.challenger_h, verdict.running_h)
    assert verdict.difference == pytest.approx({**fixed, "workloads": 2, "looks": 1})
    assert verdict.kept is (verdict.difference["high"] < 0)
    # the running policy, saved and reloaded for the twin, plays as its own folder does
    world, _ = calibrated_world(log)
    assert twin_jcts_h(log, world, LearnedScheduler.from_dir(champion, compat=False), config) == verdict.running_h
    saved = load_trained(tmp_path / "challenger")
    assert saved.metadata["teacher_in_twin"] == verdict.teacher
    assert saved.metadata["placer_in_twin"] == verdict.placer
    # the challenger places as it learned to (the cluster places alike) and runs inside the lookahead asked for;
    # nothing else of its config changes; the twin judged it as it runs
    assert saved.config == replace(load_trained(champion).config, placer=verdict.placer, lookahead=config.lookahead)
    assert twin_jcts_h(log, world, load_policy(tmp_path / "challenger", compat=False), config) == verdict.challenger_h
    # ... in the world the twin calibrated, which its folder carries to wherever it is loaded
    _, calibration = calibrated_world(log)
    assert read_calibration(tmp_path / "challenger" / CALIBRATION_FILE) == calibration
    assert load_policy(tmp_path / "challenger", compat=False).world.speed.calibration == calibration  # type: ignore[attr-defined]
    assert json.loads(json.dumps(verdict.record()))["kept"] is verdict.kept
    # the same records estimate the challenger off-policy, beside the twin
    off = verdict.off_policy
    assert off["low"] <= off["difference"] <= off["high"] and off["slots"] > 0


def test_online_learning_re_warms_in_each_cluster_twin_after_the_feedback_steps(tmp_path: Path) -> None:
    log = _small_log(tmp_path)
    start = load_trained(ROOT / "models" / "dl2-philly")
    config = TwinLearningConfig(workloads=2, max_workloads=2, episodes=1, dagger_rounds=0, epochs=1)
    learned = learn_online(EnvConfig(), RLConfig(), start, [], 0, 1, None, [log], config, tmp_path / "scratch")

    assert learned.feedback is None  # no batches: no steps
    assert learned.twin_skipped is None and len(learned.twin) == 1
    verdict = learned.twin[0]
    assert (learned.final is not None) == verdict.kept
    if learned.final is not None:  # the challenger's policy, the value network of the policy it replaces
        assert learned.final.value is start.value
        challenger = load_trained(tmp_path / "scratch" / "twin-0")
        assert all(torch.equal(a, b) for a, b in zip(learned.final.policy.state_dict().values(),
                                                     challenger.policy.state_dict().values(), strict=True))  # fmt: skip


@pytest.mark.parametrize(
    ("model", "twin", "why"),
    [
        ("dl2-compat-hull", TwinLearningConfig(), "compat-mode"),
        ("dl2-philly", None, "off"),
    ],
)
def test_online_learning_says_why_it_did_not_use_a_twin(
    tmp_path: Path, model: str, twin: TwinLearningConfig | None, why: str
) -> None:
    start = load_trained(ROOT / "models" / model)
    learned = learn_online(EnvConfig(), RLConfig(), start, [], 0, 1, None, [tmp_path], twin, tmp_path)
    assert learned.twin == [] and learned.final is None
    assert learned.twin_skipped is not None and why in learned.twin_skipped


def test_each_kept_challenger_is_the_next_twin_s_start_and_a_refused_one_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plumbing of `learn_online` with a stand-in learner: log a's challenger is kept, b's refused."""
    from dl2.rl import refine
    from dl2.rl.in_twin import TwinVerdict
    from dl2.rl.training import save_trained

    start = load_trained(ROOT / "models" / "dl2-philly")
    starts: list[Trained] = []

    def learner(
        log: Path, running: Trained, config: TwinLearningConfig, workers: int, out: Path, title: str
    ) -> TwinVerdict:
        starts.append(running)
        state = {k: v + (1.0 if log.name == "a" else 2.0) for k, v in running.policy.state_dict().items()}
        save_trained(out, running.config, state, None, title, {}, overwrite=True)
        kept = log.name == "a"
        difference = {"mean": -0.1 if kept else 0.1, "low": -0.2, "high": -0.01 if kept else 0.2}
        return TwinVerdict(str(log), "speedup-hull", {}, [1.0], [0.9], difference, kept, {}, 0.0)

    monkeypatch.setattr(refine, "learn_in_twin", learner)
    logs = [tmp_path / "a", tmp_path / "b"]
    learned = learn_online(EnvConfig(), RLConfig(), start, [], 0, 1, None, logs, TwinLearningConfig(), tmp_path)

    assert [v.kept for v in learned.twin] == [True, False]
    assert starts[0] is start
    final = learned.final
    assert final is not None and starts[1] is final  # b learned from a's challenger
    plus_one = {k: v + 1.0 for k, v in start.policy.state_dict().items()}
    assert all(torch.equal(final.policy.state_dict()[k], plus_one[k]) for k in plus_one)  # b's refused
    assert final.value is start.value and final.metadata == start.metadata
