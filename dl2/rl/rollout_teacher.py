"""A rollout teacher: one step of policy iteration by simulation, over variants of a heuristic or several.

Imitation cannot beat its teacher, so this teacher is better than any one heuristic: at every slot it tries
variants of the base heuristic, finishes a copy of the run (`Simulation.fork`) from each variant's allocation with
the base heuristic, and acts as the variant whose copy ends with the lowest total JCT.
`rollout:srpt-knee-fill` tries other knee and fill levels of `srpt-knee-fill` (`dl2.schedulers.srpt_knee`);
`rollout:A+B+...` tries the named heuristics, A being the base (`rollout:optimus+speedup-hull`: which of the two
is better changes from week to week and from state to state, `benchmarks/teacher_by_week.py`). This is the
rollout algorithm (Bertsekas, Tsitsiklis & Wu 1997; Tesauro & Galperin 1996): the base is one of the variants and
wins ties, so on the workload it runs the teacher is never worse than its base while at most J jobs are active
(beyond J, windows of J order a slot differently).

The teacher is privileged, as Optimus's speed oracle is: continuations see the workload's future arrivals and
exact epochs. A student (`dl2 train-sl --teacher rollout:srpt-knee-fill`, or the `online` stage's
challenger, `dl2.rl.in_twin`) sees only its observation, so what it
can learn is which variant suits which state, not the future.

Variants give their slot through the same `SlotDecision` the policy drives (a refused request is skipped, as when
a teacher's decisions are replayed), so every choice is an allocation the student can reproduce. Continuations run
the base heuristic's own, faster mechanism; in compatibility mode that mechanism stops at the first refused
request, so its slot (`UntilRefused`) is a variant too and the base's own run is always among the choices.
What the teacher and its students measure: `docs/results.md`.
"""

from __future__ import annotations

from collections.abc import Sequence

from dl2.core import Allocation, ClusterView, InputError
from dl2.env.decision import SlotDecision
from dl2.rl.demonstrations import replay_stream
from dl2.schedulers.base import HeuristicScheduler
from dl2.schedulers.placement import Placer
from dl2.schedulers.registry import make_scheduler
from dl2.schedulers.requests import Counts, RequestStream
from dl2.schedulers.srpt_knee import DEFAULT_FILL_EFFICIENCY, FILL_KNEE_EFFICIENCY, SRPTKnee
from dl2.sim.config import Mode
from dl2.sim.simulator import Simulation
from dl2.workload.speed import SpeedModel

PREFIX = "rollout:"
KNEES = (0.4, 0.5, 0.6, 0.7, 0.8)
"""Knee levels the variants try (the base's is 0.6)."""
FILLS: tuple[float | None, ...] = (None, 0.8, 0.9, 1.0)
"""Fill levels the variants try (None: no second pass; the base's is 0.9)."""
SUPPORTED_BASES = ("srpt-knee-fill",)
"""Heuristics whose own variants a `rollout:<one>` teacher tries."""
JOINER = "+"
"""Separates the heuristics of a `rollout:A+B` teacher."""


class UntilRefused(HeuristicScheduler):
    """`inner`'s requests up to its first refused one: the slot `inner` gives with the authors' mechanism (which
    stops there), as requests a `SlotDecision` can replay."""

    def __init__(self, inner: HeuristicScheduler) -> None:
        self.inner = inner
        super().__init__(inner.compat, inner.placer)
        self.name = f"{inner.name} (until refused)"

    def reset(self) -> None:
        super().reset()
        self.inner.reset()

    def requests(self, view: ClusterView, counts: Counts) -> RequestStream:
        stream = self.inner.requests(view, counts)
        try:
            request = next(stream)
            while (yield request):
                request = stream.send(True)
        except StopIteration:
            return
        finally:
            stream.close()


class RolloutTeacher:
    """Chooses, per slot, the variant of the base heuristic whose simulated continuation ends best."""

    def __init__(
        self,
        base: HeuristicScheduler,
        variants: Sequence[HeuristicScheduler],
        window: int,
        placer: Placer | None = None,
        name: str = "",
    ) -> None:
        """`variants`: heuristics tried at each slot (the base is tried first and wins ties)."""
        self.base = base
        self.variants = [base, *(v for v in variants if v is not base)]
        self.window = window
        self.placer = placer
        self.name = name or f"{PREFIX}{base.name}"
        self.rollouts = 0
        """Continuations simulated so far (each from one slot to the end of the run)."""
        self.chosen: dict[int, int] = {}
        """How often each variant (by index in `variants`) was chosen where the variants disagreed."""

    def reset(self) -> None:
        for variant in self.variants:
            variant.reset()

    def heuristic_for(self, simulation: Simulation, view: ClusterView) -> HeuristicScheduler:
        """The variant to act as in this slot, `view` being `simulation`'s current one."""
        distinct: dict[tuple[tuple[str, int, int], ...], tuple[int, Allocation]] = {}
        for index, variant in enumerate(self.variants):
            decision = SlotDecision(view, self.window, simulation.config.mode is Mode.COMPAT, self.placer)
            for action in replay_stream(decision, variant):
                decision.step(action)
            allocation = decision.allocation()
            key = tuple(sorted((job_id, a.num_workers, a.num_ps) for job_id, a in allocation.jobs.items()))
            distinct.setdefault(key, (index, allocation))
        if len(distinct) == 1:
            return self.base
        best_index, best_total = 0, float("inf")
        for index, allocation in distinct.values():
            total = self._total_jct_after(simulation, allocation)
            if total < best_total - 1e-6:
                best_index, best_total = index, total
        self.chosen[best_index] = self.chosen.get(best_index, 0) + 1
        return self.variants[best_index]

    def _total_jct_after(self, simulation: Simulation, allocation: Allocation) -> float:
        """Sum of JCTs (s) if this slot runs `allocation` and the base heuristic decides every later slot."""
        self.rollouts += 1
        twin = simulation.fork()
        twin.apply(allocation)
        base = self.base
        while not twin.done:
            twin.apply(base.schedule(twin.begin_slot()))
        return twin.total_jct_s()


def is_rollout_teacher(name: str) -> bool:
    return name.startswith(PREFIX)


def rollout_name(base: str, others: Sequence[str]) -> str:
    """The rollout teacher over `base` and `others` (`base` is the continuation and wins ties)."""
    return PREFIX + JOINER.join(dict.fromkeys((base, *others)))


def make_rollout_teacher(
    name: str, speed: SpeedModel, compat: bool, window: int, placer: Placer | None = None
) -> RolloutTeacher:
    """`rollout:srpt-knee-fill`: the base heuristic with its knee in `KNEES` and its fill in `FILLS`;
    `rollout:A+B+...`: the named heuristics (`dl2.schedulers.registry`), A the base."""
    names = name.removeprefix(PREFIX).split(JOINER)
    if len(names) > 1:
        return _over_heuristics(names, speed, compat, window, placer)
    if names[0] not in SUPPORTED_BASES:
        raise InputError(
            name, f"rollout teachers improve one of: {', '.join(SUPPORTED_BASES)}, or choose among heuristics "
            f"named as rollout:A{JOINER}B"
        )  # fmt: skip
    base = SRPTKnee(speed, compat, placer, FILL_KNEE_EFFICIENCY, (DEFAULT_FILL_EFFICIENCY,))
    # in compatibility mode the continuations' own slot differs from the replayed one (see the module's doc)
    variants: list[HeuristicScheduler] = [UntilRefused(base)] if compat else []
    variants += [
        SRPTKnee(speed, compat, placer, knee, () if fill is None else (fill,))
        for knee in KNEES
        for fill in FILLS
        if (knee, fill) != (FILL_KNEE_EFFICIENCY, DEFAULT_FILL_EFFICIENCY)
    ]
    return RolloutTeacher(base, variants, window, placer)


def _over_heuristics(
    names: list[str], speed: SpeedModel, compat: bool, window: int, placer: Placer | None
) -> RolloutTeacher:
    schedulers = []
    for heuristic in names:
        try:
            scheduler = make_scheduler(heuristic, speed, compat, placer if placer is not None else "load-balance")
        except KeyError as error:
            raise InputError(PREFIX + JOINER.join(names), str(error.args[0])) from None
        if not isinstance(scheduler, HeuristicScheduler):
            raise InputError(heuristic, "a rollout teacher replays heuristics that ask for tasks one by one")
        schedulers.append(scheduler)
    base, *others = schedulers
    variants: list[HeuristicScheduler] = [UntilRefused(base)] if compat else []
    return RolloutTeacher(base, [*variants, *others], window, placer, PREFIX + JOINER.join(names))
