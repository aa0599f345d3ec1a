"""What the policy sees (DL2 §4.1), normalised to [0, 1].

Per job of the current window (zero-padded), in columns:
  job type one-hot (8), all-reduce flag, time since arrival (log-scaled slots), remaining fraction of declared
  epochs, remaining declared epochs (log-scaled), workers and PS held in the previous slot (/ cap), presence
  flag, then what changes with every action: workers and PS granted so far this slot (/ cap) and the job's
  dominant share of the cluster.
Then cluster-wide: free GPU and CPU fractions (what is left to grant), the same two for where the next task
would go (compatibility mode: the least-loaded server; realistic mode or packed requests: the cluster), jobs in
the system and jobs outside the window (/ 4 J, capped), and the window index.

A window's columns are built once; an action only changes three numbers, so observing is cheap. DL2's code fed
raw, unnormalised values with the type as an integer; `raw_dl2=True` reproduces their six rows (type id, slots
since arrival, remaining fraction, dominant share, workers, PS) for comparison.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import numpy as np
from annotated_types import Ge, Le

from dl2.config import config
from dl2.env.decision import SlotDecision
from dl2.workload.catalogue import CATALOGUE, MODEL_NAMES

NUM_TYPES = len(MODEL_NAMES)
STATIC_FEATURES = NUM_TYPES + 7
DYNAMIC_FEATURES = 3
JOB_FEATURES = STATIC_FEATURES + DYNAMIC_FEATURES
GLOBAL_FEATURES = 7
RAW_JOB_FEATURES = 6
_LOG_SLOTS = math.log1p(1000.0)  # a job 1,000 slots old reads 1.0
_LOG_EPOCHS = math.log1p(1e6)


@dataclass(frozen=True, slots=True)
class InputShape:
    """How an observation vector is laid out: `window` rows of `job_features`, then `global_features`."""

    window: int
    job_features: int
    global_features: int

    @property
    def size(self) -> int:
        return self.window * self.job_features + self.global_features


@config
class ObservationConfig:
    """Shape of the policy's input."""

    window: Annotated[int, Ge(1), Le(1_000)] = 40
    """J: jobs the policy sees at once (DL2 uses 20 in its experiments, 40 in its default parameters)."""
    raw_dl2: bool = False
    """Feed the authors' six raw rows per job instead of normalised features (for comparison only)."""
    packed: bool = False
    """Compatibility mode: actions are checked against the cluster's free capacity in total and the slot's tasks
    are then asked in the packed order (`SlotDecision`'s `packed`); False: each action is a request to the
    least-loaded server as it is decided (the authors' environment). It changes what an action means and what
    the 'next task' features show, so it belongs to the policy's configuration."""

    @property
    def shape(self) -> InputShape:
        if self.raw_dl2:
            return InputShape(self.window, RAW_JOB_FEATURES, 0)
        return InputShape(self.window, JOB_FEATURES, GLOBAL_FEATURES)

    @property
    def size(self) -> int:
        return self.shape.size


class Observer:
    """Builds observations of a `SlotDecision` incrementally: a window's columns are filled once, and each later
    action only rewrites the three numbers of the job that received a task and the cluster-wide tail."""

    def __init__(self, config: ObservationConfig) -> None:
        self.config = config
        self._window_key: tuple[int, int] | None = None
        self._version = -1
        window = config.window
        # one buffer: the job rows then the cluster-wide tail, so an observation is a single copy
        self._buffer = np.zeros(window * JOB_FEATURES + GLOBAL_FEATURES, dtype=np.float32)
        self._jobs = self._buffer[: window * JOB_FEATURES].reshape(window, JOB_FEATURES)
        self._tail = self._buffer[window * JOB_FEATURES :]
        self._inverse_total = (0.0, 0.0, 0.0)

    def __call__(self, decision: SlotDecision) -> np.ndarray:
        """The observation of the decision's current state (a fresh array)."""
        if self.config.raw_dl2:
            return _observe_raw(decision, self.config.window)
        key = (decision.serial, decision.batch)
        if key != self._window_key:
            self._window_key = key
            self._fill_window(decision)
        elif decision.version != self._version and decision.last_granted >= 0:
            self._update_job(decision, decision.last_granted)
        self._version = decision.version
        self._fill_tail(decision)
        return self._buffer.copy()

    def _fill_window(self, decision: SlotDecision) -> None:
        view = decision.view
        self._inverse_total = inverse_total(decision.total)
        jobs = self._jobs
        jobs.fill(0.0)
        for column, rank in enumerate(decision.column_ranks()):
            job = decision.jobs[rank]
            spec = job.spec
            row = jobs[column]
            row[CATALOGUE[spec.model].type_index] = 1.0
            row[NUM_TYPES] = float(not decision.is_ps[rank])
            row[NUM_TYPES + 1] = min(math.log1p(max(view.time_s - spec.arrival_s, 0.0) / view.slot_s) / _LOG_SLOTS, 1.0)
            row[NUM_TYPES + 2] = job.remaining_fraction
            row[NUM_TYPES + 3] = min(math.log1p(job.remaining_epochs) / _LOG_EPOCHS, 1.0)
            row[NUM_TYPES + 4] = min(job.allocation.num_workers / spec.max_workers, 1.0)
            row[NUM_TYPES + 5] = min(job.allocation.num_ps / spec.max_ps, 1.0) if spec.max_ps else 0.0
            row[NUM_TYPES + 6] = 1.0
            self._update_job(decision, rank)

    def _update_job(self, decision: SlotDecision, rank: int) -> None:
        column = rank - decision.first_rank
        if not 0 <= column < self.config.window:
            return
        workers, ps = decision.counts[rank].tolist()
        max_workers, max_ps = decision.caps_list[rank]
        (wg, wc, wm), (pg, pc, pm) = decision.demands[rank][:2]
        ig, ic, im = self._inverse_total
        share = max((workers * wg + ps * pg) * ig, (workers * wc + ps * pc) * ic, (workers * wm + ps * pm) * im)
        row = self._jobs[column]
        row[STATIC_FEATURES : STATIC_FEATURES + 3] = (
            workers / max_workers,
            ps / max_ps if max_ps else 0.0,
            min(share, 1.0),
        )

    def _fill_tail(self, decision: SlotDecision) -> None:
        total_gpu, total_cpu, _ = decision.total.tolist()
        free_gpu, free_cpu, _ = decision.free_total.tolist()
        if decision.places_each_task:
            nodes = decision.nodes
            node = nodes.heap[0] % nodes.num_nodes
            capacity = decision.view.cluster.nodes[node].capacity
            next_gpu = nodes.free_gpu[node] / capacity.gpu if capacity.gpu else 0.0
            next_cpu = nodes.free_cpu[node] / capacity.cpu if capacity.cpu else 0.0
        else:
            next_gpu = free_gpu / total_gpu if total_gpu else 0.0
            next_cpu = free_cpu / total_cpu if total_cpu else 0.0
        window = self.config.window
        num_jobs = len(decision.jobs)
        self._tail[:] = (
            free_gpu / total_gpu if total_gpu else 0.0,
            free_cpu / total_cpu if total_cpu else 0.0,
            next_gpu,
            next_cpu,
            min(num_jobs / (4 * window), 1.0),
            min(max(num_jobs - (decision.first_rank + window), 0) / (4 * window), 1.0),
            min(decision.batch / 10.0, 1.0),
        )


def inverse_total(total: np.ndarray) -> tuple[float, float, float]:
    """1 / the cluster's capacity per resource (0 where it has none): what a job's dominant share is scaled by."""
    gpu, cpu, mem = total.tolist()
    return (1.0 / gpu if gpu > 0 else 0.0, 1.0 / cpu if cpu > 0 else 0.0, 1.0 / mem if mem > 0 else 0.0)


def _observe_raw(decision: SlotDecision, window: int) -> np.ndarray:
    """The authors' state: per job, 6 raw values (type 1-8, slots since arrival, remaining fraction, dominant
    share, workers, PS); laid out job by job (theirs was feature by feature; same numbers)."""
    view = decision.view
    total = view.cluster.total_capacity.as_tuple()
    state = np.zeros((window, RAW_JOB_FEATURES), dtype=np.float32)
    for column, rank in enumerate(decision.column_ranks()):
        job = decision.jobs[rank]
        workers, ps = (int(c) for c in decision.counts[rank])
        worker_demand, ps_demand = decision.demands[rank][0], decision.demands[rank][1]
        state[column, 0] = CATALOGUE[job.spec.model].type_index + 1
        state[column, 1] = (view.time_s - job.spec.arrival_s) / view.slot_s
        state[column, 2] = job.remaining_fraction
        state[column, 3] = max(
            (workers * w + ps * p) / t for w, p, t in zip(worker_demand, ps_demand, total, strict=True) if t > 0
        )
        state[column, 4] = workers
        state[column, 5] = ps
    return state.ravel()
