"""Slots in which every job keeps what it holds, stepped in NumPy (`Simulation.advance_held`).

A what-if run's continuation (`dl2.rl.lookahead`) plays most of its slots with the base deciding rarely: in between,
every job keeps its tasks. Such a stretch is played window by window, a window ending after the slot in which a job
that shares a server finishes (its neighbours' speeds change from the next slot on); at a thousand active jobs
nearly every slot ends one, so a stretch is hundreds of one-slot windows. `HeldStretch` takes the jobs' state out of
the simulation's lists into arrays once per stretch, plays the windows on the arrays and writes the state back once.
Each value is computed by the same IEEE operations in the same order as stepping each window one job at a time in
Python, element by element (a sum over jobs with `cumsum`, which adds in order), so the run is bit for bit what
that gives (the reference in `tests/unit/sim/test_held.py`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from dl2.sim.simulator import Simulation


class JobConstants(NamedTuple):
    """Per job (by index), what a held stretch reads as arrays; fixed for a run."""

    samples_per_epoch: np.ndarray
    true_epochs: np.ndarray
    worker_gpu: np.ndarray
    units_per_worker: np.ndarray
    """GPUs of a worker (CPUs on a cluster without GPUs): what `allocated_gpu_fraction` counts."""
    ps_cpu: np.ndarray

    @classmethod
    def of(cls, simulation: Simulation) -> JobConstants:
        specs, gpu_based = simulation.specs, simulation.cluster.total_capacity.gpu > 0
        return cls(
            np.array([spec.samples_per_epoch for spec in specs], dtype=float),
            np.array(simulation.true_epochs, dtype=float),
            np.array([spec.worker_demand.gpu for spec in specs], dtype=float),
            np.array([spec.worker_demand.gpu if gpu_based else spec.worker_demand.cpu for spec in specs], dtype=float),
            np.array([spec.ps_demand.cpu for spec in specs], dtype=float),
        )


class HeldStretch:
    """The state of a simulation's jobs as arrays while every job keeps what it holds (its allocations, so its
    workers, units held and paused-until times, do not change), played window by window, then written back."""

    def __init__(self, simulation: Simulation, constants: JobConstants) -> None:
        self.simulation = simulation
        self.constants = constants
        self.progress = np.array(simulation.progress, dtype=float)
        self.run_time_s = np.array(simulation.run_time_s, dtype=float)
        self.gpu_seconds = np.array(simulation.gpu_seconds, dtype=float)
        self.last_throughput = np.array(simulation.last_throughput, dtype=float)
        self.paused_until = np.array(simulation.paused_until, dtype=float)
        self.started = np.array([start is not None for start in simulation.first_start_s], dtype=bool)
        self.stale = np.zeros(len(simulation.specs), dtype=bool)
        """Jobs whose cached view a window made stale (dropped on `write_back`)."""
        active = simulation.active
        allocation = simulation.allocation
        self.base = np.zeros(len(simulation.specs))
        """Each active job's placement-aware throughput (`Simulation._base_throughput`, fixed in a held stretch)."""
        self.base[active] = [simulation._base_throughput(i) for i in active]
        self.workers = np.zeros(len(simulation.specs))
        self.workers[active] = [allocation[i].num_workers for i in active]
        self.units = np.zeros(len(simulation.specs))
        """What each active job holds, as `allocated_gpu_fraction` counts it."""
        self.units[active] = constants.units_per_worker[active] * self.workers[active]
        if not simulation._gpu_based:
            self.units[active] += constants.ps_cpu[active] * [allocation[i].num_ps for i in active]

    def window(self, slots: int) -> int:
        """Runs up to `slots` slots, stopping after the slot in which a job that shares a server finishes (the
        others' interference changes from the next one) and before a slot in which nothing would run; returns
        the slots run (0: none)."""
        simulation = self.simulation
        start, slot_s = simulation.time_s, simulation.slot_s
        active = simulation.active
        every = np.array(active)
        rates = simulation._held_throughputs(active, self.base)
        running = rates > 0.0
        if not running.any():
            return 0  # the window's last slot must see a job run
        job, rate = every[running], rates[running]
        constants = self.constants
        samples = constants.samples_per_epoch[job]
        run_from = np.maximum(start, self.paused_until[job])
        finish = run_from + (constants.true_epochs[job] - self.progress[job]) * samples / rate
        whole = self._window_slots(min(slots, simulation.config.max_slots - simulation.slot), job, run_from, finish)
        if whole <= 0:
            return 0
        end = start + whole * slot_s
        in_window = run_from < end
        ends = in_window & (finish < end)
        goes_on = in_window & ~ends
        busy = np.where(ends, finish - run_from, end - run_from)[in_window]
        ran, going, ending = job[in_window], job[goes_on], job[ends]
        self.progress[going] += rate[goes_on] / samples[goes_on] * (end - run_from[goes_on])
        self.progress[ending] = constants.true_epochs[ending]
        self.run_time_s[ran] += busy
        self.gpu_seconds[ran] += busy * constants.worker_gpu[ran] * self.workers[ran]
        first = simulation.first_start_s
        starts = ~self.started[ran]
        for i, begins in zip(ran[starts].tolist(), run_from[in_window][starts].tolist(), strict=True):
            first[i] = start + ((begins - start) // slot_s) * slot_s  # the start of the first slot it runs in
        self.started[ran] = True
        finished = ending.tolist()
        for i, at in zip(finished, finish[ends].tolist(), strict=True):
            simulation.finish_s[i] = at
        self.stale[every[running | (self.last_throughput[every] != rates)]] = True
        self.last_throughput[every] = rates
        self._count_slots(every, list(zip(finish[ends].tolist(), self.units[ending].tolist(), strict=True)), whole)
        if finished:
            simulation.num_finished += len(finished)
            simulation.active = [i for i in active if simulation.finish_s[i] is None]
            simulation._finished_since.extend(finished)
        simulation._idle_slots = 0
        simulation.slot += whole
        return whole

    def _window_slots(self, whole: int, job: np.ndarray, run_from: np.ndarray, finish: np.ndarray) -> int:
        """The slots a window runs, at most `whole`, for the running jobs `job`: 0 where its first slot would see
        none of them run."""
        simulation = self.simulation
        start, slot_s = simulation.time_s, simulation.slot_s
        sharing = simulation._sharing(simulation.active)
        if sharing:
            shares = np.zeros(len(simulation.specs), dtype=bool)
            shares[list(sharing)] = True
            shared = shares[job]
            if shared.any():  # its end changes the others' speeds: the window ends with the slot it finishes in
                whole = min(whole, math.floor(float(((finish[shared] - start) / slot_s).min())) + 1)
        # the window's last slot must see a job run: past the last end (or before the first start) nothing does
        last_busy = math.ceil(float(((finish - start) / slot_s).max()))
        first_busy = math.floor(float(((run_from - start) / slot_s).min()))
        whole = min(whole, last_busy)
        return 0 if whole <= 0 or first_busy > 0 else whole

    def _count_slots(self, every: np.ndarray, leaving: list[tuple[float, float]], whole: int) -> None:
        """Records each of the window's slots as `apply` does: its start and the share of the cluster held by the
        jobs active as it starts (`every`, less those of `leaving`, (finish, units), that finished before)."""
        simulation = self.simulation
        start, slot_s, total = simulation.time_s, simulation.slot_s, simulation._total_units
        held_units = float(np.cumsum(self.units[every])[-1])  # in the jobs' order, as `apply` adds them
        leaving.sort()
        gone = 0
        for k in range(whole):
            slot_start = start + k * slot_s
            while gone < len(leaving) and leaving[gone][0] <= slot_start:
                held_units -= leaving[gone][1]
                gone += 1
            simulation.slot_start_s.append(slot_start)
            simulation.allocated_gpu_fraction.append(held_units / total if total else 0.0)

    def write_back(self) -> None:
        """The jobs' state back into the simulation's lists, and their stale views dropped."""
        simulation = self.simulation
        simulation.progress[:] = self.progress.tolist()
        simulation.run_time_s[:] = self.run_time_s.tolist()
        simulation.gpu_seconds[:] = self.gpu_seconds.tolist()
        simulation.last_throughput[:] = self.last_throughput.tolist()
        for i in np.flatnonzero(self.stale).tolist():
            simulation._view_cache.pop(i, None)
