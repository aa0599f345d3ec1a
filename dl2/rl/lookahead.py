"""Lookahead: at every slot, the candidate allocation whose simulated continuation ends soonest.

Imitating a heuristic cannot beat it, and which of Optimus and `speedup-hull` is better changes from week to week
and from state to state (`benchmarks/teacher_by_week.py`). A `LookaheadScheduler` decides at decision time instead:
each candidate scheduler proposes this slot's allocation; for each distinct one, a what-if run of the active jobs
(`dl2.sim.what_if`: no future arrivals, declared epochs, in a model world: the catalogue's, or the twin a
cluster's records calibrate) applies it and lets the base scheduler (the first candidate) decide every later slot
until those jobs finish; the allocation whose run has the smallest total JCT is applied (the base's wins ties).
This is the rollout algorithm (Bertsekas, Tsitsiklis & Wu 1997) run online, as a rollout teacher
(`dl2.rl.rollout_teacher`) is offline, with only what a deployment knows: what it is worth, and what the world it
looks ahead in changes, `benchmarks/lookahead.py`.

The candidates read speeds from the same model world, so a calibrated world changes both what they propose and
how their continuations are judged. A decision costs one continuation per distinct proposal (none where they all
agree): tens to hundreds of milliseconds on a Philly-sized cluster, against a slot of twenty minutes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from dl2.core import Allocation, ClusterView, InvalidAllocationError, Scheduler
from dl2.rl.model_io import PolicyConfig
from dl2.schedulers.placement import Placer
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import Mode, SimConfig
from dl2.sim.run import World, interference_model, speed_model
from dl2.sim.simulator import SimulationError
from dl2.sim.what_if import what_if
from dl2.workload.speed import SpeedModel

PREFIX = "lookahead:"
JOINER = "+"
MAX_SLOTS = 20_000
"""The longest continuation (slots) before a what-if run counts as never finishing."""


class LookaheadScheduler:
    """Applies, per slot, the candidate's allocation whose continuation by the base ends with the least total JCT."""

    def __init__(
        self, candidates: Sequence[Scheduler], continuation: Scheduler, world: World, config: SimConfig
    ) -> None:
        """`candidates`: schedulers proposing each slot's allocation (the first is the base and wins ties);
        `continuation`: a separate instance of the base that decides the what-if runs' later slots (a scheduler
        with state would otherwise learn from runs that never happen); `config`: the cluster's (realistic) mode,
        rescale costs and interference switch."""
        if not candidates:
            raise ValueError("a lookahead needs at least one candidate scheduler")
        self.candidates = list(candidates)
        self.continuation = continuation
        self.world = world
        self.config = config
        self.name = PREFIX + JOINER.join(candidate.name for candidate in self.candidates)
        self.continuations = 0
        """What-if runs simulated so far."""
        self.chosen: dict[int, int] = {}
        """How often each candidate (by index) was applied where the candidates disagreed."""

    def reset(self) -> None:
        for candidate in self.candidates:
            candidate.reset()
        self.continuation.reset()
        self.continuations = 0
        self.chosen = {}

    def schedule(self, view: ClusterView) -> Allocation:
        proposals: dict[tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...], tuple[int, Allocation]] = {}
        for index, candidate in enumerate(self.candidates):
            allocation = candidate.schedule(view)
            proposals.setdefault(_key(allocation), (index, allocation))
        if len(proposals) == 1 or not view.jobs:
            return proposals[next(iter(proposals))][1]
        best_index, best_allocation, best_total = 0, proposals[next(iter(proposals))][1], math.inf
        for index, allocation in proposals.values():
            total = self.total_jct_after(view, allocation)
            if total < best_total - 1e-6:
                best_index, best_allocation, best_total = index, allocation, total
        self.chosen[best_index] = self.chosen.get(best_index, 0) + 1
        return best_allocation

    def total_jct_after(self, view: ClusterView, allocation: Allocation) -> float:
        """Sum over `view`'s jobs of their completion times (s) if this slot runs `allocation` and the base decides
        every later one, in the model world; infinite where the run cannot finish or the allocation is refused."""
        self.continuations += 1
        config = replace(self.config, max_slots=view.slot + MAX_SLOTS)
        run = what_if(view, config, self.world.speed, self.world.interference)
        try:
            run.apply(allocation)
            while not run.done:
                run.apply(self.continuation.schedule(run.begin_slot()))
        except (SimulationError, InvalidAllocationError):
            return math.inf
        return run.total_jct_s()


def _key(allocation: Allocation) -> tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...]:
    return tuple(sorted((job_id, tuple(a.worker_nodes), tuple(a.ps_nodes)) for job_id, a in allocation.jobs.items()))


def is_lookahead(name: str) -> bool:
    return name.startswith(PREFIX)


def candidate_names(name: str) -> list[str]:
    """`lookahead:A+B` -> ["A", "B"] (A the base)."""
    return name.removeprefix(PREFIX).split(JOINER)


def make_lookahead(name: str, build: Callable[[str], Scheduler], world: World, config: SimConfig) -> LookaheadScheduler:
    """The lookahead `name` names, its candidates and a continuation made by `build` (a heuristic's name or a
    model folder -> a fresh scheduler reading `world`'s speeds)."""
    names = candidate_names(name)
    if not all(names):
        raise ValueError(f"{name}: candidates are named as lookahead:A+B (A the base)")
    return LookaheadScheduler([build(candidate) for candidate in names], build(names[0]), world, config)


def as_configured(policy: Scheduler, config: PolicyConfig, speed: SpeedModel | None = None) -> Scheduler:
    """`policy` as its model folder says it runs: alone, or as the last candidate of the lookahead its config names
    (`PolicyConfig.lookahead`: those heuristics first, placing with the policy's placer, the first deciding the
    what-if runs' later slots, in the world of `speed`, the catalogue's by default, and the catalogue's
    interference)."""
    if not config.lookahead:
        return policy
    speed = speed or speed_model(Mode.REALISTIC)
    heuristics = [make_scheduler(name, speed, False, config.placer) for name in config.lookahead]
    continuation = make_scheduler(config.lookahead[0], speed, False, config.placer)
    world = World(speed, interference_model())
    return LookaheadScheduler([*heuristics, policy], continuation, world, SimConfig.realistic())


def load_policy(
    directory: str | Path, greedy: bool = True, seed: int = 0, compat: bool | None = None, placer: Placer | None = None
) -> Scheduler:
    """A model folder's policy as it runs (`LearnedScheduler.from_dir`, inside its lookahead where it names one):
    what the controller, the gate and every evaluation of a deployed policy run."""
    from dl2.rl.learned import LearnedScheduler

    policy = LearnedScheduler.from_dir(directory, greedy, seed, compat, placer)
    return as_configured(policy, policy.config)
