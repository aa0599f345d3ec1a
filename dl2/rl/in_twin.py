"""Learning in a cluster's calibrated twin: a challenger re-warmed on what the cluster's records say, and the twin's
paired verdict on it against the policy it would replace.

A cluster is never the catalogue. Its decision log calibrates a twin (`dl2.sim.calibrated`: per-type speeds and
interference fitted to the observed progress); there the heuristics that read speeds (Optimus, `speedup-hull`)
read the calibrated ones, and the best of them in the twin (or a rollout teacher over them based on it,
`TwinLearningConfig.rollout`) teaches the running policy by DAgger
(`dl2.rl.training.warm_up` from that policy), on the cluster's own jobs (`records:<log>`). The twin also picks the
placement: each teacher is tried with the running policy's placer and those `TwinLearningConfig.placers` names, and
the challenger learns and places with the best pair's (interference in the twin is the calibrated one, so it is
the cluster's records that decide whether packing or isolating jobs pays). The challenger is kept
only if the twin says it is faster: its average JCT on the twin's workloads, paired with the running policy's on
the same workloads, lower with a 95% interval of the mean relative difference below zero. That interval is the
gate's prediction, to be set against what the cluster then shows.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from dl2.core.log_format import read_cluster_log
from dl2.rl.config import SupervisedConfig, TwinLearningConfig, WarmUpConfig
from dl2.rl.learned import LearnedScheduler
from dl2.rl.lookahead import load_policy
from dl2.rl.off_policy import off_policy_difference
from dl2.rl.rollout_teacher import rollout_name
from dl2.rl.training import Trained, save_trained, warm_up
from dl2.schedulers.registry import make_scheduler
from dl2.sim.calibrated import calibrated_world, calibration_summary
from dl2.sim.config import SimConfig
from dl2.sim.metrics import summarize
from dl2.sim.run import World
from dl2.sim.simulator import SimulationError, simulate
from dl2.workload.calibration_io import CALIBRATION_FILE, calibration_bytes
from dl2.workload.source import workload

TEACHERS = ("optimus", "speedup-hull")
"""The heuristics that read speeds, so that calibrated speeds change what they decide."""


@dataclass(frozen=True)
class TwinVerdict:
    """What learning in the twin gave: the teacher and placement chosen and how each pair did there (keyed
    `teacher / placer`), the running policy's and the challenger's average JCT (h) on the same twin workloads, the
    paired relative difference with its 95% interval, whether the challenger is kept, and what the warm-up
    reported."""

    log: str
    teacher: str
    teachers_h: dict[str, float]
    running_h: list[float]
    challenger_h: list[float]
    difference: dict[str, float]
    kept: bool
    warm_up: dict[str, Any]
    seconds: float
    placer: str = ""
    """The placement the challenger learned with and places with (the running policy's when unchanged)."""
    running_placer: str = ""
    off_policy: dict[str, float] = field(default_factory=dict)
    """The challenger against the running policy off-policy from the log's records (`dl2.rl.off_policy`): evidence
    beside the twin's, not the gate's (what it is worth: docs/results.md, off-policy evaluation)."""
    calibration: dict[str, Any] = field(default_factory=dict)
    """What the twin learned of the cluster from the log (`dl2.sim.calibrated.calibration_summary`)."""

    def record(self) -> dict[str, Any]:
        """As stage reports and model metadata hold it."""
        return {
            "log": self.log,
            "teacher": self.teacher,
            "placer": self.placer,
            "running_placer": self.running_placer,
            "teachers_in_twin_h": self.teachers_h,
            "running_in_twin_h": self.running_h,
            "challenger_in_twin_h": self.challenger_h,
            "predicted_difference": self.difference,
            "kept": self.kept,
            "warm_up": self.warm_up,
            "seconds": self.seconds,
            "off_policy": self.off_policy,
            "calibration": self.calibration,
        }


def paired_difference(candidate: list[float], incumbent: list[float], level: float = 0.05) -> dict[str, float]:
    """Mean relative difference candidate / incumbent - 1 over paired workloads, with its (1 - `level`) t interval
    (an interval of zero width for a single pair). A run that could not finish has an infinite JCT: where the
    candidate's could not, the difference is +inf (it is refused); where only the incumbent's could not, that
    pair's difference is -1; where neither could, NaN (no verdict)."""
    with np.errstate(invalid="ignore"):
        differences = np.array(candidate) / np.array(incumbent) - 1
    if not np.isfinite(differences).all():
        worst = math.nan if np.isnan(differences).any() else math.inf
        return {"mean": worst, "low": worst, "high": worst}
    mean = float(differences.mean())
    if len(differences) < 2:
        return {"mean": mean, "low": mean, "high": mean}
    spread = differences.std(ddof=1) / np.sqrt(len(differences))
    half = float(stats.t.ppf(1 - level / 2, len(differences) - 1) * spread)
    return {"mean": mean, "low": mean - half, "high": mean + half}


def sequential_difference(
    pair: Callable[[int], tuple[float, float]], first: int, most: int, level: float = 0.05
) -> dict[str, float]:
    """`paired_difference` over workloads added in batches of `first` until it is decided, at most `most`.

    `pair(i)` gives the candidate's and the incumbent's average JCT on workload i. After each batch: the candidate
    is faster if the interval's upper end is below zero; it is not (and no more workloads are run) if the mean is
    not negative; else another batch. Every look's interval is at `level` / looks (Bonferroni over the planned
    looks), so the chance of calling a candidate that is not faster "faster" stays below `level` / 2 however many
    looks are taken. With `most` == `first` this is the fixed-size `paired_difference`. The result also says how
    many workloads were run (`workloads`) and at how many looks (`looks`)."""
    first, most = max(first, 1), max(most, first, 1)
    planned = math.ceil(most / first)
    candidate: list[float] = []
    incumbent: list[float] = []
    while True:
        for index in range(len(candidate), min(len(candidate) + first, most)):
            ours, theirs = pair(index)
            candidate.append(ours)
            incumbent.append(theirs)
        difference = paired_difference(candidate, incumbent, level / planned)
        looks = math.ceil(len(candidate) / first)
        decided = difference["high"] < 0 or not difference["mean"] < 0  # NaN: a run could not finish
        if decided or len(candidate) >= most:
            return {**difference, "workloads": len(candidate), "looks": looks}


def twin_jct_h(log: Path, world: World, scheduler: Any, seed: int) -> float:
    """Average JCT (h) of `scheduler` on the twin's workload `seed` (the cluster's jobs, resampled); infinite
    where it starves the jobs (the run cannot finish), so that a comparison refuses it rather than fails."""
    try:
        result = simulate(workload(f"records:{log}", seed), scheduler, SimConfig.realistic(seed=seed), world.speed,
                          world.interference)  # fmt: skip
    except SimulationError:
        return math.inf
    return summarize(result).avg_jct_s / 3600


def twin_jcts_h(log: Path, world: World, scheduler: Any, config: TwinLearningConfig) -> list[float]:
    """Average JCT (h) of `scheduler` on each of the twin's first compared workloads."""
    return [twin_jct_h(log, world, scheduler, seed) for seed in range(config.seed, config.seed + config.workloads)]


def twin_verdict(
    log: Path, world: World, candidate: Any, incumbent: Any, config: TwinLearningConfig
) -> tuple[dict[str, float], list[float], list[float]]:
    """`sequential_difference` of `candidate` against `incumbent` on the twin's workloads (`config.workloads` a
    batch, at most `config.max_workloads`), with their average JCTs (h) on the workloads it ran."""
    candidate_h: list[float] = []
    incumbent_h: list[float] = []

    def pair(index: int) -> tuple[float, float]:
        seed = config.seed + index
        candidate_h.append(twin_jct_h(log, world, candidate, seed))
        incumbent_h.append(twin_jct_h(log, world, incumbent, seed))
        return candidate_h[-1], incumbent_h[-1]

    difference = sequential_difference(pair, config.workloads, config.max_workloads)
    return difference, candidate_h, incumbent_h


def learn_in_twin(
    log: Path, running: Trained, config: TwinLearningConfig, workers: int, out: Path, title: str
) -> TwinVerdict:
    """Re-warm `running` (a realistic-mode policy) in the twin `log` calibrates; the challenger is saved at `out`
    (kept or not: the verdict says which) with the verdict in its metadata."""
    if running.config.mode != "realistic":
        raise ValueError("the calibrated twin plays realistic mode: a compat-mode policy cannot learn there")
    started = time.perf_counter()
    world, calibration = calibrated_world(log)
    placers = tuple(dict.fromkeys((running.config.placer, *config.placers)))
    pairs = {(name, placer): pair_key(name, placer) for name in TEACHERS for placer in placers}
    teachers = {
        key: float(np.mean(twin_jcts_h(log, world, make_scheduler(name, world.speed, False, placer), config)))
        for (name, placer), key in pairs.items()
    }
    best, placer = min(pairs, key=lambda pair: teachers[pairs[pair]])
    teacher = rollout_name(best, TEACHERS) if config.rollout else best
    warm = WarmUpConfig(
        teacher=teacher,
        source=f"records:{log}",
        mode="realistic",
        episodes=config.episodes,
        dagger_rounds=config.dagger_rounds,
        dagger_episodes=max(config.episodes // 2, 1),
        observation=running.config.observation,
        placer=placer,
        supervised=SupervisedConfig(network=running.config.network, epochs=config.epochs),
        workers=workers,
    )
    policy, _, facts = warm_up(warm, policy=_copy_of(running), world=world)
    lookahead = config.lookahead or running.config.lookahead
    horizon = config.lookahead_horizon_slots if config.lookahead else running.config.lookahead_horizon_slots
    fitted = config.lookahead_fit if config.lookahead else running.config.lookahead_fit
    metadata = {
        **running.metadata, "calibrated_from": str(log), "teacher_in_twin": teacher, "placer_in_twin": placer,
        "lookahead": list(lookahead), "lookahead_horizon_slots": horizon, "lookahead_fit": fitted,
        "lookahead_calibrated_from": str(log) if lookahead else None,
    }  # fmt: skip
    challenger = replace(
        running.config, placer=placer, lookahead=lookahead, lookahead_horizon_slots=horizon, lookahead_fit=fitted
    )
    # the world the twin judges it in travels with it: its lookahead runs there wherever the folder is loaded
    files = {CALIBRATION_FILE: calibration_bytes(calibration)} if lookahead else None
    save_trained(out, challenger, policy.state_dict(), None, title, metadata, True, files)
    with tempfile.TemporaryDirectory(prefix="dl2-twin-running-") as scratch:
        before = Path(scratch) / "running"
        save_trained(before, running.config, running.policy.state_dict(), None, "the running policy", {}, False)
        difference, challenger_h, running_h = twin_verdict(
            log, world, load_policy(out, compat=False), load_policy(before, compat=False), config
        )
        # the network's own decisions against the running one's (a lookahead draws no propensities to weigh)
        estimate = off_policy_difference(
            *read_cluster_log(log), LearnedScheduler.from_dir(out, compat=False),
            LearnedScheduler.from_dir(before, compat=False), world.speed,
        )  # fmt: skip
    return TwinVerdict(
        log=str(log),
        teacher=teacher,
        teachers_h=teachers,
        running_h=running_h,
        challenger_h=challenger_h,
        difference=difference,
        kept=difference["high"] < 0,
        placer=placer,
        running_placer=running.config.placer,
        warm_up=facts,
        seconds=time.perf_counter() - started,
        off_policy=estimate.summary(),
        calibration=calibration_summary(calibration),
    )


def pair_key(teacher: str, placer: str) -> str:
    """How a teacher-and-placement pair is named in `TwinVerdict.teachers_h`."""
    return f"{teacher} / {placer}"


def _copy_of(trained: Trained) -> Any:
    """A fresh network with `trained`'s weights (the warm-up trains it in place)."""
    from dl2.rl.networks import PolicyNetwork

    policy = PolicyNetwork(trained.config.observation.shape, trained.config.network)
    policy.load_state_dict(trained.policy.state_dict())
    return policy
