"""Invariants every scheduler and placer must keep, checked independently of the simulator's own validation.

Each scheduler is wrapped so that every allocation it returns is checked against the view it was given:
capacity per node, per-job limits, no PS for all-reduce jobs, only active jobs, and no half-built PS job.
Runs must finish every job, and a seed must give the same run every time.
"""

from __future__ import annotations

import gc
import heapq
import math
import types
from dataclasses import replace
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dl2.core import (
    Allocation,
    Architecture,
    ClusterSpec,
    ClusterView,
    Job,
    JobAllocation,
    JobSpec,
    JobView,
    NodeSpec,
    Resources,
    Scheduler,
    Workload,
)
from dl2.schedulers.base import HeuristicScheduler
from dl2.schedulers.placement import NodeState, place_sticky
from dl2.schedulers.registry import COMPAT_SCHEDULERS, PLACERS, SCHEDULERS, make_scheduler
from dl2.schedulers.requests import Role, below_caps
from dl2.sim import simulator
from dl2.sim.config import Mode, RescaleCost, RescaleKind, SimConfig
from dl2.sim.run import interference_model, speed_model
from dl2.sim.simulator import SimResult, simulate
from dl2.workload.catalogue import CATALOGUE, GPU_MODEL_NAMES
from dl2.workload.mapping import TraceMapping
from dl2.workload.registry import load_workloads
from dl2.workload.synthetic import PRESETS, generate, scaled
from tests.builders import allreduce_job, make_job

_TOLERANCE = 1e-9


def check_allocation(view: ClusterView, allocation: Allocation) -> None:
    """Raise AssertionError unless `allocation` is valid for `view` (recomputed from scratch, not the simulator's)."""
    active = {job.spec.job_id: job.spec for job in view.jobs}
    nodes = view.cluster.nodes
    used = [[0.0, 0.0, 0.0] for _ in nodes]
    for job_id, job_allocation in allocation.jobs.items():
        assert job_id in active, f"slot {view.slot}: {job_id} is not an active job"
        spec = active[job_id]
        workers, ps = job_allocation.worker_nodes, job_allocation.ps_nodes
        assert len(workers) <= spec.max_workers, f"{job_id}: {len(workers)} workers > max {spec.max_workers}"
        assert len(ps) <= spec.max_ps, f"{job_id}: {len(ps)} PS > max {spec.max_ps}"
        if spec.architecture is Architecture.ALLREDUCE:
            assert not ps, f"all-reduce job {job_id} holds {len(ps)} PS"
            assert workers, f"all-reduce job {job_id} is listed without workers"
        else:
            assert workers and ps, f"PS job {job_id} is listed with {len(workers)} workers and {len(ps)} PS"
        for node_ids, demand in ((workers, spec.worker_demand), (ps, spec.ps_demand)):
            for node in node_ids:
                assert 0 <= node < len(nodes), f"{job_id}: node {node} outside 0..{len(nodes) - 1}"
                used[node][0] += demand.gpu
                used[node][1] += demand.cpu
                used[node][2] += demand.mem_gb
    for node, usage in zip(nodes, used, strict=True):
        capacity = node.capacity.as_tuple()
        for resource, amount, limit in zip(("gpu", "cpu", "mem_gb"), usage, capacity, strict=True):
            assert amount <= limit + _TOLERANCE, (
                f"slot {view.slot}: node {node.node_id} uses {resource}={amount:g} of {limit:g}"
            )


class Checked:
    """A scheduler whose every allocation is checked before the simulator sees it."""

    def __init__(self, inner: Scheduler) -> None:
        self.inner = inner
        self.name = inner.name
        self.num_checked = 0
        self.num_nonempty = 0

    def reset(self) -> None:
        self.inner.reset()

    def schedule(self, view: ClusterView) -> Allocation:
        allocation = self.inner.schedule(view)
        check_allocation(view, allocation)
        self.num_checked += 1
        self.num_nonempty += bool(allocation.jobs)
        return allocation


def check_records(result: SimResult, workload: Workload) -> None:
    """Every job finished, once, after it arrived and after it started."""
    assert sorted(record.job_id for record in result.jobs) == sorted(job.spec.job_id for job in workload.jobs)
    arrivals = {job.spec.job_id: job.spec.arrival_s for job in workload.jobs}
    for record in result.jobs:
        assert record.arrival_s == arrivals[record.job_id]
        # the simulator admits a job arriving within 1e-9 s after a boundary at that boundary
        assert record.arrival_s - _TOLERANCE <= record.first_start_s <= record.finish_s, record
        assert record.finish_s >= record.arrival_s
        assert record.jct_s > 0, record
        assert record.num_rescales >= 0
        assert record.gpu_seconds >= 0


# --- realistic mode: every scheduler x every placer -------------------------------------------------------------


@cache
def contended(allreduce_fraction: float) -> Workload:
    """40 synthetic jobs on 3 eight-GPU nodes (synthetic-small scaled down: busy most of the time)."""
    spec = scaled(PRESETS["synthetic-small"], 40)
    spec = replace(spec, mapping=TraceMapping(allreduce_fraction=allreduce_fraction))
    return generate(spec, 0, f"inv-ar{allreduce_fraction:g}")


def run_realistic(
    workload: Workload, scheduler: str, placer: str = "load-balance", seed: int = 0, **overrides: object
) -> tuple[SimResult, Checked]:
    speed = speed_model(Mode.REALISTIC)
    checked = Checked(make_scheduler(scheduler, speed, compat=False, placer=placer))
    config = SimConfig.realistic(seed, **overrides)
    return simulate(workload, checked, config, speed, interference_model()), checked


def test_contended_workloads_are_what_the_tests_assume() -> None:
    plain, mixed = contended(0.0), contended(0.5)
    assert plain.num_jobs == mixed.num_jobs == 40
    assert plain.cluster.num_nodes == 3
    assert all(job.spec.architecture is Architecture.PS for job in plain.jobs)
    num_allreduce = sum(job.spec.architecture is Architecture.ALLREDUCE for job in mixed.jobs)
    assert 5 <= num_allreduce <= 35
    # more work requested than the cluster holds at once: jobs must queue
    assert sum(job.spec.max_workers for job in plain.jobs) > plain.cluster.total_capacity.gpu


@pytest.mark.parametrize("allreduce_fraction", [0.0, 0.5])
@pytest.mark.parametrize("placer", sorted(PLACERS))
@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
def test_realistic_allocations_are_valid_and_every_job_finishes(
    scheduler: str, placer: str, allreduce_fraction: float
) -> None:
    workload = contended(allreduce_fraction)
    result, checked = run_realistic(workload, scheduler, placer)
    check_records(result, workload)
    assert checked.num_checked == result.num_slots
    assert checked.num_nonempty > 0
    assert result.scheduler == scheduler
    assert all(0.0 <= fraction <= 1.0 + _TOLERANCE for fraction in result.allocated_gpu_fraction)


@pytest.mark.parametrize("placer", sorted(PLACERS))
@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
def test_runs_create_no_reference_cycles(scheduler: str, placer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`simulate` holds the automatic garbage collector off (large runs would otherwise spend their time in full
    collections), which is safe only while scheduling creates no reference cycles: everything of ours must be freed
    by reference counting alone. (Libraries imported by other tests, e.g. Airflow's, leave cycles of their own;
    only garbage that involves dl2's objects, methods, functions or frames counts.)"""
    monkeypatch.setattr(simulator, "YOUNG_COLLECTION_SLOTS", 10**9)  # its own collections would hide cycles
    workload = contended(0.5)
    run_realistic(workload, scheduler, placer)  # first use builds caches once (models, imports): not per run
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        result, _ = run_realistic(workload, scheduler, placer)
        assert result.num_slots > 0
        del result
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        ours = [repr(item)[:80] for item in gc.garbage if _belongs_to_dl2(item)]
        assert not ours, ours
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()


def _belongs_to_dl2(item: object) -> bool:
    if isinstance(item, types.FrameType):
        return "/dl2/" in item.f_code.co_filename
    if isinstance(item, types.MethodType):
        item = item.__self__
    if isinstance(item, types.FunctionType):
        return item.__module__.startswith("dl2")
    return type(item).__module__.startswith("dl2")


def test_simulate_restores_the_garbage_collector() -> None:
    assert gc.isenabled()
    run_realistic(contended(0.0), "fifo")
    assert gc.isenabled()


@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
def test_realistic_runs_are_deterministic_per_seed(scheduler: str) -> None:
    workload = contended(0.5)
    first, _ = run_realistic(workload, scheduler, seed=3)
    again, _ = run_realistic(workload, scheduler, seed=3)
    other, _ = run_realistic(workload, scheduler, seed=4)
    assert first.jobs == again.jobs
    assert first.allocated_gpu_fraction == again.allocated_gpu_fraction
    assert first.num_slots == again.num_slots
    assert SimConfig.realistic(0).speed_noise > 0
    assert other.jobs != first.jobs  # the seed drives the speed noise


@pytest.mark.parametrize("scheduler", ["drf", "srpt-knee-fill"])
def test_a_forked_run_finishes_exactly_like_the_original(scheduler: str) -> None:
    """Noise, checkpoint-restart times (the random generator) and co-location all carry over to the fork, and
    advancing the fork leaves the original where it was."""
    speed = speed_model(Mode.REALISTIC)
    config = SimConfig.realistic(5, rescale=RescaleCost(kind=RescaleKind.CHECKPOINT), epoch_error=0.2)
    workload = contended(0.5)
    whole = simulate(workload, make_scheduler(scheduler, speed, False), config, speed, interference_model())

    def finish(run: simulator.Simulation) -> SimResult:
        policy = make_scheduler(scheduler, speed, False)
        while not run.done:
            run.apply(policy.schedule(run.begin_slot()))
        return run.result(scheduler)

    original = simulator.Simulation(workload, config, speed, interference_model())
    policy = make_scheduler(scheduler, speed, False)
    for _ in range(30):
        original.apply(policy.schedule(original.begin_slot()))
    twin = original.fork()
    slot, progress = original.slot, list(original.progress)
    forked = finish(twin)
    assert (original.slot, original.progress) == (slot, progress)
    assert not original.done
    assert forked.jobs == whole.jobs
    # mid-run, the total counts finished jobs' JCTs plus what running jobs have spent so far: between the finished
    # jobs' sum and the final total
    so_far = original.total_jct_s()
    finished = sum(
        f - spec.arrival_s for f, spec in zip(original.finish_s, original.specs, strict=True) if f is not None
    )
    assert finished < so_far < sum(job.jct_s for job in whole.jobs)
    assert finish(original).jobs == whole.jobs
    assert original.total_jct_s() == pytest.approx(sum(job.jct_s for job in whole.jobs))


@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
def test_realistic_checkpoint_restarts_and_estimate_errors_keep_the_invariants(scheduler: str) -> None:
    workload = contended(0.5)
    result, _ = run_realistic(
        workload,
        scheduler,
        placer="binpack",
        seed=1,
        rescale=RescaleCost(kind=RescaleKind.CHECKPOINT),
        epoch_error=0.2,
    )
    check_records(result, workload)


# --- compatibility mode on the authors' small reference workload --------------------------------------------------


@cache
def reference_workload() -> Workload:
    return load_workloads("dl2-official-small")[0]


def isolated_lower_bound_s(job: Job) -> float:
    """Run time of the job alone with the fastest (PS, workers) its caps allow (placement is free in compat mode).

    Not `JobRecord.isolated_s`: that is the run time at the *requested* counts (1 worker, 1 PS for the authors'
    jobs), which an elastic scheduler routinely beats.
    """
    speed = speed_model(Mode.COMPAT)
    spec = job.spec
    best = max(
        speed.throughput(spec.model, ps, workers)
        for ps in range(1, spec.max_ps + 1)
        for workers in range(1, spec.max_workers + 1)
    )
    return job.true_epochs * spec.samples_per_epoch / best


def run_compat(workload: Workload, scheduler: str, seed: int = 0) -> tuple[SimResult, Checked]:
    speed = speed_model(Mode.COMPAT)
    checked = Checked(make_scheduler(scheduler, speed, compat=True))
    return simulate(workload, checked, SimConfig.compat(seed), speed), checked


@pytest.mark.parametrize("scheduler", COMPAT_SCHEDULERS)
def test_compat_allocations_are_valid_and_jobs_never_beat_their_isolated_bound(scheduler: str) -> None:
    workload = reference_workload()
    result, checked = run_compat(workload, scheduler)
    check_records(result, workload)
    assert checked.num_checked == result.num_slots
    jobs = {job.spec.job_id: job for job in workload.jobs}
    for record in result.jobs:
        bound = isolated_lower_bound_s(jobs[record.job_id])
        assert record.jct_s >= bound * (1 - 1e-9), f"{record.job_id}: JCT {record.jct_s:g} < bound {bound:g}"
    # the authors' jobs arrive on slot boundaries and start when they first get tasks
    for record in result.jobs:
        assert record.arrival_s % result.slot_s == 0
        assert record.first_start_s % result.slot_s == 0


@pytest.mark.parametrize("scheduler", COMPAT_SCHEDULERS)
def test_compat_runs_are_deterministic_and_seed_free(scheduler: str) -> None:
    workload = reference_workload()
    first, _ = run_compat(workload, scheduler, seed=0)
    again, _ = run_compat(workload, scheduler, seed=0)
    other, _ = run_compat(workload, scheduler, seed=5)
    assert first.jobs == again.jobs
    assert first.allocated_gpu_fraction == again.allocated_gpu_fraction
    # compatibility mode has no noise, estimate errors or restore times: the seed changes nothing
    assert other.jobs == first.jobs


def _checker_view() -> ClusterView:
    """Two 2-GPU nodes; job 'ps' (PS) and job 'ar' (all-reduce), each capped at 2 workers."""
    model = CATALOGUE["resnet-50"]

    def spec(job_id: str, allreduce: bool) -> JobSpec:
        return JobSpec(
            job_id,
            model.name,
            0.0,
            10.0,
            model.samples_per_epoch,
            model.worker_demand,
            model.ps_demand.scaled(0.0) if allreduce else model.ps_demand,
            max_workers=2,
            max_ps=0 if allreduce else 2,
            architecture=Architecture.ALLREDUCE if allreduce else Architecture.PS,
            requested_ps=0 if allreduce else 1,
        )

    cluster = ClusterSpec.homogeneous(2, Resources(gpu=2.0, cpu=64.0, mem_gb=512.0))
    jobs = tuple(JobView(spec(i, i == "ar"), 0.0, 0.0, JobAllocation(), 0.0, 0.0, 0) for i in ("ps", "ar"))
    return ClusterView(0.0, 0, 600.0, cluster, jobs, Allocation())


def test_the_checker_accepts_a_full_valid_allocation() -> None:
    check_allocation(_checker_view(), Allocation({"ps": JobAllocation((0, 0), (1,)), "ar": JobAllocation((1, 1))}))


@pytest.mark.parametrize(
    "jobs",
    [
        pytest.param({"ps": JobAllocation((0, 0), (0,)), "ar": JobAllocation((0,))}, id="over-capacity"),
        pytest.param({"ar": JobAllocation((0, 1, 1))}, id="over-max-workers"),
        pytest.param({"ps": JobAllocation((0,), (0, 1, 1))}, id="over-max-ps"),
        pytest.param({"ar": JobAllocation((0,), (1,))}, id="ps-on-all-reduce"),
        pytest.param({"ps": JobAllocation((0,))}, id="worker-without-ps"),
        pytest.param({"ps": JobAllocation((), (0,))}, id="ps-without-worker"),
        pytest.param({"gone": JobAllocation((0,), (0,))}, id="inactive-job"),
        pytest.param({"ar": JobAllocation((2,))}, id="node-out-of-range"),
    ],
)
def test_the_checker_catches_each_kind_of_bad_allocation(jobs: dict[str, JobAllocation]) -> None:
    with pytest.raises(AssertionError):
        check_allocation(_checker_view(), Allocation(jobs))


# --- property: random tiny workloads -----------------------------------------------------------------------------

PROPERTY_SCHEDULERS = ("drf", "fifo", "srtf", "optimus", "tiresias")


@st.composite
def tiny_workloads(draw: st.DrawFn) -> Workload:
    """1-6 catalogue jobs (PS or all-reduce) with random arrivals, sizes and caps on 1-3 nodes of 1-8 GPUs."""
    speed = speed_model(Mode.REALISTIC)
    num_nodes = draw(st.integers(1, 3))
    gpus_per_node = draw(st.sampled_from([1.0, 2.0, 4.0, 8.0]))
    cluster = ClusterSpec.homogeneous(num_nodes, Resources(gpu=gpus_per_node, cpu=64.0, mem_gb=512.0), kind="tiny")
    total_gpus = int(num_nodes * gpus_per_node)
    jobs = []
    for k in range(draw(st.integers(1, 6))):
        model = CATALOGUE[draw(st.sampled_from(GPU_MODEL_NAMES))]
        allreduce = draw(st.booleans())
        max_workers = draw(st.integers(1, 6))
        max_ps = 0 if allreduce else draw(st.integers(1, 4))
        # requested sizes fit the cluster, so a gang scheduler (Tiresias) can always run the job eventually
        requested_workers = draw(st.integers(1, min(max_workers, total_gpus)))
        requested_ps = 0 if allreduce else draw(st.integers(1, max_ps))
        alone_s = draw(st.floats(30.0, 20_000.0))
        epochs = alone_s * speed.throughput(model.name, 1 if not allreduce else 0, 1) / model.samples_per_epoch
        spec = JobSpec(
            job_id=f"j{k}",
            model=model.name,
            arrival_s=draw(st.floats(0.0, 5_000.0)),
            declared_epochs=epochs,
            samples_per_epoch=model.samples_per_epoch,
            worker_demand=model.worker_demand,
            ps_demand=model.ps_demand.scaled(0.0) if allreduce else model.ps_demand,
            max_workers=max_workers,
            max_ps=max_ps,
            architecture=Architecture.ALLREDUCE if allreduce else Architecture.PS,
            requested_workers=requested_workers,
            requested_ps=requested_ps,
        )
        jobs.append(Job(spec, epochs))
    slot_s = draw(st.sampled_from([600.0, 1200.0]))
    return Workload("tiny", cluster, tuple(jobs), slot_s)


@st.composite
def realistic_configs(draw: st.DrawFn) -> SimConfig:
    return SimConfig(
        mode=Mode.REALISTIC,
        rescale=RescaleCost(kind=draw(st.sampled_from(list(RescaleKind)))),
        speed_noise=draw(st.sampled_from([0.0, 0.05, 0.3])),
        epoch_error=draw(st.sampled_from([0.0, 0.2])),
        interference=draw(st.booleans()),
        seed=draw(st.integers(0, 2**16)),
        max_slots=20_000,  # a starved job fails the example quickly instead of running 200,000 slots
    )


def _run_checked(workload: Workload, scheduler: str, placer: str, config: SimConfig) -> SimResult:
    speed = speed_model(Mode.REALISTIC)
    checked = Checked(make_scheduler(scheduler, speed, compat=False, placer=placer))
    result = simulate(workload, checked, config, speed, interference_model())
    assert checked.num_checked == result.num_slots
    return result


@pytest.mark.parametrize("scheduler", PROPERTY_SCHEDULERS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workload=tiny_workloads(), config=realistic_configs(), placer=st.sampled_from(sorted(PLACERS)))
def test_random_tiny_workloads_stay_valid_and_finish(
    scheduler: str, workload: Workload, config: SimConfig, placer: str
) -> None:
    result = _run_checked(workload, scheduler, placer, config)
    check_records(result, workload)


@settings(max_examples=15, deadline=None)
@given(workload=tiny_workloads(), config=realistic_configs())
def test_random_tiny_workloads_are_deterministic(workload: Workload, config: SimConfig) -> None:
    for scheduler in ("drf", "optimus-fitted"):
        first = _run_checked(workload, scheduler, "load-balance", config)
        again = _run_checked(workload, scheduler, "load-balance", config)
        assert first.jobs == again.jobs


# --- known bugs ------------------------------------------------------------------------------------------------------


def cpu_bound_workload() -> Workload:
    """One 8-GPU, 32-core server and 8 waiting resnet-50 jobs: 8 workers alone take all 32 cores."""
    model = CATALOGUE["resnet-50"]
    jobs = tuple(
        Job(
            JobSpec(
                f"j{k}", model.name, 0.0, 5.0, model.samples_per_epoch, model.worker_demand, model.ps_demand, 16, 16
            ),
            5.0,
        )
        for k in range(8)
    )
    cluster = ClusterSpec.homogeneous(1, Resources(gpu=8.0, cpu=32.0, mem_gb=512.0))
    return Workload("cpu-bound", cluster, jobs, 600.0)


@pytest.mark.parametrize("scheduler", ["optimus", "optimus-fitted"])
def test_optimus_runs_something_when_workers_alone_would_fill_the_cpus(scheduler: str) -> None:
    # 8 first workers take all 32 cores, so no PS fits. Four jobs at a time (1 worker + 1 PS = 8 cores each) would
    # run; DRF, FIFO, SRTF and Tiresias finish all 8 (next test).
    workload = cpu_bound_workload()
    result = _run_checked(workload, scheduler, "load-balance", SimConfig.realistic(0, max_slots=100))
    check_records(result, workload)


@pytest.mark.parametrize("scheduler", ["drf", "fifo", "srtf", "tiresias"])
def test_other_schedulers_run_the_cpu_bound_case(scheduler: str) -> None:
    workload = cpu_bound_workload()
    result = _run_checked(workload, scheduler, "load-balance", SimConfig.realistic(0, max_slots=100))
    check_records(result, workload)


# --- the shortcuts of the simulator's fast paths ----------------------------------------------------------------


def _utilisation(state: NodeState, node: int) -> float:
    return state.utilisation(node)


def _negative_utilisation(state: NodeState, node: int) -> float:
    return -state.utilisation(node)


def _free_gpu(state: NodeState, node: int) -> float:
    return -state.free[node][0]


def _placers_keys() -> list[tuple[str, object]]:
    """The keys the placers use, with their vectorised forms (a fresh state ranks every node at once)."""
    from dl2.schedulers import binpack

    return [("load-balance", NodeState.utilisation), ("binpack", binpack._negative_utilisation)]


RANKINGS = [("least", _utilisation), ("most", _negative_utilisation), ("gpu", _free_gpu), *_placers_keys()]


@settings(max_examples=60, deadline=None)
@given(
    capacities=st.lists(
        st.sampled_from([(8.0, 16.0, 64.0), (4.0, 8.0, 32.0), (0.0, 32.0, 128.0)]), min_size=1, max_size=6
    ),
    operations=st.lists(
        st.tuples(
            st.integers(0, 5), st.sampled_from([(1.0, 2.0, 4.0), (0.0, 4.0, 8.0), (2.0, 1.0, 1.0)]), st.booleans()
        ),
        max_size=40,
    ),
    vectorised=st.booleans(),
)
def test_node_rankings_always_return_the_best_fitting_node(
    capacities: list[tuple[float, float, float]],
    operations: list[tuple[int, tuple[float, float, float], bool]],
    vectorised: bool,
) -> None:
    """The lazily cleaned heaps of `NodeState.best` must name the node a scan of the cluster would: the lowest
    key among nodes that fit, ties to the lowest index, as tasks are taken and given back. A third demand is
    first ranked after tasks have moved (the vectorised first ranking must see the state as it is then)."""
    cluster = ClusterSpec(tuple(NodeSpec(i, Resources(*capacity)) for i, capacity in enumerate(capacities)))
    # tasks already running on the first nodes: the fresh state's free resources differ per node
    state = NodeState(cluster, {(1.0, 2.0, 4.0): [n for n in range(len(capacities)) if n % 2 and capacities[n][0]]})
    state.vectorise_from_nodes = 1 if vectorised else 10**9  # the placers' keys, either way, on these small clusters
    held: list[tuple[int, tuple[float, float, float]]] = []
    steps = [(99, (0.0, 0.0, 0.0), False), *operations]  # first: rank the fresh state
    for step, (node, demand, release) in enumerate(steps):
        if release and held:
            state.give(*held.pop())
        elif node < state.num_nodes and state.fits(node, demand):
            state.take(node, demand)
            held.append((node, demand))
        late = ((2.0, 1.0, 1.0),) if step >= len(steps) // 2 else ()
        for name, key in RANKINGS:
            for wanted in ((1.0, 2.0, 4.0), (0.0, 4.0, 8.0), *late):
                fitting = [(key(state, n), n) for n in range(state.num_nodes) if state.fits(n, wanted)]  # type: ignore[operator]
                expected = min(fitting)[1] if fitting else -1
                assert state.best(name, key, wanted) == expected  # type: ignore[arg-type]


def test_sticky_placement_keeps_held_tasks_and_frees_unrunnable_ones() -> None:
    """Two 8-GPU/8-CPU nodes. Job a keeps exactly what it holds (the very same allocation object); job b holds a
    worker without a PS, which cannot run, so it gets nothing and its node is free again; job c, new, gets a
    worker on the least-loaded node (node 1, empty once b's worker is given back) and its PS on the lowest-index
    node of the two now equally loaded ones (both at a dominant share of 0.5): node 0."""
    cluster = ClusterSpec.homogeneous(2, Resources(gpu=8.0, cpu=8.0))
    held = {"a": JobAllocation((0,), (0,)), "b": JobAllocation((1,), ()), "c": JobAllocation((), ())}
    jobs = tuple(
        JobView(make_job(job_id, 10.0).spec, 0.0, 0.0, allocation, 0.0, 0.0, 0) for job_id, allocation in held.items()
    )
    view = ClusterView(0.0, 1, 1200.0, cluster, jobs, Allocation({k: v for k, v in held.items() if v.worker_nodes}))
    allocation = place_sticky(view, [(1, 1), (1, 0), (1, 1)], PLACERS["load-balance"]())
    assert allocation.jobs["a"] is held["a"]
    assert "b" not in allocation.jobs
    assert allocation.jobs["c"] == JobAllocation((1,), (0,))
    assert list(allocation.jobs) == ["a", "c"]


@pytest.mark.parametrize("scheduler", ["drf", "fifo", "srtf"])
def test_the_all_fit_shortcut_gives_what_the_request_stream_gives(
    scheduler: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When every job's bundles fit at once, DRF, FIFO and SRTF skip their request stream: same runs either way."""
    workload = generate(scaled(PRESETS["synthetic-philly"], 300), 0, "shortcut")
    speed = speed_model(Mode.REALISTIC)
    shortcut_taken = 0
    original = HeuristicScheduler._targets_if_all_fit

    def counting(self: HeuristicScheduler, view: ClusterView) -> list[tuple[int, int]] | None:
        nonlocal shortcut_taken
        targets = original(self, view)
        shortcut_taken += targets is not None
        return targets

    monkeypatch.setattr(HeuristicScheduler, "_targets_if_all_fit", counting)
    fast = simulate(
        workload, make_scheduler(scheduler, speed, False), SimConfig.realistic(1), speed, interference_model()
    )
    assert shortcut_taken > 10
    slow_scheduler = make_scheduler(scheduler, speed, False)
    monkeypatch.setattr(slow_scheduler, "gives_bundles_to_caps", False)
    slow = simulate(workload, slow_scheduler, SimConfig.realistic(1), speed, interference_model())
    assert fast.jobs == slow.jobs
    assert fast.allocated_gpu_fraction == slow.allocated_gpu_fraction


def _drf_per_job_heap(view: ClusterView, counts: list[list[int]]):  # type: ignore[no-untyped-def]
    """DRF's request stream with one heap entry per job: the plain form the class heap of `DRF` must equal."""
    totals = [t if t > 0 else math.inf for t in view.cluster.total_capacity.as_tuple()]
    heap = [(0.0, rank) for rank, job in enumerate(view.jobs) if below_caps(job.spec, 0, 0)]
    while heap:
        rank = heap[0][1]
        granted = yield rank, Role.BUNDLE
        spec = view.jobs[rank].spec
        workers, ps = counts[rank]
        if not granted or not below_caps(spec, workers, ps):
            heapq.heappop(heap)
            continue
        worker, server = spec.worker_demand.as_tuple(), spec.ps_demand.as_tuple()
        share = max((workers * w + ps * p) / t for w, p, t in zip(worker, server, totals, strict=True))
        heapq.heapreplace(heap, (share, rank))


@settings(max_examples=60, deadline=None)
@given(
    kinds=st.lists(st.tuples(st.sampled_from(["a", "b", "ar"]), st.integers(1, 5)), min_size=1, max_size=25),
    budget=st.integers(1, 120),
    refusals=st.sets(st.integers(0, 200), max_size=10),
)
def test_drf_class_heap_grants_in_the_order_of_a_heap_of_jobs(
    kinds: list[tuple[str, int]], budget: int, refusals: set[int]
) -> None:
    """Jobs of equal demands share one heap entry in `DRF.requests`; the sequence of requests, with grants and
    refusals answered the same way, must be the one a heap with an entry per job gives."""
    jobs = []
    for k, (kind, tasks) in enumerate(kinds):
        job = allreduce_job(f"j{k}", tasks) if kind == "ar" else make_job(f"j{k}", 10.0, max_tasks=tasks)
        if kind == "b":  # another demand class: twice the worker
            job = Job(replace(job.spec, worker_demand=job.spec.worker_demand.scaled(2.0)), job.true_epochs)
        jobs.append(JobView(job.spec, 0.0, 0.0, JobAllocation(), 0.0, 0.0, 0))
    view = ClusterView(
        0.0, 0, 100.0, ClusterSpec.homogeneous(4, Resources(gpu=8.0, cpu=8.0)), tuple(jobs), Allocation()
    )

    def requests(stream_of):  # type: ignore[no-untyped-def]
        counts = [[0, 0] for _ in jobs]
        stream, asked = stream_of(view, counts), []
        try:
            rank, _ = next(stream)
            while len(asked) < budget:
                asked.append(rank)
                granted = len(asked) not in refusals
                if granted:
                    counts[rank][0] += 1
                    counts[rank][1] += jobs[rank].spec.max_ps > 0
                rank, _ = stream.send(granted)
        except StopIteration:
            pass
        return asked

    drf = make_scheduler("drf", speed_model(Mode.REALISTIC), compat=False)
    assert requests(drf.requests) == requests(_drf_per_job_heap)  # type: ignore[attr-defined]


@settings(max_examples=150, deadline=None)
@given(
    kinds=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", "ar", "free"]), st.integers(1, 6)), min_size=1, max_size=30
    ),
    nodes=st.integers(1, 6),
    gpu=st.sampled_from([0.0, 4.0, 8.0]),
    cpu=st.sampled_from([3.0, 8.0, 12.5]),
    smallest=st.sampled_from([(0.0, 0.0, 0.0), (4.0, 2.0, 0.0)]),
)
def test_drf_water_filling_gives_the_request_streams_counts(
    kinds: list[tuple[str, int]], nodes: int, gpu: float, cpu: float, smallest: tuple[float, float, float]
) -> None:
    """`DRF.water_fill` computes realistic mode's outcome of DRF's request stream without running it: drawn jobs
    of several demand classes (PS and all-reduce, one whose bundle weighs nothing), clusters that lack a
    resource or fit bundles exactly, with and without the mechanism's early stop."""
    from dl2.schedulers.drf import DRF
    from dl2.schedulers.fill import fill_with_placer
    from dl2.schedulers.load_balance import LoadBalancePlacer

    jobs = []
    for k, (kind, tasks) in enumerate(kinds):
        job = allreduce_job(f"j{k}", tasks) if kind == "ar" else make_job(f"j{k}", 10.0, max_tasks=tasks)
        spec = job.spec
        if kind == "b":  # another class: twice the worker
            spec = replace(spec, worker_demand=spec.worker_demand.scaled(2.0))
        elif kind == "c":  # more workers than PS allowed: capped by the PS
            spec = replace(spec, worker_demand=Resources(gpu=1.0, cpu=0.5, mem_gb=1.5), max_ps=max(1, tasks // 2))
        elif kind == "free":  # a bundle that weighs nothing
            spec = replace(spec, worker_demand=Resources(), ps_demand=Resources())
        jobs.append(JobView(spec, 0.0, 0.0, JobAllocation(), 0.0, 0.0, 0))
    view = ClusterView(
        0.0, 0, 100.0, ClusterSpec.homogeneous(nodes, Resources(gpu=gpu, cpu=cpu)), tuple(jobs), Allocation()
    )
    drf = DRF()
    demands = drf._role_demands(view)
    counts = [[0, 0] for _ in jobs]
    fill_with_placer(view, drf.requests(view, counts), counts, demands, LoadBalancePlacer(), smallest)
    assert drf.water_fill(view, demands, smallest) == counts
