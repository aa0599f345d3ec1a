"""One slot's allocation, decided one task at a time (DL2 §4.1).

The active jobs are shown in windows of J (arrival order; DL2 §6.4 schedules more than J jobs in batches of J).
For the jobs of the current window an action adds a worker, a PS or both to one job; a stop action closes the
window and moves to the next; after the last window the slot's allocation is final. Action `3 c + r` is role
`r` (0 worker, 1 PS, 2 bundle) for the job in column `c`; action `3 J` is stop.

Resources follow the simulator's mode. In compatibility mode each task goes to the least-loaded server, as
in the authors' environment, and an action is possible only if that server can host it. In realistic mode an
action is possible if the cluster's free capacity in total can host it, and the finished targets are placed
by a placer, sticky across slots (`dl2.schedulers.placement`). The teachers, the environment and
`LearnedScheduler` all drive this same object.

`packed=True` (compatibility mode only) separates what DL2 decides from the order of requests: an action is
possible if the cluster's free capacity in total can host it, and when the slot's allocation is final its tasks
are asked of the authors' least-loaded placement in the packed order (`dl2.schedulers.packing`), the first
refusal ending the slot as in their mechanism. Asked as decided, a policy must also learn an order that this
placement packs, or it strands CPU (`dl2.schedulers.packing` says how).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from dl2.core import Allocation, Architecture, ClusterView, JobAllocation
from dl2.schedulers.least_loaded import LeastLoadedNodes
from dl2.schedulers.packing import place_packed
from dl2.schedulers.placement import Placer, place_sticky
from dl2.schedulers.requests import Request, Role, RoleDemands, role_demands

ROLES_PER_JOB = 3
_EPS = 1e-9


def action_count(window: int) -> int:
    return ROLES_PER_JOB * window + 1


def stop_action(window: int) -> int:
    return ROLES_PER_JOB * window


def encode_action(column: int, role: Role) -> int:
    return ROLES_PER_JOB * column + int(role)


class SlotDecision:
    """The state of one slot's task-by-task allocation."""

    _serials = itertools.count()

    def __init__(
        self,
        view: ClusterView,
        window: int,
        compat: bool,
        placer: Placer | None = None,
        demands: Sequence[RoleDemands] | None = None,
        work_conserving: bool = False,
        packed: bool = False,
    ) -> None:
        """`work_conserving`: stop is not allowed while the slot has granted nothing and something fits (an
        empty slot never shortens any job; a policy that stops there could starve every job forever). `packed`:
        see the module's docstring."""
        if not compat and placer is None:
            raise ValueError("realistic mode needs a placer")
        if packed and not compat:
            raise ValueError("packed requests are a compatibility-mode option (realistic mode places by a placer)")
        self.serial = next(SlotDecision._serials)
        """Unique per decision object (unlike `id()`, never reused), so observers can tell decisions apart."""
        self.view = view
        self.jobs = view.jobs
        self.window = window
        self.compat = compat
        self.packed = packed
        self.places_each_task = compat and not packed
        """Whether each granted task goes to a server at once (the authors' environment)."""
        self.placer = placer
        n = len(self.jobs)
        role_table = list(demands) if demands is not None else [role_demands(job.spec) for job in self.jobs]
        self.demands = role_table
        # per job: demand of each role (n, 3 roles, 3 resources); caps; whether it has PS
        self.demand_array = np.array(role_table, dtype=float).reshape(n, 3, 3)
        self.is_ps = np.array([job.spec.architecture is Architecture.PS for job in self.jobs], dtype=bool)
        self.caps = np.array([(job.spec.max_workers, job.spec.max_ps) for job in self.jobs], dtype=np.int64).reshape(
            n, 2
        )
        self.counts = np.zeros((n, 2), dtype=np.int64)
        self.caps_list: list[list[int]] = self.caps.tolist()
        # per job, whether a worker, a PS and a bundle are within caps; updated row by row as tasks are granted
        self._room = np.empty((n, 3), dtype=bool)
        self._room[:, 0] = self.caps[:, 0] > 0
        self._room[:, 1] = self.is_ps & (self.caps[:, 1] > 0)
        self._room[:, 2] = self._room[:, 0] & self._room[:, 1]
        self.total = np.array(view.cluster.total_capacity.as_tuple(), dtype=float)
        self.free_total = self.total.copy()
        """The cluster's free capacity in total (what is left to grant)."""
        if self.places_each_task:
            self.nodes = LeastLoadedNodes(view.cluster)
            self.worker_nodes: list[list[int]] = [[] for _ in self.jobs]
            self.ps_nodes: list[list[int]] = [[] for _ in self.jobs]
        self.batch = 0
        self.num_batches = max(1, -(-n // window))
        self.done = False
        self.num_actions = 0
        self.work_conserving = work_conserving
        self.granted = 0
        """Tasks granted in this slot so far."""
        self.version = 0
        """Counts changes of state (grants and closed windows); observers use it to update incrementally."""
        self.last_granted = -1
        """Rank of the job that received the latest task (-1: none yet in this window)."""
        self._possible_cache: tuple[int, np.ndarray] | None = None
        self._enter_window()
        self._skip_impossible_windows()

    # -- the current window -------------------------------------------------------------------------------------

    @property
    def first_rank(self) -> int:
        return self.batch * self.window

    def column_ranks(self) -> range:
        """Ranks (positions in `view.jobs`) of the jobs in the current window."""
        return range(self.first_rank, min(self.first_rank + self.window, len(self.jobs)))

    def next_free(self) -> np.ndarray:
        """What the next task can use: the least-loaded server's free resources (compatibility mode, asked as
        decided) or the cluster's free capacity in total (realistic mode, packed requests)."""
        if self.places_each_task:
            nodes = self.nodes
            node = nodes.heap[0] % nodes.num_nodes
            return np.array((nodes.free_gpu[node], nodes.free_cpu[node], nodes.free_mem[node]))
        return self.free_total

    def _enter_window(self) -> None:
        ranks = self.column_ranks()
        self._window_slice = slice(ranks.start, ranks.stop)
        self._window_demands = self.demand_array[self._window_slice]
        self._window_fits: dict[tuple[float, float, float], np.ndarray] = {}
        """Which (job, role) demands fit, per free-resource vector clipped to the window's largest demand (what
        is free beyond it changes nothing): the least-loaded server's meets a handful of vectors in a slot, the
        cluster's total one per grant until it runs low."""
        largest = self._window_demands.max(axis=(0, 1)) if len(self._window_demands) else np.zeros(3)
        self._window_largest: tuple[float, float, float] = tuple(largest.tolist())

    def _window_possible(self) -> np.ndarray:
        """(jobs in window, 3 roles) booleans: within caps and fitting what is free (cached per state)."""
        cached = self._possible_cache
        if cached is not None and cached[0] == self.version:
            return cached[1]
        if self.places_each_task:
            nodes = self.nodes
            node = nodes.heap[0] % nodes.num_nodes
            gpu, cpu, mem = nodes.free_gpu[node], nodes.free_cpu[node], nodes.free_mem[node]
        else:
            gpu, cpu, mem = self.free_total.tolist()
        largest_gpu, largest_cpu, largest_mem = self._window_largest
        free = (min(gpu, largest_gpu), min(cpu, largest_cpu), min(mem, largest_mem))
        fits = self._window_fits.get(free)
        if fits is None:
            fits = self._window_fits[free] = np.all(self._window_demands <= np.array(free) + _EPS, axis=2)
        possible: np.ndarray = fits & self._room[self._window_slice]
        self._possible_cache = (self.version, possible)
        return possible

    def mask(self) -> np.ndarray:
        """Which actions are possible now (stop always is)."""
        mask = np.zeros(action_count(self.window), dtype=np.int8)
        mask[-1] = 1
        if not self.done:
            possible = self._window_possible()
            mask[: possible.size] = possible.ravel()
            if self.work_conserving and self.granted == 0 and possible.any():
                mask[-1] = 0
        return mask

    def _possible(self, rank: int, role: Role) -> bool:
        first = self.first_rank
        if first <= rank < first + self.window:
            return bool(self._window_possible()[rank - first, role])
        workers, ps = self.counts[rank]
        max_workers, max_ps = self.caps[rank]
        if role is Role.WORKER:
            allowed = workers < max_workers
        elif role is Role.PS:
            allowed = bool(self.is_ps[rank]) and ps < max_ps
        else:  # a bundle is a worker plus a PS (all-reduce jobs have no bundle)
            allowed = bool(self.is_ps[rank]) and workers < max_workers and ps < max_ps
        return bool(allowed) and bool(np.all(self.demand_array[rank, role] <= self.next_free() + _EPS))

    def _skip_impossible_windows(self) -> None:
        """Close windows in which nothing is possible (no decision is needed there)."""
        while not self.done and not self._window_possible().any():
            self._close_window()

    def _close_window(self) -> None:
        self.version += 1
        self.last_granted = -1
        self.batch += 1
        if self.batch >= self.num_batches:
            self.done = True
        else:
            self._enter_window()

    # -- acting --------------------------------------------------------------------------------------------------

    def step(self, action: int) -> bool:
        """Apply one action; returns whether a task was granted. Stop (or an impossible action) closes the window."""
        if self.done:
            raise RuntimeError("the slot's allocation is already final")
        self.num_actions += 1
        if action != stop_action(self.window):
            column, role_index = divmod(int(action), ROLES_PER_JOB)
            rank = self.first_rank + column
            if 0 <= column < self.window and rank < len(self.jobs):
                role = Role(role_index)
                if self._possible(rank, role):
                    self._grant(rank, role)
                    self._skip_impossible_windows()
                    return True
        self._close_window()
        self._skip_impossible_windows()
        return False

    def request(self, rank: int, role: Role) -> bool:
        """Grant a task to the job at `rank` if possible, whichever window it is in (teachers use this)."""
        if self.done or not self._possible(rank, role):
            return False
        self._grant(rank, role)
        return True

    def _grant(self, rank: int, role: Role) -> None:
        adds_worker = role is not Role.PS
        adds_ps = role is Role.PS or (role is Role.BUNDLE and bool(self.is_ps[rank]))
        if self.places_each_task:
            node = self.nodes.place(self.demands[rank][role])
            if adds_worker:
                self.worker_nodes[rank].append(node)
            if adds_ps:
                self.ps_nodes[rank].append(node)
        self.free_total = self.free_total - self.demand_array[rank, role]
        count = self.counts[rank]
        count[0] += adds_worker
        count[1] += adds_ps
        workers, ps = count.tolist()
        max_workers, max_ps = self.caps_list[rank]
        worker_room = workers < max_workers
        ps_room = ps < max_ps and bool(self.is_ps[rank])
        self._room[rank] = (worker_room, ps_room, worker_room and ps_room)
        self.granted += 1
        self.version += 1
        self.last_granted = rank

    def record_window(self, actions: int, granted: int) -> None:
        """Close the current window after compiled code (`dl2.rl.compiled_slot`) took `actions` on it, granting
        `granted` tasks by updating `counts`, `room` and `free_total` in place as `step` would."""
        self.num_actions += actions
        self.granted += granted
        self.version += granted
        self._close_window()
        self._skip_impossible_windows()

    @property
    def room(self) -> np.ndarray:
        """(jobs, 3 roles) booleans: whether each role is within the job's caps (updated as tasks are granted)."""
        return self._room

    def finish(self) -> None:
        """Close every remaining window."""
        self.done = True

    def allocation(self) -> Allocation:
        """The slot's final allocation (a PS job without a worker or without a PS gets nothing)."""
        if self.packed:
            self._place_packed()
        if self.compat:
            return Allocation(
                {
                    job.spec.job_id: JobAllocation(tuple(self.worker_nodes[rank]), tuple(self.ps_nodes[rank]))
                    for rank, job in enumerate(self.jobs)
                    if self.worker_nodes[rank] or self.ps_nodes[rank]
                }
            )
        assert self.placer is not None
        return place_sticky(self.view, [(w, p) for w, p in self.counts.tolist()], self.placer)

    def _place_packed(self) -> None:
        """Ask the authors' placement for the slot's tasks in the packed order; the first refusal ends the slot (with
        the authors' units every allocation that fits the cluster in total is placed:
        `tests/unit/env/test_packing.py`)."""
        tasks: list[Request] = []
        for rank, (workers, ps) in enumerate(self.counts.tolist()):
            tasks += [(rank, Role.WORKER)] * workers + [(rank, Role.PS)] * ps
        self.worker_nodes = [[] for _ in self.jobs]
        self.ps_nodes = [[] for _ in self.jobs]
        for (rank, role), node in place_packed(self.view.cluster, tasks, self.demands):
            (self.worker_nodes if role is Role.WORKER else self.ps_nodes)[rank].append(node)
