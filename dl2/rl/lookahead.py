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
how their continuations are judged (a world each job's own progress corrects as the run goes, which the candidates
read per job: `dl2.rl.fitted_lookahead`). A model folder's `calibration.json` (written by the twin that calibrated
and judged it, `dl2.rl.in_twin`) is the world its lookahead runs in wherever it is loaded: the gate, the controller.
A decision costs one continuation per distinct proposal (none where they
all agree): tens to hundreds of milliseconds on a Philly-sized cluster, against a slot of twenty minutes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Literal

from dl2.core import Allocation, Attribution, ClusterView, InvalidAllocationError, Scheduler
from dl2.rl.model_io import PolicyConfig
from dl2.schedulers.placement import Placer
from dl2.schedulers.registry import make_scheduler
from dl2.sim.attribution import SlotAttribution
from dl2.sim.calibrated import world_of
from dl2.sim.config import Mode, SimConfig
from dl2.sim.run import World, interference_model, speed_model
from dl2.sim.simulator import Simulation, SimulationError, young_collections_only
from dl2.sim.what_if import remaining_jct_estimate_s, what_if
from dl2.workload.calibration_io import CALIBRATION_FILE, read_calibration

PREFIX = "lookahead:"
JOINER = "+"
MAX_SLOTS = 20_000
"""The longest continuation (slots) before a what-if run counts as never finishing."""
Beyond = Literal["estimate", "sparse"]
"""What a continuation does past its horizon: 'estimate' stops and adds what the jobs left would take
(`dl2.sim.what_if.remaining_jct_estimate_s`); 'sparse' plays on to the end with the base deciding ever less
often (with a growth of 2: 2, 4, 8, ... slots apart), every job keeping what it holds in between."""
SPARSE_GROWTH = 8
"""The growth of the gaps between the base's decisions past the horizon of a model folder's lookahead
(`PolicyConfig.lookahead_horizon_slots`): past it they come 8, 64, 512, ... slots apart. On the loop benchmark's
cells it changes the JCT by +0.0-0.2% against continuations decided every slot, and it keeps a decision at 1,400
active jobs under a second (docs/results.md, "What a decision costs at Philly scale, and who decides")."""


class LookaheadScheduler:
    """Applies, per slot, the candidate's allocation whose continuation by the base ends with the least total JCT."""

    def __init__(
        self,
        candidates: Sequence[Scheduler],
        continuation: Scheduler,
        world: World,
        config: SimConfig,
        horizon_slots: int = 0,
        beyond: Beyond = "estimate",
        growth: int = 2,
    ) -> None:
        """`candidates`: schedulers proposing each slot's allocation (the first is the base and wins ties);
        `continuation`: a separate instance of the base that decides the what-if runs' later slots (a scheduler
        with state would otherwise learn from runs that never happen); `config`: the cluster's (realistic) mode,
        rescale costs and interference switch; `horizon_slots`: slots a continuation plays with the base deciding
        every one; 0 plays every continuation so to its end; `beyond`: what follows the horizon (`Beyond`);
        `growth`: past the horizon of a sparse continuation, each gap between the base's decisions is this many
        times the one before."""
        if not candidates:
            raise ValueError("a lookahead needs at least one candidate scheduler")
        if horizon_slots < 0:
            raise ValueError(f"a lookahead's horizon is 0 (to the end) or a number of slots, got {horizon_slots}")
        if growth < 2:
            raise ValueError(f"a sparse continuation's gaps grow by a factor of 2 or more, got {growth}")
        self.candidates = list(candidates)
        self.continuation = continuation
        self.world = world
        self.config = config
        self.horizon_slots = horizon_slots
        self.beyond = beyond
        self.growth = growth
        self.name = PREFIX + JOINER.join(candidate.name for candidate in self.candidates)
        self.labels = _unique([candidate.name for candidate in self.candidates])
        """Each candidate's name in attributions (a repeated name gets its position appended)."""
        self.continuations = 0
        """What-if runs simulated so far."""
        self.chosen: dict[int, int] = {}
        """How often each candidate (by index, the first of those proposing it) was applied where they disagreed."""
        self.tally = SlotAttribution()
        """Its slots by which candidates' proposal was applied (what its decision records add up to)."""
        self.attribution: Attribution | None = None
        """What decided the last slot (`dl2.core.decision_attribution`)."""

    def reset(self) -> None:
        for candidate in self.candidates:
            candidate.reset()
        self.continuation.reset()
        self.continuations = 0
        self.chosen = {}
        self.tally = SlotAttribution()
        self.attribution = None

    def schedule(self, view: ClusterView) -> Allocation:
        proposals: dict[AllocationKey, tuple[int, Allocation]] = {}
        proposers: dict[AllocationKey, list[str]] = {}
        for index, candidate in enumerate(self.candidates):
            allocation = candidate.schedule(view)
            key = _key(allocation)
            proposals.setdefault(key, (index, allocation))
            proposers.setdefault(key, []).append(self.labels[index])
        if len(proposals) == 1 or not view.jobs:
            first = next(iter(proposals))
            self.attribution = Attribution(tuple(proposers[first]))
            self.tally.count(self.attribution.decided_by, False)
            return proposals[first][1]
        # the what-if runs allocate and free millions of objects; with the collector on, a process holding a large
        # heap (the controller's informer caches) pays full collections for them (`young_collections_only`)
        with young_collections_only():
            # every continuation starts from the same what-if run: built once, each plays a copy of it
            start = self._what_if(view)
            start.cache_throughputs()
            totals = {key: self.total_jct_after(view, allocation, start) for key, (_, allocation) in proposals.items()}
        best_key = next(iter(proposals))
        for key in proposals:
            if totals[key] < totals[best_key] - 1e-6:
                best_key = key
        best_index, best_allocation = proposals[best_key]
        self.chosen[best_index] = self.chosen.get(best_index, 0) + 1
        predicted = {label: totals[key] for key, labels in proposers.items() for label in labels}
        self.attribution = Attribution(tuple(proposers[best_key]), predicted)
        self.tally.count(self.attribution.decided_by, True)
        return best_allocation

    def total_jct_after(self, view: ClusterView, allocation: Allocation, start: Simulation | None = None) -> float:
        """Sum over `view`'s jobs of their completion times (s) if this slot runs `allocation` and the base decides
        every later one, in the model world (past the horizon, estimated); infinite where the run cannot finish or
        the allocation is refused. `start`: the what-if run of `view` (`_what_if`), left unchanged (a fork of it
        plays), where several allocations are judged from one view."""
        self.continuations += 1
        run = start.fork() if start is not None else self._what_if(view)
        horizon, sparse = self.horizon_slots, self.beyond == "sparse"
        try:
            run.apply(allocation)
            played, stride, decide_at = 1, 1, 1
            while not run.done and (horizon == 0 or sparse or played < horizon):
                if played >= decide_at:
                    run.apply(self.continuation.schedule(run.begin_slot()))
                    if horizon and played >= horizon:
                        stride *= self.growth  # past the horizon the base decides ever less often
                    decide_at = played + stride
                    played += 1
                    continue
                # every job keeps what it holds: in one step up to the next decision or the next job to finish
                held = run.advance_held(decide_at - played)
                if held == 0:
                    run.hold_slot()
                played += max(held, 1)
        except (SimulationError, InvalidAllocationError):
            return math.inf
        return run.total_jct_s() + (0.0 if run.done else remaining_jct_estimate_s(run))

    def _what_if(self, view: ClusterView) -> Simulation:
        """The run a continuation from `view` plays (`dl2.sim.what_if`), in the model world."""
        config = replace(self.config, max_slots=view.slot + MAX_SLOTS)
        return what_if(view, config, self.world.speed, self.world.interference)

    @property
    def contested(self) -> int:
        """Slots where the candidates disagreed."""
        return self.tally.contested

    @property
    def decided(self) -> dict[str, int]:
        """Per candidate label, the contested slots whose applied allocation it proposed (alone or with others)."""
        return self.tally.decided

    @property
    def alone(self) -> dict[str, int]:
        """Per candidate label, the contested slots whose applied allocation only it proposed."""
        return self.tally.alone

    def decided_shares(self) -> dict[str, float]:
        """Per candidate label, the share of contested slots whose applied allocation it proposed."""
        return {label: self.tally.share(label) for label in self.labels}


AllocationKey = tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...]


def _unique(names: list[str]) -> list[str]:
    return [name if names.count(name) == 1 else f"{name}#{index}" for index, name in enumerate(names)]


def _key(allocation: Allocation) -> AllocationKey:
    return tuple(sorted((job_id, tuple(a.worker_nodes), tuple(a.ps_nodes)) for job_id, a in allocation.jobs.items()))


def is_lookahead(name: str) -> bool:
    return name.startswith(PREFIX)


def candidate_names(name: str) -> list[str]:
    """`lookahead:A+B` -> ["A", "B"] (A the base)."""
    return name.removeprefix(PREFIX).split(JOINER)


def make_lookahead(
    name: str,
    build: Callable[[str], Scheduler],
    world: World,
    config: SimConfig,
    horizon_slots: int = 0,
    beyond: Beyond = "estimate",
    growth: int = 2,
) -> LookaheadScheduler:
    """The lookahead `name` names, its candidates and a continuation made by `build` (a heuristic's name or a
    model folder -> a fresh scheduler reading `world`'s speeds), its continuations deciding every slot for
    `horizon_slots` (0: to the end) and `beyond` that (`LookaheadScheduler`)."""
    names = candidate_names(name)
    if not all(names):
        raise ValueError(f"{name}: candidates are named as lookahead:A+B (A the base)")
    candidates = [build(candidate) for candidate in names]
    return LookaheadScheduler(candidates, build(names[0]), world, config, horizon_slots, beyond, growth)


def as_configured(policy: Scheduler, config: PolicyConfig, world: World | None = None) -> Scheduler:
    """`policy` as its model folder says it runs: alone, or as the last candidate of the lookahead its config names
    (`PolicyConfig.lookahead`: those heuristics first, placing with the policy's placer and reading `world`'s
    speeds, the first deciding the what-if runs' later slots, every one within
    `PolicyConfig.lookahead_horizon_slots` and sparsely past it, in `world`: the catalogue's by default, the one
    the folder's calibration gives where it has one (`load_policy`); with `PolicyConfig.lookahead_fit`, that world
    corrected per job as the jobs progress, `dl2.rl.fitted_lookahead`)."""
    if not config.lookahead:
        return policy
    world = world or World(speed_model(Mode.REALISTIC), interference_model())
    speed = world.speed
    horizon = config.lookahead_horizon_slots
    if config.lookahead_fit:
        from dl2.rl.fitted_lookahead import FITTED_PREFIX, make_fitted_lookahead

        # The policy goes last under a name no heuristic has (the config's are all heuristics: `PolicyConfig`
        # checks), so `make_fitted_lookahead` takes it from `build_policy`.
        name = FITTED_PREFIX + JOINER.join([*config.lookahead, "policy"])
        return make_fitted_lookahead(
            name, world, SimConfig.realistic(), config.placer, horizon, "sparse", SPARSE_GROWTH,
            build_policy=lambda _, __: policy,
        )  # fmt: skip
    heuristics = [make_scheduler(name, speed, False, config.placer) for name in config.lookahead]
    continuation = make_scheduler(config.lookahead[0], speed, False, config.placer)
    return LookaheadScheduler(
        [*heuristics, policy], continuation, world, SimConfig.realistic(), horizon, "sparse", SPARSE_GROWTH
    )


def load_policy(
    directory: str | Path, greedy: bool = True, seed: int = 0, compat: bool | None = None, placer: Placer | None = None
) -> Scheduler:
    """A model folder's policy as it runs (`LearnedScheduler.from_dir`, inside its lookahead where it names one):
    what the controller, the gate and every evaluation of a deployed policy run."""
    from dl2.rl.learned import LearnedScheduler

    policy = LearnedScheduler.from_dir(directory, greedy, seed, compat, placer)
    return as_configured(policy, policy.config, calibrated_world_of(Path(directory)))


def calibrated_world_of(directory: Path) -> World | None:
    """The world a model folder's `calibration.json` gives its lookahead (the catalogue's speeds and interference
    with the cluster's calibration on them, `dl2.sim.calibrated.world_of`); None where it has none."""
    path = directory / CALIBRATION_FILE
    if not path.is_file():
        return None
    return world_of(read_calibration(path))
