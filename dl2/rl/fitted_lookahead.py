"""Lookahead in a world each job's own progress corrects: learning inside the decision.

`dl2.rl.lookahead` looks ahead in a model world fixed for the run (the catalogue's, or the one a cluster's
records calibrate), knowing jobs by their type. A `FittedLookahead` looks ahead in a `JobFittedSpeedModel` over
that world (`dl2.workload.job_fit`): at every slot it first learns from what each job's progress showed (its
observed throughput at the allocation it held), then its candidates propose and its continuations run in the
corrected world. For the correction to change what is proposed, and not only how proposals are judged, the
candidates read speeds per job: `JobAwareOptimus` and `JobAwareSpeedupHull` ask the model about a job it knows
otherwise than its type (`JobSpeedModel.job_key`) by the job, and every other job by its type as before (the same
numbers, the same caches). Any other heuristic named as a candidate reads types only, and a DL2 policy (a model
folder) decides from its observation of the cluster as everywhere else: the full system is
`lookahead-fitted:optimus+speedup-hull+models/dl2-philly`. Its what-if runs also resize at the cost the
cluster's resizes showed (`dl2.sim.rescale_fit`): a cluster that resizes by checkpoint and restart is not searched
as if resizing were free. And it learns which servers run slow (`dl2.workload.node_fit`) from the same observed
ratios: every placer of its heuristics and its continuation (and of a policy that takes the placer it is handed)
spares them (`dl2.schedulers.slow_nodes`).

Its ablations: the same lookahead in the world it wraps (`benchmarks/per_job_fit.py`), and each learned part
removed from the full system (`benchmarks/learned_parts.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import replace
from typing import Any

from dl2.core import Allocation, ClusterView, JobSpec, Scheduler
from dl2.rl.lookahead import PREFIX, Beyond, LookaheadScheduler, candidate_names
from dl2.schedulers.optimus import OptimusOracle
from dl2.schedulers.placement import Placer
from dl2.schedulers.registry import PLACERS, SCHEDULERS, make_scheduler
from dl2.schedulers.slow_nodes import SparingSlowNodes
from dl2.schedulers.speedup_hull import HullPoint, SpeedupHull, hull_of
from dl2.sim.config import SimConfig
from dl2.sim.rescale_fit import RescaleFit
from dl2.sim.run import World
from dl2.workload.interference import InterferenceModel
from dl2.workload.job_fit import JobFittedSpeedModel, JobSpeedModel
from dl2.workload.node_fit import NodeSpeedFit


class JobAwareOptimus(OptimusOracle):
    """Optimus whose marginal gains read a job's own speed where the model knows the job otherwise than its type."""

    def __init__(self, speed: JobSpeedModel, compat: bool = False, placer: Placer | None = None) -> None:
        super().__init__(speed, compat, placer)
        self.job_speed = speed
        self._job_known: dict[str, tuple[Hashable, dict[tuple[int, int], float]]] = {}
        """Per job known by itself: its key when asked and the throughputs asked since (the greedy loop asks each
        of its sizes many times a decision, and a search's continuations decide again and again with the model
        unchanged); dropped when the key moves."""

    def reset(self) -> None:
        super().reset()
        self._job_known = {}

    def forget_gone(self, view: ClusterView) -> None:
        """Drops the jobs no longer in `view` (a real slot's: a long-running controller's cache stays bounded)."""
        _keep_only(self._job_known, view)

    def _throughput(self, spec: JobSpec, num_ps: int, num_workers: int) -> float:
        key = self.job_speed.job_key(spec)
        if key is None:
            return super()._throughput(spec, num_ps, num_workers)
        known = self._job_known.get(spec.job_id)
        if known is None or known[0] != key:
            known = self._job_known[spec.job_id] = (key, {})
        value = known[1].get((num_ps, num_workers))
        if value is None:
            value = known[1][(num_ps, num_workers)] = self.job_speed.job_throughput(spec, num_ps, num_workers)
        return value


class JobAwareSpeedupHull(SpeedupHull):
    """`speedup-hull` whose hull of a job the model knows otherwise than its type is that job's own."""

    def __init__(self, speed: JobSpeedModel, compat: bool = False, placer: Placer | None = None) -> None:
        super().__init__(speed, compat, placer)
        self.job_speed = speed
        self._job_hulls: dict[str, tuple[Hashable, tuple[HullPoint, ...]]] = {}

    def reset(self) -> None:
        super().reset()
        self._job_hulls = {}

    def forget_gone(self, view: ClusterView) -> None:
        """Drops the jobs no longer in `view` (a real slot's: a long-running controller's cache stays bounded)."""
        _keep_only(self._job_hulls, view)

    def hull(self, spec: JobSpec) -> tuple[HullPoint, ...]:
        key = self.job_speed.job_key(spec)
        if key is None:
            return super().hull(spec)
        cached = self._job_hulls.get(spec.job_id)
        if cached is None or cached[0] != key:
            points = hull_of(
                lambda ps, workers: self.job_speed.job_throughput(spec, ps, workers),
                spec.architecture, spec.max_workers, spec.max_ps,
            )  # fmt: skip
            cached = self._job_hulls[spec.job_id] = (key, points)
        return cached[1]


def _keep_only(per_job: dict[str, Any], view: ClusterView) -> None:
    active = {job.spec.job_id for job in view.jobs}
    for job_id in [job_id for job_id in per_job if job_id not in active]:
        del per_job[job_id]


FITTED_PREFIX = "lookahead-fitted:"
"""How a fitted lookahead is named (`lookahead-fitted:optimus+speedup-hull`), so that its runs and decision records
tell it from the lookahead in the world it wraps (`lookahead:`)."""


def fitted_candidate_names(name: str) -> list[str]:
    """`lookahead-fitted:A+B` (or `lookahead:A+B`) -> ["A", "B"] (A the base)."""
    return candidate_names(PREFIX + name.removeprefix(FITTED_PREFIX).removeprefix(PREFIX))


JOB_AWARE: dict[str, type[JobAwareOptimus] | type[JobAwareSpeedupHull]] = {
    "optimus": JobAwareOptimus,
    "speedup-hull": JobAwareSpeedupHull,
}
"""The heuristics that read a job's own speed when handed a `JobSpeedModel`."""


PlacerChoice = str | Callable[[], Placer]
"""A placer's name, or a factory of fresh placers (a Harmony placer folder's, `dl2.resolve.placer_factory`)."""


def job_aware_scheduler(name: str, speed: JobSpeedModel, placer: PlacerChoice = "load-balance") -> Scheduler:
    """A heuristic by name reading `speed` per job where it can (`JOB_AWARE`), by type otherwise (realistic mode),
    placing with a fresh placer of `placer`."""
    fresh = PLACERS[placer]() if isinstance(placer, str) else placer()
    factory = JOB_AWARE.get(name)
    if factory is None:
        return make_scheduler(name, speed, False, fresh)
    return factory(speed, False, fresh)


class FittedLookahead(LookaheadScheduler):
    """A lookahead whose world's speed is a `JobFittedSpeedModel` and whose resizes cost what the cluster's showed
    (`dl2.sim.rescale_fit`), both fitted from every real slot's view before its candidates propose (the what-if
    runs' views teach it nothing: they are the model's own)."""

    def __init__(
        self,
        fit: JobFittedSpeedModel,
        candidates: Sequence[Scheduler],
        continuation: Scheduler,
        interference: InterferenceModel,
        config: SimConfig,
        horizon_slots: int = 0,
        beyond: Beyond = "estimate",
        growth: int = 2,
        learn_rescale: bool = True,
        node_fit: NodeSpeedFit | None = None,
    ) -> None:
        """`fit`: the world's speed it learns and looks ahead in (its candidates and continuation read it too);
        `interference`: the world's; `learn_rescale`: whether its what-if runs' resizes cost what the cluster's
        showed (else `config`'s); `node_fit`: the slow servers it learns, which its candidates' placers read (None:
        none learned); the rest as `LookaheadScheduler`'s."""
        world = World(fit, interference)
        super().__init__(candidates, continuation, world, config, horizon_slots, beyond, growth)
        self.name = FITTED_PREFIX + self.name.removeprefix(PREFIX)
        self.fit = fit
        self.world_config = config
        """The what-if runs' settings before the learned resize cost."""
        self.rescale_fit = RescaleFit() if learn_rescale else None
        self.node_fit = node_fit

    def reset(self) -> None:
        super().reset()
        self.fit.reset()
        if self.node_fit is not None:
            self.node_fit.reset()
        self.config = self.world_config
        if self.rescale_fit is not None:
            self.rescale_fit.reset()

    def schedule(self, view: ClusterView) -> Allocation:
        # a real slot's view (the what-if runs' are played inside `super().schedule`): the job-aware heuristics drop
        # the jobs gone, which a what-if view, holding fewer jobs, must not make them do
        for scheduler in (*self.candidates, self.continuation):
            if isinstance(scheduler, JobAwareOptimus | JobAwareSpeedupHull):
                scheduler.forget_gone(view)
        self.fit.observe(view)
        if self.node_fit is not None:
            self.node_fit.observe(self.fit.last_ratios)
        if self.rescale_fit is not None:
            self.rescale_fit.observe(view)
            self.config = replace(self.world_config, rescale=self.rescale_fit.rescale(self.world_config.rescale))
        return super().schedule(view)


def make_fitted_lookahead(
    name: str,
    world: World,
    config: SimConfig,
    placer: PlacerChoice = "load-balance",
    horizon_slots: int = 0,
    beyond: Beyond = "estimate",
    growth: int = 2,
    build_policy: Callable[[str, Callable[[], Placer]], Scheduler] | None = None,
    learn_rescale: bool = True,
    learn_nodes: bool = True,
) -> FittedLookahead:
    """`lookahead-fitted:A+B...` (or `lookahead:A+B...`, A the base, a heuristic) looking ahead in `world`
    corrected per job by a fresh `JobFittedSpeedModel` (which divides out `world`'s interference), which its
    heuristics and continuation read per job (`job_aware_scheduler`); a candidate that is no heuristic (a model
    folder) is made by `build_policy` from its name and the placers every candidate places with (sparing the slow
    servers it learns, with `learn_nodes`); named `lookahead-fitted:A+B...`."""
    names = fitted_candidate_names(name)
    if not all(names):
        raise ValueError(f"{name}: candidates are named as {FITTED_PREFIX}A+B (A the base)")
    if names[0] not in SCHEDULERS:
        raise ValueError(f"{name}: the base {names[0]!r} plays the continuations and is a heuristic")
    fit = JobFittedSpeedModel(world.speed, world.interference)
    node_fit = NodeSpeedFit() if learn_nodes else None
    make_placer = _placer_factory(placer, node_fit)

    def candidate(name: str) -> Scheduler:
        if name in SCHEDULERS:
            return job_aware_scheduler(name, fit, make_placer)
        if build_policy is None:
            raise ValueError(f"{name!r} is no heuristic and this fitted lookahead was given no way to load a policy")
        return build_policy(name, make_placer)

    candidates = [candidate(name) for name in names]
    continuation = job_aware_scheduler(names[0], fit, make_placer)
    return FittedLookahead(
        fit, candidates, continuation, world.interference, config, horizon_slots, beyond, growth, learn_rescale,
        node_fit,
    )  # fmt: skip


def _placer_factory(placer: PlacerChoice, node_fit: NodeSpeedFit | None) -> Callable[[], Placer]:
    """Fresh placers of `placer`, each sparing the servers `node_fit` has named slow (where one is given)."""
    fresh: Callable[[], Placer] = PLACERS[placer] if isinstance(placer, str) else placer
    if node_fit is None:
        return fresh
    return lambda: SparingSlowNodes(fresh(), lambda: node_fit.slow)
