"""The lookahead in a world each job's progress corrects (`dl2.rl.fitted_lookahead`): its candidates read a job the
fit knows by the job (and every other job exactly as before), and on a cluster with knees it learns the knee jobs
and no other."""

from __future__ import annotations

from dataclasses import replace

from dl2.core import Allocation, ClusterSpec, ClusterView, JobAllocation, JobSpec, JobView, NodeSpec, Resources
from dl2.rl.fitted_lookahead import JobAwareOptimus, JobAwareSpeedupHull, make_fitted_lookahead
from dl2.schedulers.optimus import OptimusOracle
from dl2.schedulers.speedup_hull import SpeedupHull, hull_of
from dl2.sim.config import SimConfig
from dl2.sim.run import World, catalogue_speed, interference_model
from dl2.truth import SCENARIOS, realise
from dl2.truth.run import run_on
from dl2.workload.job_fit import JobFittedSpeedModel
from dl2.workload.synthetic import PRESETS, generate

BASE = catalogue_speed()
CLUSTER = ClusterSpec(tuple(NodeSpec(i, Resources(gpu=8, cpu=64, mem_gb=512)) for i in range(4)))
SPEC = JobSpec("a", "vgg-16", 0.0, 10.0, 1000.0, Resources(gpu=1, cpu=4, mem_gb=8), Resources(cpu=4, mem_gb=8), 8, 8)


def first_slot(*specs: JobSpec) -> ClusterView:
    jobs = tuple(JobView(s, 0.0, 0.0, JobAllocation(), 0.0, 0.0, 0) for s in specs)
    return ClusterView(0.0, 0, 600.0, CLUSTER, jobs, Allocation({}))


def workers_of(allocation: Allocation, job_id: str) -> int:
    return allocation.jobs[job_id].num_workers


def short_at_two(ratio: float) -> JobFittedSpeedModel:
    """A fit that saw job `a` run at `ratio` times its type's speed on two workers."""
    fit = JobFittedSpeedModel(BASE)
    allocation = JobAllocation((0, 0), (0, 0, 0, 0))
    observed = ratio * BASE.placed_throughput(SPEC, allocation)
    job = JobView(SPEC, 1.0, 100.0, allocation, observed, 600.0, 0)
    fit.observe(ClusterView(600.0, 1, 600.0, CLUSTER, (job,), Allocation({"a": allocation})))
    return fit


def test_the_job_aware_candidates_read_a_job_the_fit_knows_by_the_job():
    view = first_slot(SPEC, replace(SPEC, job_id="b"))
    plain = OptimusOracle(BASE).schedule(view)
    assert workers_of(plain, "a") == workers_of(plain, "b") >= 2
    fit = short_at_two(0.8)
    aware = JobAwareOptimus(fit).schedule(view)
    assert workers_of(aware, "a") == 1  # its second worker buys nothing
    assert workers_of(aware, "b") == workers_of(plain, "b")  # the other job as before
    hull = JobAwareSpeedupHull(fit)
    assert max(point.workers for point in hull.hull(SPEC)) == 1
    assert hull.hull(replace(SPEC, job_id="b")) == SpeedupHull(BASE).hull(SPEC)


def test_a_corrected_job_s_throughputs_are_kept_while_its_fit_stands_and_asked_again_when_it_moves():
    fit = short_at_two(0.8)
    optimus = JobAwareOptimus(fit)
    view = first_slot(SPEC)
    optimus.schedule(view)
    kept = dict(optimus._job_known["a"][1])
    assert kept and all(value == fit.job_throughput(SPEC, *size) for size, value in kept.items())
    allocation = JobAllocation((0, 0), (0, 0, 0, 0))  # the job shows it runs at half its type's speed now
    job = JobView(SPEC, 1.0, 100.0, allocation, 0.5 * BASE.placed_throughput(SPEC, allocation), 600.0, 0)
    fit.observe(ClusterView(1200.0, 2, 600.0, CLUSTER, (job,), Allocation({"a": allocation})))
    optimus.schedule(view)
    assert optimus._job_known["a"][1] != kept
    assert all(value == fit.job_throughput(SPEC, *size) for size, value in optimus._job_known["a"][1].items())


def test_the_job_aware_candidates_forget_gone_jobs_at_real_slots_only():
    fit = short_at_two(0.8)
    optimus, hull = JobAwareOptimus(fit), JobAwareSpeedupHull(fit)
    optimus._job_known["gone"] = (None, {})
    hull._job_hulls["gone"] = (None, ())
    view = first_slot(SPEC)
    optimus.schedule(view)  # as a what-if run's view: nothing forgotten
    hull.schedule(view)
    assert set(optimus._job_known) == {"a", "gone"} and set(hull._job_hulls) == {"a", "gone"}
    lookahead = make_fitted_lookahead(
        "lookahead-fitted:optimus+speedup-hull", World(BASE, interference_model()), SimConfig.realistic(),
        "isolate-strict", 2, "sparse", 8,
    )  # fmt: skip
    for scheduler in (*lookahead.candidates, lookahead.continuation):
        (scheduler._job_known if isinstance(scheduler, JobAwareOptimus) else scheduler._job_hulls)["gone"] = (None, {})
    lookahead.schedule(view)  # a real slot's view
    assert all(
        "gone" not in (s._job_known if isinstance(s, JobAwareOptimus) else s._job_hulls)
        for s in (*lookahead.candidates, lookahead.continuation)
    )


def test_a_jobs_own_hull_is_the_speedup_hulls_rule():
    for model in ("vgg-16", "inception-bn"):
        spec = replace(SPEC, model=model)
        expected = SpeedupHull(BASE).hull(spec)
        assert hull_of(lambda ps, w, m=model: BASE.throughput(m, ps, w), spec.architecture, 8, 8) == expected


def test_on_a_cluster_with_knees_it_learns_the_knee_jobs_and_no_other():
    workload = generate(replace(PRESETS["synthetic-small"], num_jobs=30), 3, "small")
    cluster = realise(SCENARIOS["scaling-knee"], workload)
    built = {}

    def build(speed, compat):
        built["lookahead"] = make_fitted_lookahead(
            "lookahead:optimus+speedup-hull", World(speed, interference_model()), SimConfig.realistic(),
            "isolate-strict",
        )  # fmt: skip
        return built["lookahead"]

    result = run_on(cluster, build, SimConfig.realistic(seed=3))
    assert all(job.jct_s is not None for job in result.jobs)
    fit = built["lookahead"].fit
    assert fit.observations > 0 and fit.corrections
    assert set(fit.corrections) <= set(cluster.knee_of)
    # what it learned of each knee job: its type's speed at one worker, short of it past one, as the truth plays it
    for corrections in fit.corrections.values():
        assert all(factor == 1.0 if workers == 1 else factor <= 1.0 for workers, factor in corrections)


def test_the_fit_wraps_a_world_that_knows_jobs_itself():
    """Over a speed that answers per job (here the truth's, as the lookahead reading the truth has it), the fit keeps
    that speed's per-job answers and multiplies its own corrections on them."""
    workload = generate(replace(PRESETS["synthetic-small"], num_jobs=30), 3, "small")
    cluster = realise(SCENARIOS["scaling-knee"], workload)
    knee = next(job.spec for job in workload.jobs if job.spec.job_id in cluster.knee_of)
    plain = next(job.spec for job in workload.jobs if job.spec.job_id not in cluster.knee_of)
    fit = JobFittedSpeedModel(cluster.speed)
    assert fit.job_key(plain) is None and fit.job_key(knee) is not None
    assert fit.job_throughput(knee, 1, 3) == cluster.speed.job_throughput(knee, 1, 3)
    assert fit.job_throughput(knee, 1, 3) < BASE.throughput(knee.model, 1, 3)


def test_a_fitted_lookahead_is_resolved_by_name_and_named_apart_from_the_plain_one() -> None:
    """`lookahead-fitted:A+B` reaches the fitted lookahead from every command line and benchmark (`dl2.resolve`);
    its name, which runs and decision records carry, is not the plain lookahead's; what it cannot be is refused."""
    import pytest

    from dl2.core import InputError
    from dl2.resolve import UnknownPolicy, scheduler_builder
    from dl2.rl.fitted_lookahead import FittedLookahead
    from dl2.sim.config import Mode

    build = scheduler_builder("lookahead-fitted:optimus+speedup-hull", "isolate-strict", Mode.REALISTIC)
    scheduler = build(BASE, False)
    assert isinstance(scheduler, FittedLookahead) and scheduler.name == "lookahead-fitted:optimus+speedup-hull"
    assert [type(c).__name__ for c in scheduler.candidates] == ["JobAwareOptimus", "JobAwareSpeedupHull"]
    for bad, why in (
        ("lookahead-fitted:optimus", "two or more candidates"),
        ("lookahead-fitted:optimus+nope", "unknown scheduler 'nope'"),
        ("lookahead-fitted:models/dl2-philly+optimus", "the base A a heuristic"),
    ):
        with pytest.raises(UnknownPolicy, match=why):
            scheduler_builder(bad, None, Mode.REALISTIC)
    with pytest.raises(InputError, match="model folder not found"):
        scheduler_builder("lookahead-fitted:optimus+models/no-such-model", None, Mode.REALISTIC)
    with pytest.raises(UnknownPolicy, match="realistic mode"):
        scheduler_builder("lookahead-fitted:optimus+speedup-hull", None, Mode.COMPAT)


def test_the_full_system_is_a_fitted_lookahead_with_the_network_as_a_candidate() -> None:
    """`lookahead-fitted:optimus+speedup-hull+<model folder>`: the heuristics read the fit per job, the network
    decides from its observation, the Harmony placer folder places for all of them; it runs a small cluster to the
    end and its decisions are attributed to the candidates."""
    from dl2.resolve import scheduler_builder
    from dl2.rl.fitted_lookahead import FittedLookahead
    from dl2.rl.learned import LearnedScheduler
    from dl2.sim.config import Mode

    name = "lookahead-fitted:optimus+speedup-hull+models/dl2-philly"
    build = scheduler_builder(name, "models/harmony-placer-philly", Mode.REALISTIC)
    workload = generate(replace(PRESETS["synthetic-small"], num_jobs=20), 5, "small")
    cluster = realise(SCENARIOS["scaling-knee"], workload)
    built = {}

    def keep(speed, compat):
        built["lookahead"] = build(speed, compat)
        return built["lookahead"]

    result = run_on(cluster, keep, SimConfig.realistic(seed=5))
    scheduler = built["lookahead"]
    assert (
        isinstance(scheduler, FittedLookahead) and scheduler.name == "lookahead-fitted:optimus+speedup-hull+dl2-philly"
    )
    assert isinstance(scheduler.candidates[2], LearnedScheduler)
    # every candidate, the network included, places with Harmony sparing the servers the run shows slow
    assert {type(c.placer).__name__ for c in scheduler.candidates} == {"SparingSlowNodes"}
    assert {type(c.placer.placer).__name__ for c in scheduler.candidates} == {"HarmonyPlacer"}
    assert scheduler.node_fit is not None and scheduler.node_fit.slow == frozenset()  # no slow servers in this truth
    assert all(job.jct_s is not None for job in result.jobs)
    assert sum(scheduler.tally.decided.values()) >= scheduler.contested
