"""Simulator configuration: the fidelity mode and every realism knob, each seeded and documented."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum

import numpy as np


class Mode(StrEnum):
    COMPAT = "compat"
    """The DL2 authors' simulator semantics, quirks included (shared/reference/dl2-official/README.md)."""
    REALISTIC = "realistic"
    """Placement-aware speed, interference, noise, estimate errors and rescaling costs (the default)."""


class RescaleKind(StrEnum):
    NONE = "none"
    """Changes are free (the authors' simulator)."""
    HOT = "hot"
    """DL2's in-place scaling: a pause of tens of milliseconds (DL2 §6.3)."""
    CHECKPOINT = "checkpoint"
    """Checkpoint and restart: about a minute to stop, up to five minutes to restore (DL2 §5)."""


@dataclass(frozen=True, slots=True)
class RescaleCost:
    """What a job pays, in lost training time, each time its workers/PS change."""

    kind: RescaleKind = RescaleKind.HOT
    """How jobs are resized."""
    hot_pause_s: float = 0.05
    """Pause of a hot rescale (DL2 §6.3 reports tens of ms)."""
    stop_s: float = 60.0
    """Checkpoint-and-stop time of a running job (DL2 §5: about 1 min)."""
    restore_min_s: float = 30.0
    """Shortest restore time after a checkpoint-restart."""
    restore_max_s: float = 300.0
    """Longest restore time (DL2 §5: up to 5 min); drawn uniformly per restart."""

    def pause_s(self, rng: np.random.Generator, was_running: bool) -> float:
        if self.kind is RescaleKind.NONE:
            return 0.0
        if self.kind is RescaleKind.HOT:
            return self.hot_pause_s
        restore = float(rng.uniform(self.restore_min_s, self.restore_max_s))
        return restore + (self.stop_s if was_running else 0.0)


@dataclass(frozen=True, slots=True)
class SimConfig:
    """One simulation run's settings."""

    mode: Mode = Mode.REALISTIC
    """Fidelity mode."""
    slot_s: float | None = None
    """Scheduling interval; None uses the workload's own (1200 s for the authors' workloads)."""
    rescale: RescaleCost = field(default_factory=RescaleCost)
    """Cost of changing a job's allocation."""
    speed_noise: float = 0.0
    """Per-slot training-speed noise: speed x (1 + e U(-1, 1)) (the authors' TRAIN_SPEED_ERROR)."""
    epoch_error: float = 0.0
    """Error of users' declared epochs: true = declared x (1 + e U(-1, 1)) (DL2 §6.4 sweeps up to 0.2)."""
    interference: bool = True
    """Slow co-located tasks of different jobs down (Harmony's measurements)."""
    seed: int = 0
    """Seed of the run's one random generator (noise, estimate errors, restore times)."""
    max_slots: int = 200_000
    """Safety stop: a run that has not finished after this many slots is an error."""
    stall_slots: int = 2_000
    """A run in which no job progresses for this many consecutive slots while jobs wait is an error (a scheduler
    that starves everyone would otherwise spin until `max_slots`)."""

    @classmethod
    def compat(cls, seed: int = 0) -> SimConfig:
        """The authors' semantics: no costs, noise, estimate errors or interference."""
        return cls(
            mode=Mode.COMPAT,
            rescale=RescaleCost(kind=RescaleKind.NONE),
            speed_noise=0.0,
            epoch_error=0.0,
            interference=False,
            seed=seed,
        )

    @classmethod
    def realistic(cls, seed: int = 0, **overrides: object) -> SimConfig:
        """Realistic mode defaults: hot rescaling, 5% speed noise, interference on, exact epoch estimates."""
        return replace(cls(seed=seed, speed_noise=0.05), **overrides)  # type: ignore[arg-type]

    @classmethod
    def for_mode(cls, mode: Mode | str, seed: int = 0) -> SimConfig:
        return cls.compat(seed) if Mode(mode) is Mode.COMPAT else cls.realistic(seed)
