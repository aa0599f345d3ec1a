"""Running schedulers on workloads: one run, or a grid of schedulers x seeds x workloads."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cache

from dl2.core import Scheduler, Workload
from dl2.sim.config import Mode, SimConfig
from dl2.sim.metrics import RunMetrics, summarize
from dl2.sim.simulator import SimResult, simulate
from dl2.workload.interference import InterferenceModel
from dl2.workload.speed import RbfSpeedModel, SpeedModel
from dl2.workload.speed_fit import ParametricSpeedModel


@cache
def speed_model(mode: Mode) -> SpeedModel:
    """The mode's speed model (built once per process)."""
    return RbfSpeedModel() if mode is Mode.COMPAT else ParametricSpeedModel()


def catalogue_speed() -> ParametricSpeedModel:
    """The catalogue's fitted speed: realistic mode's (built once per process), what calibrations and truths
    depart from."""
    speed = speed_model(Mode.REALISTIC)
    assert isinstance(speed, ParametricSpeedModel)
    return speed


@cache
def interference_model() -> InterferenceModel:
    return InterferenceModel()


@dataclass(frozen=True, slots=True)
class World:
    """How the simulated cluster's jobs really run: their speeds and how co-located jobs slow each other. The
    catalogue's by default; a calibrated twin's (`dl2.workload.calibration`) when a policy is fine-tuned on what a
    cluster's records say. Picklable, so rollout workers get it with their tasks."""

    speed: SpeedModel
    interference: InterferenceModel

    @classmethod
    def catalogue(cls, mode: Mode) -> World:
        return cls(speed_model(mode), interference_model())


SchedulerBuilder = Callable[[SpeedModel, bool], Scheduler]
"""(speed model, compat?) -> a fresh scheduler."""


def run_one(workload: Workload, build: SchedulerBuilder, config: SimConfig) -> SimResult:
    speed = speed_model(config.mode)
    scheduler = build(speed, config.mode is Mode.COMPAT)
    return simulate(workload, scheduler, config, speed, interference_model())


@dataclass(frozen=True, slots=True)
class GridRun:
    """One cell of a comparison grid."""

    scheduler: str
    seed: int
    metrics: RunMetrics
    result: SimResult


def run_grid(
    workloads: Sequence[Workload],
    builders: dict[str, SchedulerBuilder],
    config: SimConfig,
    seeds: Sequence[int],
    on_done: Callable[[GridRun], None] | None = None,
) -> list[GridRun]:
    """Every scheduler on every workload for every seed (the seed drives noise, errors and restore times)."""
    runs = []
    for name, build in builders.items():
        for seed in seeds:
            for workload in workloads:
                result = run_one(workload, build, replace(config, seed=seed))
                run = GridRun(name, seed, summarize(result), result)
                runs.append(run)
                if on_done is not None:
                    on_done(run)
    return runs
