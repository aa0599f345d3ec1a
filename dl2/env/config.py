"""The environment's configuration, without Gymnasium: what the CLI, params.yaml and the rollout tasks carry."""

from __future__ import annotations

from dataclasses import field
from typing import Annotated, Literal

from annotated_types import Ge, Gt, Le

from dl2.config import Keys, config
from dl2.env.observation import ObservationConfig
from dl2.schedulers.registry import check_placer
from dl2.sim.config import SimConfig


@config
class EnvConfig:
    """How the environment runs."""

    observation: ObservationConfig = field(default_factory=ObservationConfig)
    """Window size J and feature set."""
    sim: SimConfig = field(default_factory=SimConfig.compat)
    """Simulator mode and realism knobs (the seed is replaced per episode)."""
    placer: str = "load-balance"
    """Realistic-mode placer of the finished targets."""
    reward: Literal["progress", "jct"] = "jct"
    """'progress' (DL2 §4.3's reward: the slot's epochs done, each over its job's total) or 'jct' (minus the jobs
    in the system: its sum over an episode is minus the total JCT, which is what the evaluation measures)."""
    reward_scale: Annotated[float, Gt(0), Le(1e6)] = 10.0
    """Divides the 'jct' reward so that a slot's reward is of order one."""
    max_slots: Annotated[int, Ge(1), Le(10_000_000)] = 3_000
    """Episodes are truncated after this many slots."""
    work_conserving: bool = True
    """Forbid stopping before the slot has granted anything while something fits (see `SlotDecision`)."""

    @property
    def window(self) -> int:
        return self.observation.window

    def __post_init__(self) -> None:
        check_placer("placer", self.placer)


ENV_KEYS = Keys(
    EnvConfig,
    {
        "reward": "reward",
        "episode_slots": "max_slots",
        "window": "observation.window",
        "packed": "observation.packed",
        "placer": "placer",
    },
)
"""The environment's settings a command or the `finetune` section exposes (the simulator comes from the mode)."""
