"""Schedulers and placers by name or model folder: the one place the command line, the pipeline's stages, the
benchmarks and the controller turn what a user wrote (`drf`, `models/dl2-philly`, `models/harmony-placer-philly`)
into something that decides.

A name is a heuristic of `dl2.schedulers.registry`; anything that is a folder (or looks like a path) is a trained
model: a DL2 policy (`dl2.rl.learned.LearnedScheduler`) or a Harmony placer (`dl2.placement.policy`);
`lookahead:A+B` chooses among A and B at every slot by simulating ahead (`dl2.rl.lookahead`), and
`lookahead-fitted:A+B` does so in a world each job's own progress corrects (`dl2.rl.fitted_lookahead`). Each is
checked when resolved, so a typo or a broken model fails before any work, with `UnknownPolicy` (one line).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dl2.core import Dl2Error, Scheduler
from dl2.schedulers.placement import Placer
from dl2.schedulers.registry import COMPAT_SCHEDULERS, PLACERS, SCHEDULERS, make_scheduler
from dl2.sim.config import Mode
from dl2.sim.run import SchedulerBuilder
from dl2.workload.speed import SpeedModel


class UnknownPolicy(Dl2Error):
    """A scheduler or placer that is neither a known name nor a usable model folder."""


def scheduler_builder(
    name: str, placer: str | None, mode: Mode, greedy: bool = True, seed: int = 0
) -> SchedulerBuilder:
    """A builder for a heuristic by name or a trained policy by model folder, placing with `placer` (a name or a
    Harmony placer folder; None: the default). Checked now, so a typo fails before any work."""
    from dl2.workload.registry import looks_like_path

    if name.startswith("lookahead:"):
        return _lookahead_builder(name, placer, mode, greedy, seed)
    if name.startswith("lookahead-fitted:"):
        return _fitted_lookahead_builder(name, placer, mode)
    make_placer = placer_factory(placer)
    if name not in SCHEDULERS and (Path(name).exists() or looks_like_path(name)):
        from dl2.rl.learned import LearnedScheduler

        LearnedScheduler.from_dir(name)  # fail now on a missing or broken model, not after loading workloads
        from dl2.rl.lookahead import load_policy

        return lambda speed, compat: load_policy(
            name, greedy=greedy, seed=seed, compat=compat, placer=make_placer() if make_placer else None
        )
    if name not in SCHEDULERS:
        raise UnknownPolicy(f"unknown scheduler '{name}'; known: {', '.join(SCHEDULERS)}, or a model folder")
    if mode is Mode.COMPAT and name not in COMPAT_SCHEDULERS:
        raise UnknownPolicy(
            f"scheduler '{name}' has no compatibility-mode version; use one of {', '.join(COMPAT_SCHEDULERS)}"
        )
    return lambda speed, compat: make_scheduler(name, speed, compat, make_placer() if make_placer else "load-balance")


def _lookahead_builder(name: str, placer: str | None, mode: Mode, greedy: bool, seed: int) -> SchedulerBuilder:
    """`lookahead:A+B...` (`dl2.rl.lookahead`): candidates A, B, ... (each a heuristic or a model folder, placing
    with `placer`), looking ahead in the world of the speed model the builder is handed (the catalogue's, or a
    calibrated one) with the catalogue's interference."""
    from dl2.rl.lookahead import candidate_names, make_lookahead
    from dl2.sim.config import SimConfig
    from dl2.sim.run import World, interference_model

    if mode is not Mode.REALISTIC:
        raise UnknownPolicy(f"{name}: a lookahead plays realistic mode (it simulates the cluster's interference)")
    builders = {
        candidate: scheduler_builder(candidate, placer, mode, greedy, seed) for candidate in candidate_names(name)
    }
    if len(builders) < 2:
        raise UnknownPolicy(f"{name}: a lookahead chooses among two or more candidates, named lookahead:A+B")

    def build(speed: SpeedModel, compat: bool) -> Scheduler:
        world = World(speed, interference_model())
        return make_lookahead(name, lambda candidate: builders[candidate](speed, compat), world, SimConfig.realistic())

    return build


def _fitted_lookahead_builder(name: str, placer: str | None, mode: Mode) -> SchedulerBuilder:
    """`lookahead-fitted:A+B...` (`dl2.rl.fitted_lookahead`): heuristics A, B, ... (A the base) and DL2 policies
    (model folders) placing with `placer` (a name or a Harmony placer folder), looking ahead in the world of the
    speed model the builder is handed, corrected per job from each job's progress."""
    from dl2.rl.fitted_lookahead import FITTED_PREFIX, fitted_candidate_names, make_fitted_lookahead
    from dl2.rl.lookahead import load_policy
    from dl2.sim.config import SimConfig
    from dl2.sim.run import World, interference_model

    if mode is not Mode.REALISTIC:
        raise UnknownPolicy(f"{name}: a lookahead plays realistic mode (it simulates the cluster's interference)")
    names = fitted_candidate_names(name)
    if len(names) < 2 or names[0] not in SCHEDULERS:
        raise UnknownPolicy(
            f"{name}: a fitted lookahead chooses among two or more candidates, named {FITTED_PREFIX}A+B, the base A "
            f"a heuristic (known: {', '.join(SCHEDULERS)})"
        )
    for candidate in names[1:]:
        if candidate not in SCHEDULERS:
            scheduler_builder(candidate, placer, mode)  # checked now: an unknown name or a broken model folder fails
    make_placer = placer_factory(placer) or PLACERS["load-balance"]

    def build(speed: SpeedModel, compat: bool) -> Scheduler:
        world = World(speed, interference_model())
        return make_fitted_lookahead(
            name, world, SimConfig.realistic(), make_placer,
            build_policy=lambda folder, make: load_policy(folder, compat=compat, placer=make()),
        )  # fmt: skip

    return build


def trained_scheduler(folder: str | Path) -> Scheduler:
    """A DL2 policy's model folder, loaded for a real cluster (realistic mode, greedy): what the controller runs."""
    from dl2.rl.lookahead import load_policy

    return load_policy(folder, compat=False)


def placer_factory(name: str | None) -> Callable[[], Placer] | None:
    """Fresh placers of a name or a Harmony placer folder (loaded once); None for None."""
    if name is None:
        return None
    if name in PLACERS:
        return PLACERS[name]
    from dl2.placement.model_files import folder_kind

    kind = folder_kind(name)
    if kind == "placer":
        from dl2.placement.policy import HarmonyPlacer

        loaded = HarmonyPlacer.from_dir(name)
        return lambda: HarmonyPlacer(loaded.policy, loaded.config, name=loaded.name)
    if kind is not None:
        raise UnknownPolicy(f"{name} is a Harmony {kind} folder, not a placer")
    raise UnknownPolicy(f"unknown placer '{name}'; known: {', '.join(sorted(PLACERS))}, or a Harmony placer folder")
