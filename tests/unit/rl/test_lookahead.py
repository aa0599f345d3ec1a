"""The what-if run a scheduler's view gives (`dl2.sim.what_if`) and the lookahead that decides with it
(`dl2.rl.lookahead`): where the what-if is exact (every job arrived, no noise, declared epochs true), it continues
exactly as the cluster does, and the lookahead is never worse than its base."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dl2.core import Workload
from dl2.resolve import UnknownPolicy, scheduler_builder
from dl2.rl.lookahead import LookaheadScheduler, make_lookahead
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import Mode, RescaleCost, RescaleKind, SimConfig
from dl2.sim.run import World, interference_model, speed_model
from dl2.sim.simulator import Simulation, simulate
from dl2.sim.what_if import what_if
from dl2.workload.synthetic import PRESETS, generate, scaled

EXACT = SimConfig.realistic(0, speed_noise=0.0, rescale=RescaleCost(kind=RescaleKind.NONE))
"""A cluster the what-if models exactly: no noise, no random rescale pauses, declared epochs true."""


def all_at_once(num_jobs: int = 24) -> Workload:
    """synthetic-small's first jobs on its scaled-down cluster, all submitted at time 0 (nothing arrives later, so a
    what-if run, which knows no future arrivals, misses nothing)."""
    workload = generate(scaled(PRESETS["synthetic-small"], num_jobs), 0, "at-once")
    jobs = tuple(
        replace(job, spec=replace(job.spec, arrival_s=0.0), true_epochs=job.spec.declared_epochs)
        for job in workload.jobs
    )
    return replace(workload, jobs=jobs)


def test_a_what_if_run_from_a_view_continues_exactly_as_the_cluster() -> None:
    workload, speed = all_at_once(), speed_model(Mode.REALISTIC)
    cluster = Simulation(workload, EXACT, speed, interference_model())
    drf = make_scheduler("drf", speed, False)
    for _ in range(4):
        cluster.apply(drf.schedule(cluster.begin_slot()))
    view = cluster.begin_slot()
    assert view.jobs and any(not job.allocation.is_empty for job in view.jobs)
    run = what_if(view, EXACT, speed, interference_model())
    assert run.slot == view.slot and run.active == list(range(len(view.jobs)))
    assert run.previous.jobs == {j.spec.job_id: j.allocation for j in view.jobs if not j.allocation.is_empty}
    while not cluster.done:
        cluster.apply(drf.schedule(cluster.begin_slot()))
    while not run.done:
        run.apply(drf.schedule(run.begin_slot()))
    finish = {spec.job_id: f for spec, f in zip(cluster.specs, cluster.finish_s, strict=True)}
    assert {spec.job_id: f for spec, f in zip(run.specs, run.finish_s, strict=True)} == pytest.approx(
        {job.spec.job_id: finish[job.spec.job_id] for job in view.jobs}, rel=1e-12
    )


def test_the_lookahead_is_never_worse_than_its_base_where_the_what_if_is_exact() -> None:
    """Rollout policy improvement: the base's own allocation is always a candidate and its continuation is the
    base's real run, so each slot's choice can only shorten the total; here the other candidate is taken too."""
    workload, speed = all_at_once(), speed_model(Mode.REALISTIC)
    world = World(speed, interference_model())
    lookahead = make_lookahead(
        "lookahead:drf+srtf", lambda name: make_scheduler(name, speed, False, "isolate-strict"), world, EXACT
    )
    assert isinstance(lookahead, LookaheadScheduler) and lookahead.name == "lookahead:drf+srtf"
    base = simulate(workload, make_scheduler("drf", speed, False, "isolate-strict"), EXACT, speed, world.interference)
    ours = simulate(workload, lookahead, EXACT, speed, world.interference)
    assert sum(job.jct_s for job in ours.jobs) <= sum(job.jct_s for job in base.jobs) * (1 + 1e-12)
    assert lookahead.continuations > 0 and lookahead.chosen.get(1, 0) > 0
    lookahead.reset()
    assert (lookahead.continuations, lookahead.chosen) == (0, {})


def test_lookaheads_are_named_by_their_candidates_and_play_realistic_mode() -> None:
    build = scheduler_builder("lookahead:optimus+speedup-hull", "isolate-strict", Mode.REALISTIC)
    scheduler = build(speed_model(Mode.REALISTIC), False)
    assert isinstance(scheduler, LookaheadScheduler)
    assert [c.name for c in scheduler.candidates] == ["optimus", "speedup-hull"]
    assert scheduler.continuation is not scheduler.candidates[0] and scheduler.continuation.name == "optimus"
    with pytest.raises(UnknownPolicy, match="realistic mode"):
        scheduler_builder("lookahead:drf+srtf", None, Mode.COMPAT)
    with pytest.raises(UnknownPolicy, match="two or more candidates"):
        scheduler_builder("lookahead:drf", None, Mode.REALISTIC)
    with pytest.raises(UnknownPolicy, match="unknown scheduler 'nope'"):
        scheduler_builder("lookahead:drf+nope", None, Mode.REALISTIC)
