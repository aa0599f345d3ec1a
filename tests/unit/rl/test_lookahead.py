"""The what-if run a scheduler's view gives (`dl2.sim.what_if`) and the lookahead that decides with it
(`dl2.rl.lookahead`): where the what-if is exact (every job arrived, no noise, declared epochs true), it continues
exactly as the cluster does, and the lookahead is never worse than its base."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from dl2.core import InputError, Workload
from dl2.core.log_format import read_log
from dl2.kube.models import smoke_test
from dl2.resolve import UnknownPolicy, scheduler_builder, trained_scheduler
from dl2.rl.learned import LearnedScheduler
from dl2.rl.lookahead import MAX_SLOTS, SPARSE_GROWTH, LookaheadScheduler, load_policy, make_lookahead
from dl2.rl.model_io import PolicyConfig
from dl2.schedulers.registry import make_scheduler
from dl2.sim.attribution import slot_attribution
from dl2.sim.config import Mode, RescaleCost, RescaleKind, SimConfig
from dl2.sim.decision_log import log_run
from dl2.sim.run import World, interference_model, speed_model
from dl2.sim.simulator import Simulation, simulate
from dl2.sim.what_if import remaining_jct_estimate_s, what_if
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


def _contested_lookahead(horizon_slots: int = 0) -> tuple[Workload, LookaheadScheduler, World]:
    workload, speed = all_at_once(), speed_model(Mode.REALISTIC)
    world = World(speed, interference_model())
    build = lambda name: make_scheduler(name, speed, False, "isolate-strict")  # noqa: E731
    return workload, make_lookahead("lookahead:drf+srtf+drf", build, world, EXACT, horizon_slots), world


def test_every_slot_says_which_candidates_decided_and_what_each_one_predicted() -> None:
    """Attribution: the applied allocation's proposers (all of them where they agreed, each repeated name made
    unique), each candidate's predicted total equal to its continuation's, and tallies that add up."""
    workload, lookahead, world = _contested_lookahead()
    assert lookahead.labels == ["drf#0", "srtf", "drf#2"]
    cluster = Simulation(workload, EXACT, world.speed, world.interference)
    lookahead.reset()
    seen_contested = seen_agreed = 0
    while not cluster.done:
        view = cluster.begin_slot()
        proposals = {label: c.schedule(view) for label, c in zip(lookahead.labels, lookahead.candidates, strict=True)}
        applied = lookahead.schedule(view)
        attribution = lookahead.attribution
        assert attribution is not None
        assert set(attribution.decided_by) == {label for label, a in proposals.items() if a.jobs == applied.jobs}
        if attribution.contested:
            seen_contested += 1
            assert set(attribution.predicted_total_s) == set(lookahead.labels)
            assert attribution.predicted_total_s["drf#0"] == attribution.predicted_total_s["drf#2"]
            best = min(attribution.predicted_total_s.values())
            assert all(attribution.predicted_total_s[label] == best for label in attribution.decided_by)
            for label, allocation in proposals.items():
                predicted = lookahead.total_jct_after(view, allocation)
                assert attribution.predicted_total_s[label] == pytest.approx(predicted)
        else:
            seen_agreed += 1
            assert attribution.decided_by == tuple(lookahead.labels)
        cluster.apply(applied)
    assert seen_contested == lookahead.contested > 0 and seen_agreed > 0
    assert sum(lookahead.chosen.values()) == lookahead.contested
    assert lookahead.decided["drf#0"] == lookahead.decided["drf#2"]
    shares = lookahead.decided_shares()
    assert shares["drf#0"] + shares["srtf"] == pytest.approx(1.0)  # drf's two copies always agree


def test_a_horizon_as_long_as_the_run_changes_nothing_and_a_short_one_estimates_the_rest() -> None:
    workload, full, world = _contested_lookahead()
    _, long, _ = _contested_lookahead(horizon_slots=MAX_SLOTS)
    _, short, _ = _contested_lookahead(horizon_slots=2)
    cluster = Simulation(workload, EXACT, world.speed, world.interference)
    drf = make_scheduler("drf", world.speed, False, "isolate-strict")
    for _ in range(3):
        cluster.apply(drf.schedule(cluster.begin_slot()))
    view = cluster.begin_slot()
    allocation = drf.schedule(view)
    exact = full.total_jct_after(view, allocation)
    assert long.total_jct_after(view, allocation) == exact
    estimated = short.total_jct_after(view, allocation)
    assert math.isfinite(estimated) and estimated > 0
    # the estimate lies within a factor of the exact continuation (it is no bound, only a common yardstick)
    assert 0.3 * exact <= estimated <= 3 * exact
    short.beyond = "sparse"  # played to the end, the base deciding every 2, 4, 8, ... slots past the horizon
    before = short.continuations
    sparse = short.total_jct_after(view, allocation)
    assert short.continuations == before + 1 and math.isfinite(sparse) and 0.5 * exact <= sparse <= 2 * exact
    long.beyond = "sparse"
    assert long.total_jct_after(view, allocation) == exact
    with pytest.raises(ValueError, match="horizon"):
        LookaheadScheduler(full.candidates, full.continuation, world, EXACT, horizon_slots=-1)


def test_the_remaining_estimate_serves_the_shortest_work_first_on_the_whole_cluster() -> None:
    """Two jobs of one model, one with half its epochs done: hand-computed from `isolated_s`."""
    workload, speed = all_at_once(2), speed_model(Mode.REALISTIC)
    first = workload.jobs[0]
    workload = replace(workload, jobs=(first, replace(first, spec=replace(first.spec, job_id="twin"))))
    run = Simulation(workload, EXACT, speed, None)
    run.begin_slot()
    run.progress[0] = run.true_epochs[0] / 2
    alone = run.isolated_s(1)
    spec = run.specs[0]
    gpus = spec.worker_demand.gpu * spec.requested_workers
    capacity = workload.cluster.total_capacity.gpu
    expected = max(alone / 2, alone / 2 * gpus / capacity) + max(alone, 1.5 * alone * gpus / capacity)
    assert remaining_jct_estimate_s(run) == pytest.approx(expected)
    run.active = []
    assert remaining_jct_estimate_s(run) == 0.0


def test_a_search_proposer_s_records_say_which_candidate_proposed_and_read_back(tmp_path: Path) -> None:
    workload, lookahead, world = _contested_lookahead()
    drf = make_scheduler("drf", world.speed, False, "isolate-strict")
    log_run(workload, drf, lookahead, "active", EXACT, world.speed, world.interference, tmp_path, "search/1")
    records = read_log(tmp_path)
    assert records and all(record.proposed_by for record in records)
    contested = [record for record in records if record.predicted_total_s]
    assert contested and all(set(record.predicted_total_s) == set(lookahead.labels) for record in contested)
    assert {label for record in contested for label in record.proposed_by.split("+")} <= set(lookahead.labels)
    summary = slot_attribution(records)
    assert summary.searched == summary.slots and summary.contested == lookahead.contested > 0
    assert (summary.decided, summary.alone) == (lookahead.decided, lookahead.alone)
    assert summary.share("srtf") == pytest.approx(lookahead.decided_shares()["srtf"])
    assert summary.alone.get("drf#0", 0) == 0  # drf's two copies always propose together
    alone = tmp_path / "alone"
    log_run(workload, drf, make_scheduler("srtf", world.speed, False), "active", EXACT, world.speed, None, alone, "h/1")
    assert all(record.proposed_by == "" and record.predicted_total_s == {} for record in read_log(alone))
    assert slot_attribution(read_log(alone)).searched == 0


def test_advancing_held_slots_in_one_step_is_slot_by_slot_holding() -> None:
    """`Simulation.advance_held` against `apply(previous)` slot by slot from the same what-if state, to the end:
    the same finish times, progress, run and GPU time, slots and first starts (up to rounding)."""
    workload, speed = all_at_once(), speed_model(Mode.REALISTIC)
    config = replace(SimConfig.realistic(0), speed_noise=0.0)  # rescale pauses on: held jobs still wait them out
    cluster = Simulation(workload, config, speed, interference_model())
    drf = make_scheduler("drf", speed, False, "isolate-strict")
    for _ in range(2):
        cluster.apply(drf.schedule(cluster.begin_slot()))
    view = cluster.begin_slot()
    allocation = drf.schedule(view)
    runs = [what_if(view, config, speed, interference_model()) for _ in range(2)]
    jumps = 0
    for stepwise, run in enumerate(runs):
        run.apply(allocation)
        played = 1
        while not run.done:
            if played % 7 == 0:  # DRF decides every 7th slot; in between every job keeps what it holds
                run.apply(drf.schedule(run.begin_slot()))
                played += 1
                continue
            held = 0 if stepwise else run.advance_held(7 - played % 7)
            jumps += held > 1
            if held == 0:
                run.begin_slot()
                run.apply(run.previous)
            played += max(held, 1)
    assert jumps > 0
    one_step, slot_by_slot = runs
    assert one_step.slot == slot_by_slot.slot
    for name in ("finish_s", "progress", "run_time_s", "gpu_seconds", "first_start_s", "slot_start_s"):
        assert getattr(one_step, name) == pytest.approx(getattr(slot_by_slot, name), rel=1e-9), name
    assert one_step.allocated_gpu_fraction == pytest.approx(slot_by_slot.allocated_gpu_fraction)
    assert one_step.total_jct_s() == pytest.approx(slot_by_slot.total_jct_s(), rel=1e-12)
    noisy = what_if(view, config, speed, None)
    noisy.config = replace(config, speed_noise=0.05)
    assert noisy.advance_held(5) == 0  # a noisy run draws per slot


def test_a_model_folder_s_lookahead_horizon_plays_its_what_if_runs_sparsely_past_it(tmp_path: Path) -> None:
    folder = _with_lookahead(ROOT / "models" / "dl2-philly", tmp_path / "sparse", ["optimus", "speedup-hull"])
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "lookahead_horizon_slots": 2}))
    scheduler = load_policy(folder, compat=False)
    assert isinstance(scheduler, LookaheadScheduler)
    assert (scheduler.horizon_slots, scheduler.beyond, scheduler.growth) == (2, "sparse", SPARSE_GROWTH)
    assert smoke_test(scheduler) is None
    (folder / "config.json").write_text(json.dumps({**config, "lookahead_horizon_slots": -1}))
    with pytest.raises(InputError, match="lookahead_horizon_slots"):
        load_policy(folder)


def test_a_model_folder_s_lookahead_fit_looks_ahead_in_a_world_corrected_per_job(tmp_path: Path) -> None:
    """`lookahead_fit` in config.json: the same candidates and horizon, the heuristics reading each job's fitted
    speed; refused without a lookahead to fit."""
    from dl2.rl.fitted_lookahead import FittedLookahead

    folder = _with_lookahead(ROOT / "models" / "dl2-philly", tmp_path / "fitted", ["optimus", "speedup-hull"])
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "lookahead_horizon_slots": 2, "lookahead_fit": True}))
    scheduler = load_policy(folder, compat=False)
    assert isinstance(scheduler, FittedLookahead)
    assert scheduler.name == "lookahead-fitted:optimus+speedup-hull+fitted"
    assert [type(c).__name__ for c in scheduler.candidates] == ["JobAwareOptimus", "JobAwareSpeedupHull",
                                                                 "LearnedScheduler"]  # fmt: skip
    assert (scheduler.horizon_slots, scheduler.beyond, scheduler.growth) == (2, "sparse", SPARSE_GROWTH)
    assert smoke_test(scheduler) is None
    (folder / "config.json").write_text(json.dumps({**config, "lookahead": [], "lookahead_fit": True}))
    with pytest.raises(InputError, match="lookahead_fit"):
        load_policy(folder)


def test_a_model_folder_s_calibration_is_the_world_its_lookahead_runs_in(tmp_path: Path) -> None:
    """`calibration.json` beside `config.json`: the candidates read its speeds and the what-if runs play them, with
    its interference; fitted per job, the fit starts from it. A malformed one refuses the folder by file and field."""
    from dl2.rl.fitted_lookahead import FittedLookahead
    from dl2.workload.calibration import CalibratedSpeedModel, Calibration, TypeCalibration
    from dl2.workload.calibration_io import CALIBRATION_FILE, write_calibration

    calibration = Calibration(
        {("resnet-50", 0.0, 0.0, 0.0, 0.0): TypeCalibration((0.5, 2.0, 1.0, 1.0), 50, 4)}, 2.0, 20, False
    )
    folder = _with_lookahead(ROOT / "models" / "dl2-philly", tmp_path / "calibrated", ["optimus", "speedup-hull"])
    write_calibration(folder / CALIBRATION_FILE, calibration)
    scheduler = load_policy(folder, compat=False)
    assert isinstance(scheduler, LookaheadScheduler)
    speed = scheduler.world.speed
    assert isinstance(speed, CalibratedSpeedModel) and speed.calibration == calibration
    assert all(candidate.speed is speed for candidate in scheduler.candidates[:2])  # type: ignore[attr-defined]
    assert scheduler.continuation.speed is speed  # type: ignore[attr-defined]
    profiled = interference_model()
    assert scheduler.world.interference.slowdown("vgg-16", "wlm") == 1 + 2 * (profiled.slowdown("vgg-16", "wlm") - 1)
    assert smoke_test(scheduler) is None
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "lookahead_horizon_slots": 2, "lookahead_fit": True}))
    fitted = load_policy(folder, compat=False)
    assert isinstance(fitted, FittedLookahead) and fitted.fit.base is not None
    assert fitted.fit.base.calibration == calibration  # type: ignore[attr-defined]
    (folder / CALIBRATION_FILE).write_text(json.dumps({"format": "dl2-calibration/1", "types": "none"}))
    with pytest.raises(InputError, match="field 'types'"):
        load_policy(folder)
