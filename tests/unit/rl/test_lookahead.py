"""The what-if run a scheduler's view gives (`dl2.sim.what_if`) and the lookahead that decides with it
(`dl2.rl.lookahead`): where the what-if is exact (every job arrived, no noise, declared epochs true), it continues
exactly as the cluster does, and the lookahead is never worse than its base."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from dl2.core import InputError, Workload
from dl2.kube.models import smoke_test
from dl2.resolve import UnknownPolicy, scheduler_builder, trained_scheduler
from dl2.rl.learned import LearnedScheduler
from dl2.rl.lookahead import LookaheadScheduler, load_policy, make_lookahead
from dl2.rl.model_io import PolicyConfig
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import Mode, RescaleCost, RescaleKind, SimConfig
from dl2.sim.run import World, interference_model, speed_model
from dl2.sim.simulator import Simulation, simulate
from dl2.sim.what_if import what_if
from dl2.workload.synthetic import PRESETS, generate, scaled

ROOT = Path(__file__).resolve().parents[3]
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


def _with_lookahead(source: Path, folder: Path, lookahead: list[str]) -> Path:
    """A copy of the model folder `source` whose config names `lookahead`."""
    shutil.copytree(source, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "lookahead": lookahead}))
    return folder


def test_a_model_folder_that_names_a_lookahead_runs_inside_it_wherever_it_is_deployed(tmp_path: Path) -> None:
    """The controller's loader, the command line's resolution and the gate's loading all run the policy as the
    last candidate of its lookahead; the controller's smoke test passes it."""
    folder = _with_lookahead(ROOT / "models" / "dl2-philly", tmp_path / "philly-lookahead", ["optimus", "speedup-hull"])
    for scheduler in (
        load_policy(folder, compat=False),
        trained_scheduler(folder),
        scheduler_builder(str(folder), None, Mode.REALISTIC)(speed_model(Mode.REALISTIC), False),
    ):
        assert isinstance(scheduler, LookaheadScheduler)
        assert [c.name for c in scheduler.candidates] == ["optimus", "speedup-hull", "philly-lookahead"]
        assert isinstance(scheduler.candidates[-1], LearnedScheduler) and scheduler.continuation.name == "optimus"
        assert all(c.placer.name == "binpack" for c in scheduler.candidates[:2])  # type: ignore[attr-defined]
    assert smoke_test(trained_scheduler(folder)) is None
    assert isinstance(load_policy(ROOT / "models" / "dl2-philly"), LearnedScheduler)  # none named: the policy alone
    config = PolicyConfig(mode="realistic", lookahead=("optimus",))
    assert PolicyConfig.from_json_dict(json.loads(json.dumps(config.to_json_dict()))) == config


@pytest.mark.parametrize(
    ("model", "lookahead", "message"),
    [("dl2-compat-small", ["optimus"], "realistic mode"), ("dl2-philly", ["optimus", "nope"], "nope")],
)
def test_a_lookahead_a_folder_cannot_run_is_refused_when_it_loads(
    tmp_path: Path, model: str, lookahead: list[str], message: str
) -> None:
    folder = _with_lookahead(ROOT / "models" / model, tmp_path / "model", lookahead)
    with pytest.raises(InputError, match=message) as refused:
        load_policy(folder)
    assert "lookahead" in str(refused.value)
