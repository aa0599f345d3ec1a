"""Supervised warm-up data (DL2 §4.2): (observation, action mask, action) triples from a teacher's decisions.

A teacher runs in the simulator and its decisions are replayed, task by task, through the same `SlotDecision`
the policy will drive, so the recorded observations are exactly what the policy sees. A heuristic built on
request streams (DRF, FIFO, SRTF, Optimus) is replayed request by request within each window of J jobs, and
its end of window is recorded as stop (DL2's code never recorded stop, so its policy never learned to stop).
Any other scheduler (Tiresias, a decision log) is replayed from its targets: per job, bundles first, then the
remaining workers or PS, then stop. The slot then runs with the allocation the replay produced.

Imitating only the teacher's own trajectories leaves the student lost in states the teacher never visits (a
student that once skips a worker may go on adding PS forever); `record_on_policy` adds DAgger rounds, in which
the student drives and the teacher labels.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Protocol, runtime_checkable

import numpy as np

from dl2.core import ClusterView, Scheduler, Workload
from dl2.env.decision import SlotDecision, encode_action, stop_action
from dl2.env.observation import ObservationConfig, Observer
from dl2.schedulers.base import HeuristicScheduler
from dl2.schedulers.placement import Placer
from dl2.schedulers.requests import Role
from dl2.sim.config import Mode, SimConfig
from dl2.sim.run import World
from dl2.sim.simulator import Simulation


@dataclass(slots=True)
class Demonstrations:
    """Arrays of equal length: observations (n, d) float32, masks (n, a) int8, actions (n,) int64."""

    observations: np.ndarray
    masks: np.ndarray
    actions: np.ndarray

    def __len__(self) -> int:
        return len(self.actions)

    def empty(self) -> Demonstrations:
        """No demonstrations, with this one's shapes."""
        return Demonstrations(self.observations[:0], self.masks[:0], self.actions[:0])

    @classmethod
    def concatenate(cls, parts: Iterable[Demonstrations]) -> Demonstrations:
        parts = list(parts)
        return cls(
            np.concatenate([p.observations for p in parts]),
            np.concatenate([p.masks for p in parts]),
            np.concatenate([p.actions for p in parts]),
        )


@dataclass(slots=True)
class _Recorder:
    """Collects (observation, mask, action) triples one decision at a time."""

    observation: ObservationConfig
    observations: list[np.ndarray] = field(default_factory=list)
    masks: list[np.ndarray] = field(default_factory=list)
    actions: list[int] = field(default_factory=list)

    def add(self, state: np.ndarray, mask: np.ndarray, action: int) -> None:
        self.observations.append(state)
        self.masks.append(mask)
        self.actions.append(action)

    def demonstrations(self) -> Demonstrations:
        return Demonstrations(
            np.array(self.observations, dtype=np.float32).reshape(-1, self.observation.size),
            np.array(self.masks, dtype=np.int8).reshape(-1, 3 * self.observation.window + 1),
            np.array(self.actions, dtype=np.int64),
        )


def _targets(teacher: Scheduler, view: ClusterView) -> dict[str, tuple[int, int]]:
    """Per job, the (workers, PS) of the teacher's allocation for the slot."""
    allocation = teacher.schedule(view)
    return {job_id: (a.num_workers, a.num_ps) for job_id, a in allocation.jobs.items()}


@runtime_checkable
class SlotTeacher(Protocol):
    """A teacher that acts, slot by slot, as one of several heuristics, chosen from the run's state (which it may
    simulate ahead from: `dl2.rl.rollout_teacher`)."""

    name: str

    def reset(self) -> None: ...

    def heuristic_for(self, simulation: Simulation, view: ClusterView) -> HeuristicScheduler: ...


def _window_view(view: ClusterView, decision: SlotDecision) -> ClusterView:
    ranks = decision.column_ranks()
    return ClusterView(
        view.time_s, view.slot, view.slot_s, view.cluster, view.jobs[ranks.start : ranks.stop], view.previous
    )


def replay_stream(decision: SlotDecision, teacher: HeuristicScheduler) -> Iterator[int]:
    """Actions of a request-stream heuristic, window by window; the caller applies each with `decision.step`."""
    view = decision.view
    while not decision.done:
        batch = decision.batch
        window = _window_view(view, decision)
        first = decision.first_rank
        counts = decision.counts[first : first + len(window.jobs)]  # a view: the stream sees grants live
        teacher.decision_key(window)  # some policies prepare their order there
        stream = teacher.requests(window, counts)  # type: ignore[arg-type]
        try:
            column, role = next(stream)
            while decision.batch == batch and not decision.done:
                action = encode_action(column, role)
                granted = bool(decision.mask()[action])
                if granted:
                    yield action
                column, role = stream.send(granted)
        except StopIteration:
            pass
        finally:
            stream.close()
        if decision.batch == batch and not decision.done:
            yield stop_action(decision.window)


def replay_targets(decision: SlotDecision, targets: dict[str, tuple[int, int]]) -> Iterator[int]:
    """Actions reaching per-job (workers, PS) targets: bundles first, then workers, then PS; stop per window."""
    view = decision.view
    while not decision.done:
        batch = decision.batch
        for column, rank in enumerate(decision.column_ranks()):
            want_workers, want_ps = targets.get(view.jobs[rank].spec.job_id, (0, 0))
            while decision.batch == batch and not decision.done:
                workers, ps = (int(c) for c in decision.counts[rank])
                if workers < want_workers and ps < want_ps:
                    role = Role.BUNDLE
                elif workers < want_workers:
                    role = Role.WORKER
                elif ps < want_ps:
                    role = Role.PS
                else:
                    break
                action = encode_action(column, role)
                if not decision.mask()[action]:
                    break
                yield action
            if decision.batch != batch or decision.done:
                break
        if decision.batch == batch and not decision.done:
            yield stop_action(decision.window)


def record(
    workload: Workload,
    teacher: Scheduler | SlotTeacher,
    sim: SimConfig,
    observation: ObservationConfig,
    placer: Placer,
    every: int = 1,
    world: World | None = None,
) -> tuple[Demonstrations, float]:
    """Demonstrations of `teacher` on `workload` (every `every`-th slot recorded) in `world` (None: the
    catalogue's), and the replayed run's average JCT in seconds (how good the replayed teacher is)."""
    compat = sim.mode is Mode.COMPAT
    world = world or World.catalogue(sim.mode)
    simulation = Simulation(workload, sim, world.speed, world.interference)
    observer = Observer(observation)
    teacher.reset()
    recorder = _Recorder(observation)
    slot = 0
    while not simulation.done:
        view = simulation.begin_slot()
        decision = SlotDecision(view, observation.window, compat, placer, packed=compat and observation.packed)
        keep = slot % every == 0
        if isinstance(teacher, HeuristicScheduler):
            replay = replay_stream(decision, teacher)
        elif isinstance(teacher, SlotTeacher):
            replay = replay_stream(decision, teacher.heuristic_for(simulation, view))
        else:
            replay = replay_targets(decision, _targets(teacher, view))
        for action in replay:
            if keep:
                recorder.add(observer(decision), decision.mask(), action)
            decision.step(action)
        simulation.apply(decision.allocation())
        slot += 1
    result = simulation.result(teacher.name)
    average_jct = float(np.mean([job.jct_s for job in result.jobs]))
    return recorder.demonstrations(), average_jct


def teacher_action(decision: SlotDecision, teacher: Scheduler, targets: dict[str, tuple[int, int]] | None) -> int:
    """What the teacher would do next from the decision's current state (for DAgger labels).

    A request-stream heuristic is restarted on the current window with the counts granted so far and its
    first possible request is the answer; a target-based teacher answers with the next step towards `targets`
    (its allocation for the slot). Stop when the teacher has nothing more to ask for in this window.
    """
    if isinstance(teacher, HeuristicScheduler):
        window = _window_view(decision.view, decision)
        first = decision.first_rank
        counts = decision.counts[first : first + len(window.jobs)].copy()  # the stream must not change the state
        mask = decision.mask()
        teacher.decision_key(window)
        stream = teacher.requests(window, counts)  # type: ignore[arg-type]
        try:
            column, role = next(stream)
            while True:
                action = encode_action(column, role)
                if mask[action]:
                    return action
                column, role = stream.send(False)
        except StopIteration:
            return stop_action(decision.window)
        finally:
            stream.close()
    assert targets is not None
    return next(replay_targets(decision, targets), stop_action(decision.window))


def record_on_policy(
    workload: Workload,
    student: Callable[[np.ndarray, np.ndarray], int],
    teacher: Scheduler | SlotTeacher,
    sim: SimConfig,
    observation: ObservationConfig,
    placer: Placer,
    every: int = 1,
    max_slots: int = 3_000,
    world: World | None = None,
) -> Demonstrations:
    """DAgger (Ross et al. 2011): the student drives, the teacher labels the states the student visits, in
    `world` (None: the catalogue's)."""
    compat = sim.mode is Mode.COMPAT
    world = world or World.catalogue(sim.mode)
    simulation = Simulation(workload, replace(sim, stall_slots=max_slots + 1), world.speed, world.interference)
    observer = Observer(observation)
    teacher.reset()
    recorder = _Recorder(observation)
    slot = 0
    while not simulation.done and slot < max_slots:
        view = simulation.begin_slot()
        decision = SlotDecision(
            view, observation.window, compat, placer, work_conserving=True, packed=compat and observation.packed
        )
        targets = None
        labeller: Scheduler | None = None
        if isinstance(teacher, SlotTeacher):
            # its choice can cost many simulations, and only recorded slots need a label
            labeller = teacher.heuristic_for(simulation, view) if slot % every == 0 else None
        else:
            labeller = teacher if slot % every == 0 else None
            if not isinstance(teacher, HeuristicScheduler):  # it may keep state: it decides every slot
                targets = _targets(teacher, view)
        while not decision.done:
            state = observer(decision)
            mask = decision.mask()
            if labeller is not None:
                label = teacher_action(decision, labeller, targets)
                recorder.add(state, np.maximum(mask, np.eye(1, len(mask), label, dtype=np.int8)[0]), label)
            decision.step(student(state, mask))
        simulation.apply(decision.allocation())
        slot += 1
    return recorder.demonstrations()
