"""Simulator configuration: the fidelity mode and every realism knob, each seeded, documented and checked
(`dl2.config`). Compatibility mode fixes the authors' semantics: a compat configuration with a realism knob on is
refused, not silently run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field, replace
from enum import StrEnum
from typing import Annotated, Any

import numpy as np
from annotated_types import Ge, Gt, Le, Lt

from dl2.config import Keys, config, refuse


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


@config
class RescaleCost:
    """What a job pays, in lost training time, each time its workers/PS change.

    The defaults are DL2's MXNet figures. A real elastic PyTorch job under torchrun always restarts its workers
    (no hot rescale): on small CPU models on local disk a resize pauses it 8.5-13 s up and 17-18 s down as agent
    processes, the checkpoint itself a fraction of a second (`benchmarks/resize_pause.py`, docs/reporting.md), and
    40-45 s up and 29-30 s down as pods the training operator makes and removes on a real node (k8s/README.md, "Real
    training on real nodes"): closer to `checkpoint` with a short restore than to `hot`."""

    kind: RescaleKind = RescaleKind.HOT
    """How jobs are resized."""
    hot_pause_s: Annotated[float, Ge(0), Lt(86_400)] = 0.05
    """Pause of a hot rescale (DL2 §6.3 reports tens of ms)."""
    stop_s: Annotated[float, Ge(0), Lt(86_400)] = 60.0
    """Checkpoint-and-stop time of a running job (DL2 §5: about 1 min)."""
    restore_min_s: Annotated[float, Ge(0), Lt(86_400)] = 30.0
    """Shortest restore time after a checkpoint-restart."""
    restore_max_s: Annotated[float, Ge(0), Lt(86_400)] = 300.0
    """Longest restore time (DL2 §5: up to 5 min); drawn uniformly per restart."""

    def __post_init__(self) -> None:
        if self.restore_max_s < self.restore_min_s:
            raise refuse("rescale.restore_max_s", self.restore_max_s, f"at least restore_min_s, {self.restore_min_s}")

    def pause_s(self, rng: np.random.Generator, was_running: bool) -> float:
        if self.kind is RescaleKind.NONE:
            return 0.0
        if self.kind is RescaleKind.HOT:
            return self.hot_pause_s
        restore = float(rng.uniform(self.restore_min_s, self.restore_max_s))
        return restore + (self.stop_s if was_running else 0.0)


@config
class SimConfig:
    """One simulation run's settings. Presets: `compat` (the authors' semantics) and `realistic` (the default
    of every command)."""

    mode: Mode = Mode.REALISTIC
    """Fidelity mode."""
    slot_s: Annotated[float, Gt(0), Lt(31_536_000)] | None = None
    """Scheduling interval in seconds; none: the workload's own (1200 s for the authors' workloads)."""
    rescale: RescaleCost = field(default_factory=RescaleCost)
    """Cost of changing a job's allocation."""
    speed_noise: Annotated[float, Ge(0), Lt(1)] = 0.0
    """Per-slot training-speed noise e: speed x (1 + e U(-1, 1)) (the authors' TRAIN_SPEED_ERROR)."""
    epoch_error: Annotated[float, Ge(0), Lt(1)] = 0.0
    """Error e of users' declared epochs: true = declared x (1 + e U(-1, 1)) (DL2 §6.4 sweeps up to 0.2)."""
    interference: bool = True
    """Slow co-located tasks of different jobs down (Harmony's measurements)."""
    seed: Annotated[int, Ge(0), Lt(2**63)] = 0
    """Seed of the run's one random generator (noise, estimate errors, restore times)."""
    max_slots: Annotated[int, Ge(1), Le(100_000_000)] = 200_000
    """Safety stop: a run that has not finished after this many slots is an error."""
    stall_slots: Annotated[int, Ge(1), Le(100_000_000)] = 2_000
    """A run in which no job progresses for this many consecutive slots while jobs wait is an error (a scheduler
    that starves everyone would otherwise spin until `max_slots`)."""

    def __post_init__(self) -> None:
        if self.mode is not Mode.COMPAT:
            return
        realism = {
            "rescale.kind": (self.rescale.kind, RescaleKind.NONE),
            "speed_noise": (self.speed_noise, 0.0),
            "epoch_error": (self.epoch_error, 0.0),
            "interference": (self.interference, False),
        }
        for key, (value, authors) in realism.items():
            if value != authors:
                shown = getattr(authors, "value", authors)
                raise refuse(
                    key, getattr(value, "value", value), f"a realistic-mode setting; compat mode fixes it to {shown}"
                )

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


SIM_KEYS = Keys(
    SimConfig,
    {
        "mode": "mode",
        "slot_s": "slot_s",
        "rescale": "rescale.kind",
        "speed_noise": "speed_noise",
        "epoch_error": "epoch_error",
        "interference": "interference",
        "stall_slots": "stall_slots",
    },
)
"""The simulator settings a command or a pipeline stage exposes (over the mode's preset)."""


def sim_config(values: Mapping[str, object], seed: int = 0, where: str = "", spelling: Any = None) -> SimConfig:
    """The mode's preset (`values["mode"]`, default realistic) with `values` (flat, `SIM_KEYS`) over it."""
    mode = Mode(str(values.get("mode", Mode.REALISTIC.value)))
    kwargs = {} if spelling is None else {"spelling": spelling}
    result: SimConfig = SIM_KEYS.build(dict(values), where, base=SimConfig.for_mode(mode, seed), **kwargs)
    return result
