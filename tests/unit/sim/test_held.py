"""`Simulation.advance_held` plays a held stretch on arrays (`dl2.sim.held`); it must leave a run exactly (bit for
bit) as stepping it one window at a time with every job in a Python loop did, the way it was first written (kept
here as the reference): every job's progress, run and GPU time, first start and finish, and every slot's record."""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from dl2.core import Workload
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import Mode, SimConfig
from dl2.sim.run import interference_model, speed_model
from dl2.sim.simulator import Simulation
from dl2.sim.what_if import what_if
from dl2.workload.synthetic import PRESETS, generate, scaled


def reference_window(run: Simulation, slots: int) -> int:
    """One window of held slots, one job at a time (the first `advance_held`, which stopped after one window)."""
    if slots <= 0 or run.next_arrival < len(run.specs) or run.config.speed_noise > 0 or not run.active:
        return 0
    start, slot_s = run.time_s, run.slot_s
    active = run.active
    throughputs = run._throughputs(active, [])
    sharing = reference_sharing(run, active) if run._colocation is not None else set()
    whole = min(slots, run.config.max_slots - run.slot)
    ends: list[tuple[float, float, int, float]] = []
    for i, throughput in zip(active, throughputs, strict=True):
        if throughput <= 0.0:
            continue
        run_from = max(start, run.paused_until[i])
        finish = run_from + (run.true_epochs[i] - run.progress[i]) * run.specs[i].samples_per_epoch / throughput
        if i in sharing:
            whole = min(whole, math.floor((finish - start) / slot_s) + 1)
        ends.append((finish, run_from, i, throughput))
    last_busy = max((math.ceil((finish - start) / slot_s) for finish, *_ in ends), default=0)
    first_busy = min((math.floor((run_from - start) / slot_s) for _, run_from, *_ in ends), default=whole)
    whole = min(whole, last_busy)
    if whole <= 0 or first_busy > 0:
        return 0
    end = start + whole * slot_s
    finished: list[int] = []
    for finish, run_from, i, throughput in ends:
        if run_from >= end:
            continue
        spec = run.specs[i]
        if run.first_start_s[i] is None:
            run.first_start_s[i] = start + ((run_from - start) // slot_s) * slot_s
        if finish < end:
            busy = finish - run_from
            run.progress[i] = run.true_epochs[i]
            run.finish_s[i] = finish
            finished.append(i)
        else:
            busy = end - run_from
            run.progress[i] += throughput / spec.samples_per_epoch * busy
        run.run_time_s[i] += busy
        run.gpu_seconds[i] += busy * spec.worker_demand.gpu * run.allocation[i].num_workers
    held_units = 0.0
    leaving: list[tuple[float, float]] = []
    for i, throughput in zip(active, throughputs, strict=True):
        if throughput > 0.0 or run.last_throughput[i] != throughput:
            run._view_cache.pop(i, None)
        run.last_throughput[i] = throughput
        spec, job_allocation = run.specs[i], run.allocation[i]
        units = (spec.worker_demand.gpu if run._gpu_based else spec.worker_demand.cpu) * job_allocation.num_workers
        if not run._gpu_based:
            units += spec.ps_demand.cpu * job_allocation.num_ps
        held_units += units
        finished_at = run.finish_s[i]
        if finished_at is not None:
            leaving.append((finished_at, units))
    leaving.sort()
    gone = 0
    for k in range(whole):
        slot_start = start + k * slot_s
        while gone < len(leaving) and leaving[gone][0] <= slot_start:
            held_units -= leaving[gone][1]
            gone += 1
        run.slot_start_s.append(slot_start)
        run.allocated_gpu_fraction.append(held_units / run._total_units if run._total_units else 0.0)
    if finished:
        run.num_finished += len(finished)
        run.active = [i for i in active if run.finish_s[i] is None]
        run._finished_since.extend(finished)
    run._idle_slots = 0
    run.slot += whole
    return whole


def reference_sharing(run: Simulation, active: list[int]) -> set[int]:
    """The active jobs with a task on a server where another active job has one, task by task."""
    first_on: dict[int, int] = {}
    sharing: set[int] = set()
    for i in active:
        allocation = run.allocation[i]
        for node in (*allocation.worker_nodes, *allocation.ps_nodes):
            other = first_on.setdefault(node, i)
            if other != i:
                sharing.update((i, other))
    return sharing


def reference_advance(run: Simulation, slots: int) -> int:
    """Windows until `slots` are played, the run is done or a window plays none (what the lookahead's loop did)."""
    played = 0
    while played < slots and not run.done:
        whole = reference_window(run, slots - played)
        if whole == 0:
            break
        played += whole
    return played


def state(run: Simulation) -> tuple[object, ...]:
    return (
        run.slot, run.active, run.num_finished, run.progress, run.run_time_s, run.gpu_seconds, run.first_start_s,
        run.finish_s, run.last_throughput, run.slot_start_s, run.allocated_gpu_fraction, run.total_jct_s(),
        sorted(run._view_cache),
    )  # fmt: skip


def busy_workload(num_jobs: int, seed: int) -> Workload:
    """synthetic-small's first jobs on its scaled-down cluster, all submitted at time 0."""
    workload = generate(scaled(PRESETS["synthetic-small"], num_jobs), seed, "held")
    return replace(workload, jobs=tuple(replace(job, spec=replace(job.spec, arrival_s=0.0)) for job in workload.jobs))


@settings(max_examples=25, deadline=None)
@given(
    num_jobs=st.integers(4, 40),
    seed=st.integers(0, 1000),
    scheduler=st.sampled_from(["optimus", "drf", "srtf"]),
    every=st.integers(2, 40),
    interference=st.booleans(),
)
def test_a_held_stretch_on_arrays_is_bit_identical_to_one_job_at_a_time(
    num_jobs: int, seed: int, scheduler: str, every: int, interference: bool
) -> None:
    speed = speed_model(Mode.REALISTIC)
    config = replace(SimConfig.realistic(seed), speed_noise=0.0)  # rescale pauses on: held jobs still wait them out
    model = interference_model() if interference else None
    cluster = Simulation(busy_workload(num_jobs, seed), config, speed, model)
    decide = make_scheduler(scheduler, speed, False, "isolate-strict")
    cluster.apply(decide.schedule(cluster.begin_slot()))
    view = cluster.begin_slot()
    allocation = decide.schedule(view)
    runs = [what_if(view, config, speed, model) for _ in range(2)]
    for run, advance in zip(runs, (Simulation.advance_held, reference_advance), strict=True):
        decide.reset()
        run.apply(allocation)
        played = 1
        while not run.done and run.slot < view.slot + 5_000:
            if played % every == 0:
                run.apply(decide.schedule(run.begin_slot()))
                played += 1
                continue
            held = advance(run, every - played % every)
            if held == 0:
                run.hold_slot()
            played += max(held, 1)
    assert state(runs[0]) == state(runs[1])
