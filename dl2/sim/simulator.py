"""The trace-driven cluster simulator.

Time advances in slots. At each slot boundary the simulator admits the jobs that have arrived, shows the
scheduler a read-only `ClusterView`, checks the returned `Allocation` (capacity, per-job limits) and runs the
slot: every job with tasks progresses at its speed (placement, interference, noise) after paying the pause of
a rescale, and a job that completes mid-slot finishes at its exact time. Its tasks stay idle until the next
boundary, where decisions are made again (DL2 §3: decisions once per slot).

`Simulation` exposes the loop step by step (`begin_slot` / `apply`) for the RL environment; `simulate` runs a
scheduler to the end.
"""

from __future__ import annotations

import copy
import gc
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from dl2.core import (
    EMPTY_JOB_ALLOCATION,
    Allocation,
    Architecture,
    ClusterView,
    Dl2Error,
    InvalidAllocationError,
    JobAllocation,
    JobView,
    Resources,
    Scheduler,
    Workload,
)
from dl2.sim.colocation import CoLocation
from dl2.sim.config import Mode, SimConfig
from dl2.sim.held import HeldStretch, JobConstants
from dl2.workload.accelerated_speed import on_accelerators
from dl2.workload.interference import InterferenceModel
from dl2.workload.speed import SpeedModel

_EPS = 1e-9


class SimulationError(Dl2Error):
    """The run cannot finish: a job fits on no node, or no job progressed for `SimConfig.stall_slots` slots."""


@dataclass(frozen=True, slots=True)
class JobRecord:
    """What happened to one job."""

    job_id: str
    model: str
    arrival_s: float
    first_start_s: float
    finish_s: float
    num_rescales: int
    gpu_seconds: float
    requested_gpus: float
    isolated_s: float
    """Run time alone at its requested workers/PS with a packed placement (the fairness reference)."""

    @property
    def jct_s(self) -> float:
        return self.finish_s - self.arrival_s

    @property
    def queueing_s(self) -> float:
        return self.first_start_s - self.arrival_s


@dataclass(slots=True)
class SlotOutcome:
    """What one slot did: epochs each job progressed and the jobs that finished."""

    slot: int
    start_s: float
    progress_epochs: dict[str, float]
    finished: list[str]
    allocated_gpu_fraction: float
    job_seconds: float
    """Seconds jobs spent in the system during the slot, summed over jobs (waiting ones included): summed over
    slots it is the sum of all JCTs, less the waits before the first boundary after an idle period (which no
    scheduler can change). An average-JCT reward is its negative."""


@dataclass(slots=True)
class SimResult:
    """A finished run."""

    workload: str
    scheduler: str
    mode: str
    seed: int
    slot_s: float
    jobs: list[JobRecord]
    slot_start_s: list[float] = field(default_factory=list)
    allocated_gpu_fraction: list[float] = field(default_factory=list)
    """Per slot: allocated GPUs / cluster GPUs (CPU slots for a cluster without GPUs)."""
    num_slots: int = 0
    wall_s: float = 0.0


class Simulation:
    """One workload under one configuration, advanced slot by slot."""

    def __init__(
        self,
        workload: Workload,
        config: SimConfig,
        speed: SpeedModel,
        interference: InterferenceModel | None = None,
    ) -> None:
        self.workload = workload
        self.config = config
        # realistic mode runs each job at its workers' accelerators' pace; compat mode is the authors'
        # homogeneous cluster. A cluster of reference accelerators keeps `speed` itself.
        self.speed = speed if config.mode is Mode.COMPAT else on_accelerators(speed, workload.cluster)
        self._reference_speed = speed
        """The speed model as given: the reference accelerator's (what `isolated_s` measures against)."""
        self.interference = interference if config.interference else None
        self.slot_s = config.slot_s or workload.slot_s
        self.rng = np.random.default_rng(config.seed)
        self.cluster = workload.cluster
        self.specs = [job.spec for job in workload.jobs]
        self.index_of = {spec.job_id: i for i, spec in enumerate(self.specs)}
        n = len(self.specs)
        true_epochs = np.array([job.true_epochs for job in workload.jobs], dtype=float)
        if config.epoch_error > 0:
            # DL2 §6.4: the declared epochs are off by up to +-epoch_error; the truth is what the job needs.
            declared = np.array([spec.declared_epochs for spec in self.specs])
            true_epochs = declared * (1.0 + config.epoch_error * self.rng.uniform(-1.0, 1.0, n))
        self.true_epochs: list[float] = true_epochs.tolist()
        self.progress = [0.0] * n
        self.finish_s: list[float | None] = [None] * n
        self.first_start_s: list[float | None] = [None] * n
        self.allocation: list[JobAllocation] = [EMPTY_JOB_ALLOCATION] * n
        self.paused_until = [0.0] * n
        self.num_rescales = [0] * n
        self.gpu_seconds = [0.0] * n
        self.run_time_s = [0.0] * n
        self.last_throughput = [0.0] * n
        self.previous = Allocation()
        self.slot = 0
        self.next_arrival = 0
        self.active: list[int] = []
        self.num_finished = 0
        self.slot_start_s: list[float] = []
        self.allocated_gpu_fraction: list[float] = []
        self._idle_slots = 0
        self._check_every_job_fits()
        total = self.cluster.total_capacity
        self._gpu_based = total.gpu > 0
        self._total_units = total.gpu if self._gpu_based else total.cpu
        self._capacity = [node.capacity.as_tuple() for node in self.cluster.nodes]
        self._capacity_array = np.array(self._capacity, dtype=float).reshape(-1, 3)
        # a PS on an all-reduce job is refused by its max_ps of 0, so the demand check covers every role
        self._demands = [(spec.worker_demand.as_tuple(), spec.ps_demand.as_tuple()) for spec in self.specs]
        self._throughput_cache: dict[int, tuple[float, JobAllocation]] = {}
        self._finished_since: list[int] = []
        """Jobs finished since co-location was last brought up to date."""
        self._view_cache: dict[int, JobView] = {}
        self._job_constants: JobConstants | None = None
        """Per-job constants `advance_held` reads as arrays (built on first use)."""
        self._colocation: CoLocation | None = None
        if self.interference is not None:
            table = np.array(self.interference.table, dtype=float)
            self._colocation = CoLocation(table, self.cluster.num_nodes)
            self._type_of = [self.interference.type_index(spec) for spec in self.specs]

    def fork(self) -> Simulation:
        """An independent copy of the run as it stands: advancing either leaves the other unchanged, and both
        advance exactly as this run would (the random generator is copied with its state). The workload,
        models and job specs are shared (they are never modified); what changes per slot is copied. Lets a
        teacher try alternative allocations from the same state (`dl2.rl.rollout_teacher`)."""
        twin = copy.copy(self)
        for name, value in vars(self).items():
            if isinstance(value, list | dict):
                setattr(twin, name, value.copy())
        twin.rng = copy.deepcopy(self.rng)
        twin._colocation = self._colocation.copy() if self._colocation is not None else None
        return twin

    def cache_throughputs(self) -> None:
        """Compute each active job's placement-aware throughput on what it holds now, kept while it holds it, so
        that forks made from here on share them (what-if runs of one view, `dl2.rl.lookahead`)."""
        for i in self.active:
            self._base_throughput(i)

    # -- the loop -------------------------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        return self.num_finished == len(self.specs)

    @property
    def time_s(self) -> float:
        return self.slot * self.slot_s

    def begin_slot(self) -> ClusterView:
        """Admit arrivals (skipping idle time) and return the view the scheduler decides on."""
        if self.done:
            raise SimulationError("all jobs have finished")
        if not self.active and self.next_arrival < len(self.specs):
            first_slot = math.ceil(self.specs[self.next_arrival].arrival_s / self.slot_s - _EPS)
            self.slot = max(self.slot, first_slot)
        if self.slot >= self.config.max_slots:
            raise SimulationError(
                f"{self.workload.name}: {len(self.specs) - self.num_finished} jobs unfinished after "
                f"{self.config.max_slots} slots"
            )
        now = self.time_s
        while self.next_arrival < len(self.specs) and self.specs[self.next_arrival].arrival_s <= now + _EPS:
            self.active.append(self.next_arrival)
            self.next_arrival += 1
        # a job's view is reused while nothing about it changes (a queued job stays the same for many slots)
        cache = self._view_cache
        views = []
        for i in self.active:
            view = cache.get(i)
            if view is None:
                view = cache[i] = self._new_view(i)
            views.append(view)
        return ClusterView(now, self.slot, self.slot_s, self.cluster, tuple(views), self.previous)

    def _new_view(self, i: int) -> JobView:
        return JobView(
            self.specs[i],
            self.progress[i],
            self.gpu_seconds[i],
            self.allocation[i],
            self.last_throughput[i],
            self.run_time_s[i],
            self.num_rescales[i],
        )

    def check(self, allocation: Allocation) -> None:
        """Raise `InvalidAllocationError` if `allocation` breaks capacity or limits in the current slot."""
        self._validate(allocation)

    def hold(self, allocation: Allocation) -> None:
        """The active jobs hold `allocation` as if they had run the previous slot with it, without a rescale's
        pause: where a what-if run starts from (`dl2.sim.what_if`)."""
        self._validate(allocation)
        held = []
        for i in self.active:
            job_allocation = allocation.get(self.specs[i].job_id)
            if not job_allocation.is_empty:
                self.allocation[i] = job_allocation
                self._view_cache.pop(i, None)
                held.append(i)
        if self._colocation is not None:
            self._colocation.update(((i, self.allocation[i], self._type_of[i]) for i in held), [])
        self.previous = allocation

    def apply(self, allocation: Allocation) -> SlotOutcome:
        """Check the allocation, run one slot with it and move to the next boundary."""
        if allocation is not self.previous and not self._holds_already(allocation):
            self._validate(allocation)
        start = self.time_s
        end = start + self.slot_s
        active = self.active
        # the previous slot's allocation again (most slots): every job keeps what it holds, new arrivals nothing
        moved = [] if allocation is self.previous else self._apply_changes(allocation, start)
        throughputs = self._throughputs(active, moved)
        progressed: dict[str, float] = {}
        finished: list[str] = []
        allocated_units = 0.0
        for i, throughput in zip(active, throughputs, strict=True):
            job_allocation = self.allocation[i]
            spec = self.specs[i]
            units = (spec.worker_demand.gpu if self._gpu_based else spec.worker_demand.cpu) * job_allocation.num_workers
            if not self._gpu_based:
                units += spec.ps_demand.cpu * job_allocation.num_ps
            allocated_units += units
            if throughput > 0.0 or self.last_throughput[i] != throughput:
                self._view_cache.pop(i, None)
            self.last_throughput[i] = throughput
            if throughput <= 0.0:
                continue
            run_from = max(start, self.paused_until[i])
            if run_from >= end:
                continue
            if self.first_start_s[i] is None:
                self.first_start_s[i] = start
            rate = throughput / spec.samples_per_epoch
            remaining = self.true_epochs[i] - self.progress[i]
            gained = rate * (end - run_from)
            if gained >= remaining:
                busy = remaining / rate
                self.finish_s[i] = run_from + busy
                gained = remaining
                finished.append(spec.job_id)
            else:
                busy = end - run_from
            self.progress[i] += gained
            self.run_time_s[i] += busy
            self.gpu_seconds[i] += busy * spec.worker_demand.gpu * job_allocation.num_workers
            progressed[spec.job_id] = gained
        if finished:
            self.num_finished += len(finished)
            self.active = [i for i in active if self.finish_s[i] is None]
            # finished jobs no longer interfere from the next slot on
            self._finished_since.extend(self.index_of[job_id] for job_id in finished)
        self._idle_slots = 0 if progressed else self._idle_slots + 1
        if self._idle_slots >= self.config.stall_slots:
            raise SimulationError(
                f"{self.workload.name}: no job progressed for {self._idle_slots} slots while "
                f"{len(self.active)} waited; the scheduler starves them"
            )
        fraction = allocated_units / self._total_units if self._total_units else 0.0
        self.slot_start_s.append(start)
        self.allocated_gpu_fraction.append(fraction)
        self.previous = allocation
        outcome = SlotOutcome(self.slot, start, progressed, finished, fraction, self._job_seconds(active, start, end))
        self.slot += 1
        return outcome

    def hold_slot(self) -> SlotOutcome:
        """One slot in which every job keeps what it holds: `begin_slot` and `apply(self.previous)`, less the view
        nobody reads, where every job has arrived (a what-if run's continuation between decisions)."""
        if self.next_arrival < len(self.specs) or self.done or self.slot >= self.config.max_slots:
            self.begin_slot()  # admits arrivals, or raises as there
        return self.apply(self.previous)

    def advance_held(self, slots: int) -> int:
        """Run up to `slots` slots with every job keeping what it holds, as `begin_slot` and `apply(self.previous)`
        would slot by slot, but window by window, every job in one step per window (`dl2.sim.held`): jobs that
        finish meanwhile finish as there. A window stops after the slot in which a job that shares a server
        finishes (the others' interference changes from the next one); the stretch stops before a slot in which
        nothing would run. Only where every job has arrived and speeds are noiseless (a what-if run's
        continuation, `dl2.rl.lookahead`), else nothing; returns the slots run."""
        if slots <= 0 or self.next_arrival < len(self.specs) or self.config.speed_noise > 0 or not self.active:
            return 0
        if self._job_constants is None:
            self._job_constants = JobConstants.of(self)
        stretch = HeldStretch(self, self._job_constants)
        played = 0
        while played < slots and self.active:
            whole = stretch.window(slots - played)
            if whole == 0:
                break
            played += whole
        stretch.write_back()
        return played

    def _sharing(self, active: list[int]) -> set[int]:
        """The active jobs with a task on a server where another active job has one (none without interference)."""
        if self._colocation is None:
            return set()
        if self._tracks_colocation:
            # `_throughputs` has just brought co-location up to date with the active jobs' servers: its per-server
            # job sets say it in one pass over the servers, not one over every job's tasks
            return self._colocation.sharing()
        first_on: dict[int, int] = {}
        sharing: set[int] = set()
        for i in active:
            allocation = self.allocation[i]
            for node in (*allocation.worker_nodes, *allocation.ps_nodes):
                other = first_on.setdefault(node, i)
                if other != i:
                    sharing.update((i, other))
        return sharing

    # -- pieces of a slot -----------------------------------------------------------------------------------

    def _job_seconds(self, active: list[int], start: float, end: float) -> float:
        """Time jobs spent in the system in [start, end): the active ones until they finished, plus those that
        arrived during the slot and wait for the next boundary."""
        total = 0.0
        for i in active:
            finish = self.finish_s[i]
            total += (finish if finish is not None else end) - start
        upcoming = self.next_arrival
        while upcoming < len(self.specs) and self.specs[upcoming].arrival_s < end:
            total += end - max(self.specs[upcoming].arrival_s, start)
            upcoming += 1
        return total

    def _check_every_job_fits(self) -> None:
        """A job whose worker (or PS) fits on no node could never run: say so now, not after `max_slots`."""
        capacities = {node.capacity for node in self.cluster.nodes}  # a few kinds of servers
        fits: dict[Resources, bool] = {}
        for spec in self.specs:
            roles = [("worker", spec.worker_demand)]
            if spec.architecture is Architecture.PS:
                roles.append(("parameter server", spec.ps_demand))
            for role, demand in roles:
                if demand not in fits:
                    fits[demand] = any(demand.fits_in(capacity) for capacity in capacities)
                if not fits[demand]:
                    raise SimulationError(
                        f"{self.workload.name}: job {spec.job_id} can never run: its {role} needs "
                        f"gpu={demand.gpu:g} cpu={demand.cpu:g} mem_gb={demand.mem_gb:g}, more than any node offers"
                    )

    def _apply_changes(self, allocation: Allocation, start: float) -> list[int]:
        """Record each job's new tasks; a change pays the rescale pause. Returns the jobs whose servers changed."""
        moved: list[int] = []
        for i in self.active:
            new = allocation.get(self.specs[i].job_id)
            old = self.allocation[i]
            if new is old or (new.worker_nodes == old.worker_nodes and new.ps_nodes == old.ps_nodes):
                continue
            self._view_cache.pop(i, None)
            if new.same_placement(old):
                self.allocation[i] = new
                continue
            moved.append(i)
            self.allocation[i] = new
            if new.is_empty:
                continue
            was_running = not old.is_empty
            if was_running or self.first_start_s[i] is not None:
                self.num_rescales[i] += 1
            self.paused_until[i] = start + self.config.rescale.pause_s(self.rng, was_running)
        return moved

    def _throughputs(self, active: list[int], moved: list[int]) -> list[float]:
        """Throughput of each active job this slot: placement, interference and noise."""
        values = self._noiseless_throughputs(active, moved)
        if self.config.speed_noise > 0 and values:
            noise = 1.0 + self.config.speed_noise * self.rng.uniform(-1.0, 1.0, len(values))
            values = [v * float(e) for v, e in zip(values, noise, strict=True)]
        return values

    def _noiseless_throughputs(self, active: list[int], moved: list[int]) -> list[float]:
        """Throughput of each active job this slot before noise (`moved`: the jobs whose servers changed). A
        subclass may replace the speed function and interference with a model of them (`dl2.placement.world`)."""
        specs, allocation, speed = self.specs, self.allocation, self.speed
        if self.config.mode is Mode.COMPAT:
            values = [
                speed.placed_throughput(specs[i], allocation[i]) if allocation[i].worker_nodes else 0.0 for i in active
            ]
        else:
            values = [self._base_throughput(i) for i in active]
            colocation = self._colocation
            if colocation is not None:
                if moved or self._finished_since:
                    # only jobs whose servers changed, and those that left, change who shares a server
                    allocation_of, type_of = self.allocation, self._type_of
                    colocation.update(((i, allocation_of[i], type_of[i]) for i in moved), self._finished_since)
                    self._finished_since = []
                factors = colocation.factors
                values = [v / factors.get(i, 1.0) for v, i in zip(values, active, strict=True)]
        return values

    @property
    def _tracks_colocation(self) -> bool:
        """Whether `_throughputs` reads placement and interference as this class does (realistic mode, not replaced
        by a subclass), keeping co-location up to date with the active jobs' servers."""
        return (
            type(self)._noiseless_throughputs is Simulation._noiseless_throughputs
            and self.config.mode is not Mode.COMPAT
        )

    def _held_throughputs(self, active: list[int], base: np.ndarray) -> np.ndarray:
        """`_throughputs(active, [])` as an array in a held stretch (`dl2.sim.held`): speeds are noiseless and every
        job's placement-aware throughput is `base[i]` (its allocation does not change), so only co-location is
        brought up to date and the divisions are done at once; a subclass's or compat mode's are asked as they are."""
        if not self._tracks_colocation:
            return np.array(self._throughputs(active, []), dtype=float)
        rates = base[active]
        colocation = self._colocation
        if colocation is None:
            return rates
        if self._finished_since:
            colocation.update((), self._finished_since)
            self._finished_since = []
        factors = colocation.factors
        result: np.ndarray = rates / np.array([factors.get(i, 1.0) for i in active])
        return result

    def _base_throughput(self, i: int) -> float:
        """Placement-aware throughput, cached while the job keeps the same allocation object."""
        job_allocation = self.allocation[i]
        if not job_allocation.worker_nodes:
            return 0.0
        cached = self._throughput_cache.get(i)
        if cached is not None and cached[1] is job_allocation:
            return cached[0]
        value = self.speed.placed_throughput(self.specs[i], job_allocation)
        self._throughput_cache[i] = (value, job_allocation)
        return value

    def _validate(self, allocation: Allocation) -> None:
        """Reject unknown or inactive jobs, limits exceeded, bad node ids and over-full nodes."""
        active = self._active_ids()
        tasks_by_demand: dict[tuple[float, float, float], list[int]] = {}
        for job_id, job_allocation in allocation.jobs.items():
            i = active.get(job_id)
            if i is None:
                raise InvalidAllocationError(f"slot {self.slot}: job {job_id} is not active")
            spec = self.specs[i]
            workers, ps = job_allocation.worker_nodes, job_allocation.ps_nodes
            if len(workers) > spec.max_workers or len(ps) > spec.max_ps:
                raise InvalidAllocationError(
                    f"slot {self.slot}: job {job_id} gets {len(workers)} workers and {len(ps)} PS; "
                    f"its limits are {spec.max_workers} and {spec.max_ps}"
                )
            worker_demand, ps_demand = self._demands[i]
            if workers:
                tasks_by_demand.setdefault(worker_demand, []).extend(workers)
            if ps:
                tasks_by_demand.setdefault(ps_demand, []).extend(ps)
        num_nodes = len(self._capacity)
        usage = np.zeros((num_nodes, 3))
        for demand, nodes in tasks_by_demand.items():
            node_array = np.fromiter(nodes, dtype=np.int64, count=len(nodes))
            if node_array.min() < 0 or node_array.max() >= num_nodes:
                raise InvalidAllocationError(f"slot {self.slot}: a task is placed outside nodes 0..{num_nodes - 1}")
            usage += np.outer(np.bincount(node_array, minlength=num_nodes), demand)
        over = np.flatnonzero((usage > self._capacity_array + _EPS).any(axis=1))
        if over.size:
            node = int(over[0])
            used, capacity = usage[node], self._capacity[node]
            raise InvalidAllocationError(
                f"slot {self.slot}: node {node} over capacity: uses gpu={used[0]:g} cpu={used[1]:g} "
                f"mem_gb={used[2]:g} of gpu={capacity[0]:g} cpu={capacity[1]:g} mem_gb={capacity[2]:g}"
            )

    def _holds_already(self, allocation: Allocation) -> bool:
        """Is every job's part of `allocation` the very object the job already holds? Then it is part of the
        previous slot's checked allocation, so it is valid (limits do not change, and fewer jobs use less)."""
        index_of, held = self.index_of, self.allocation
        for job_id, job_allocation in allocation.jobs.items():
            i = index_of.get(job_id)
            if i is None or i >= self.next_arrival or held[i] is not job_allocation or self.finish_s[i] is not None:
                return False
        return True

    def _active_ids(self) -> dict[str, int]:
        return {self.specs[i].job_id: i for i in self.active}

    # -- results --------------------------------------------------------------------------------------------

    def total_jct_s(self) -> float:
        """Sum of the jobs' completion times so far: a job still running counts the time it has spent until now,
        one not yet arrived nothing (on a finished run, the sum of JCTs). Compares continuations of one run."""
        now = self.time_s
        return float(
            sum(
                (finish if finish is not None else max(now, spec.arrival_s)) - spec.arrival_s
                for finish, spec in zip(self.finish_s, self.specs, strict=True)
            )
        )

    def result(self, scheduler_name: str, wall_s: float = 0.0) -> SimResult:
        if not self.done:
            raise SimulationError("the run has not finished")
        records = []
        for i, spec in enumerate(self.specs):
            finish = self.finish_s[i]
            first = self.first_start_s[i]
            assert finish is not None and first is not None
            records.append(
                JobRecord(
                    spec.job_id,
                    spec.model,
                    spec.arrival_s,
                    first,
                    finish,
                    self.num_rescales[i],
                    self.gpu_seconds[i],
                    spec.worker_demand.gpu * spec.requested_workers,
                    self.isolated_s(i),
                )
            )
        return SimResult(
            self.workload.name,
            scheduler_name,
            self.config.mode.value,
            self.config.seed,
            self.slot_s,
            records,
            self.slot_start_s,
            self.allocated_gpu_fraction,
            len(self.slot_start_s),
            wall_s,
        )

    def isolated_s(self, i: int) -> float:
        """Job `i`'s whole run alone at its asked size, its tasks on one server: the denominator of its slowdown,
        and what a what-if run's estimate of the work left scales (`dl2.sim.what_if.remaining_jct_estimate_s`)."""
        spec = self.specs[i]
        num_ps = spec.requested_ps if spec.architecture is Architecture.PS else 0
        packed = JobAllocation((0,) * spec.requested_workers, (0,) * num_ps)
        speed = self._reference_speed  # the same reference on every cluster, whatever node 0's accelerator
        throughput = (
            speed.placed_throughput(spec, packed)
            if self.config.mode is Mode.REALISTIC
            else (speed.throughput(spec.model, num_ps, spec.requested_workers))
        )
        if throughput <= 0:
            return math.inf
        return self.true_epochs[i] * spec.samples_per_epoch / throughput


def simulate(
    workload: Workload,
    scheduler: Scheduler,
    config: SimConfig,
    speed: SpeedModel,
    interference: InterferenceModel | None = None,
    on_slot: Callable[[Simulation], None] | None = None,
) -> SimResult:
    """Run `scheduler` on `workload` to the end."""
    return drive(Simulation(workload, config, speed, interference), scheduler, on_slot)


def drive(
    simulation: Simulation, scheduler: Scheduler, on_slot: Callable[[Simulation], None] | None = None
) -> SimResult:
    """Run `scheduler` on a prepared `simulation` (the simulator or a subclass of it) to the end."""
    started = time.perf_counter()
    scheduler.reset()
    with young_collections_only():
        while not simulation.done:
            view = simulation.begin_slot()
            simulation.apply(scheduler.schedule(view))
            if on_slot is not None:
                on_slot(simulation)
            if len(simulation.slot_start_s) % YOUNG_COLLECTION_SLOTS == 0:
                gc.collect(1)
    return simulation.result(scheduler.name, time.perf_counter() - started)


YOUNG_COLLECTION_SLOTS = 64
"""While a run holds the collector off, the young generations are collected every this many slots."""


@contextmanager
def young_collections_only() -> Iterator[None]:
    """Hold Python's automatic garbage collector off for the block (the caller collects young generations).

    A run on a large cluster keeps millions of objects alive (jobs, views, allocations) while each slot's
    scheduling allocates and frees large transient structures (request heaps, placement heaps). Objects of
    those survive long enough to be promoted, so the automatic collector keeps triggering full collections
    that scan every live object, and the cost per slot grows with the run's size (`docs/results.md`). Reference
    counting frees all of it anyway: the simulator and the heuristics create no reference cycles (checked by
    `tests/unit/schedulers/test_scheduler_invariants.py::test_runs_create_no_reference_cycles`), and collecting the
    young generations now and then catches any that a custom scheduler creates.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
