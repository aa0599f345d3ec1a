"""Episodes of the placer: a workload run under an allocation policy that places with a `HarmonyPlacer`.

The world is the speed-prediction model (`PredictedSimulation`: Harmony's way, no step of the true simulator)
or the simulator itself (the ablation). Each run also counts its slots, the unit of the ablation's sample
cost.
"""

from __future__ import annotations

from dataclasses import dataclass

from dl2.core import Workload
from dl2.placement.experience import Decisions, ExperienceRecorder
from dl2.placement.policy import HarmonyPlacer
from dl2.placement.world import PredictedSimulation, SpeedSource
from dl2.schedulers.registry import SCHEDULERS
from dl2.sim.config import SimConfig
from dl2.sim.simulator import Simulation
from dl2.workload.interference import InterferenceModel
from dl2.workload.speed import SpeedModel


@dataclass(frozen=True, slots=True)
class World:
    """Where episodes run: `source` set means the speed model's world, None the true simulator."""

    speed: SpeedModel
    """The speed function oracle allocation policies (Optimus) consult, and the simulator's."""
    interference: InterferenceModel | None
    """The simulator's interference (unused in the speed model's world)."""
    source: SpeedSource | None = None

    def simulation(self, workload: Workload, config: SimConfig) -> Simulation:
        if self.source is not None:
            return PredictedSimulation(workload, config, self.speed, self.source)
        return Simulation(workload, config, self.speed, self.interference)


@dataclass(frozen=True, slots=True)
class EpisodeResult:
    avg_jct_s: float
    slots: int
    """Slots simulated."""
    decisions: Decisions | None
    """What the recorder collected (None without one)."""


def run_episode(
    world: World,
    workload: Workload,
    scheduler: str,
    placer: HarmonyPlacer,
    config: SimConfig,
    recorder: ExperienceRecorder | None = None,
) -> EpisodeResult:
    """One run of `workload` with the allocation policy `scheduler` placing through `placer`."""
    simulation = world.simulation(workload, config)
    policy = SCHEDULERS[scheduler](world.speed, False, placer)
    policy.reset()
    placer.hook = recorder
    try:
        while not simulation.done:
            view = simulation.begin_slot()
            if recorder is not None:
                recorder.observe(view)
            allocation = policy.schedule(view)
            placer.finish_job()
            if recorder is not None:
                recorder.end_round(view, allocation)
            simulation.apply(allocation)
    finally:
        placer.hook = None
    result = simulation.result(scheduler)
    jct = sum(job.jct_s for job in result.jobs) / max(len(result.jobs), 1)
    return EpisodeResult(jct, result.num_slots, recorder.take() if recorder is not None else None)
