"""Scheduler and placer names, as the CLI and the pipelines spell them."""

from __future__ import annotations

from collections.abc import Callable

from dl2.config import refuse
from dl2.core import Scheduler
from dl2.schedulers.asked import AskedSizes
from dl2.schedulers.binpack import BinPackPlacer
from dl2.schedulers.drf import DRF
from dl2.schedulers.fifo import FIFO
from dl2.schedulers.gavel import Gavel
from dl2.schedulers.isolate import IsolatePlacer, StrictIsolatePlacer
from dl2.schedulers.load_balance import LoadBalancePlacer
from dl2.schedulers.optimus import OptimusOracle
from dl2.schedulers.optimus_fitted import OptimusFitted
from dl2.schedulers.placement import Placer
from dl2.schedulers.speedup_hull import SpeedupHull
from dl2.schedulers.srpt_knee import DEFAULT_FILL_EFFICIENCY, FILL_KNEE_EFFICIENCY, LADDER_FILLS, SRPTKnee
from dl2.schedulers.srtf import SRTF, SRTFFraction
from dl2.schedulers.tetris import TetrisPlacer
from dl2.schedulers.tiresias import Tiresias
from dl2.workload.speed import SpeedModel

PLACERS: dict[str, Callable[[], Placer]] = {
    "load-balance": LoadBalancePlacer,
    "tetris": TetrisPlacer,
    "binpack": BinPackPlacer,
    "isolate": IsolatePlacer,
    "isolate-strict": StrictIsolatePlacer,
}

SchedulerFactory = Callable[[SpeedModel, bool, Placer], Scheduler]

SCHEDULERS: dict[str, SchedulerFactory] = {
    "drf": lambda speed, compat, placer: DRF(compat, placer),
    "fifo": lambda speed, compat, placer: FIFO(compat, placer),
    "srtf": lambda speed, compat, placer: SRTF(speed, compat, placer),
    "srtf-fraction": lambda speed, compat, placer: SRTFFraction(compat, placer),
    "optimus": lambda speed, compat, placer: OptimusOracle(speed, compat, placer),
    "optimus-fitted": lambda speed, compat, placer: OptimusFitted(compat, placer),
    "tiresias": lambda speed, compat, placer: Tiresias(placer),
    "asked-sizes": lambda speed, compat, placer: AskedSizes(placer),
    "srpt-knee": lambda speed, compat, placer: SRPTKnee(speed, compat, placer),
    "srpt-knee-fill": lambda speed, compat, placer: SRPTKnee(
        speed, compat, placer, FILL_KNEE_EFFICIENCY, (DEFAULT_FILL_EFFICIENCY,)
    ),
    "srpt-knee-ladder": lambda speed, compat, placer: SRPTKnee(
        speed, compat, placer, FILL_KNEE_EFFICIENCY, LADDER_FILLS
    ),
    "speedup-hull": lambda speed, compat, placer: SpeedupHull(speed, compat, placer),
    "speedup-hull-marginal": lambda speed, compat, placer: SpeedupHull(speed, compat, placer, order="marginal"),
    "gavel": lambda speed, compat, placer: Gavel(speed, placer),
}

COMPAT_SCHEDULERS = (
    "drf",
    "fifo",
    "srtf",
    "srtf-fraction",
    "optimus",
    "srpt-knee",
    "srpt-knee-fill",
    "srpt-knee-ladder",
    "speedup-hull",
    "speedup-hull-marginal",
)
"""Schedulers with a compatibility-mode version: the authors' four (their SRTF is `srtf-fraction`), and ours that
use their mechanism."""


def make_scheduler(name: str, speed: SpeedModel, compat: bool, placer: str | Placer = "load-balance") -> Scheduler:
    """A heuristic by name; `placer` is a placer's name or a placer (a learned one, say)."""
    if compat and name not in COMPAT_SCHEDULERS:
        raise KeyError(
            f"scheduler '{name}' has no compatibility-mode version; use one of {', '.join(COMPAT_SCHEDULERS)}"
        )
    try:
        factory = SCHEDULERS[name]
    except KeyError:
        raise KeyError(f"unknown scheduler '{name}'; known: {', '.join(SCHEDULERS)}") from None
    if not isinstance(placer, str):
        return factory(speed, compat, placer)
    try:
        placer_instance = PLACERS[placer]()
    except KeyError:
        raise KeyError(f"unknown placer '{placer}'; known: {', '.join(PLACERS)}") from None
    return factory(speed, compat, placer_instance)


def check_scheduler(key: str, name: str, mode: str, rollout: bool = False, extra: tuple[str, ...] = ()) -> None:
    """Refuse (ConfigError naming `key`) a name that is not a heuristic of `mode` (or `rollout:<one>` or
    `rollout:<one>+<another>...` where allowed; `extra` names other accepted values)."""
    known = COMPAT_SCHEDULERS if mode == "compat" else tuple(SCHEDULERS)
    bases = name.removeprefix("rollout:").split("+") if rollout and name.startswith("rollout:") else [name]
    if any(base not in known for base in bases) and name not in extra:
        allowed = ", ".join((*extra, *known)) + (", or rollout:<one of them>[+<another>...]" if rollout else "")
        raise refuse(key, name, f"{mode}-mode schedulers: {allowed}")


def check_placer(key: str, name: str) -> None:
    if name not in PLACERS:
        raise refuse(key, name, f"placers: {', '.join(sorted(PLACERS))}")
