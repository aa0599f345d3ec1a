"""What the placer's training collects: each decision, its reward, and a replay buffer of recent decisions.

A decision's reward is that of its job's placement in the round (Harmony §4.2 rewards placements by the speeds
the model predicts): the job's speed relative to its speed alone and packed with the tasks the allocation policy
asked for (the quality of the placement; a task the placer leaves unplaced costs the speed it would have added),
averaged over the slots it keeps the placement, plus the change its new tasks caused in the speed of every job
on the servers they went to (each relative to that job's own packed speed). The second part (a difference
reward) charges a placement with the slowdown it inflicts, which its own speed does not show; the average
charges a placement that spreads a job with the slowdowns later arrivals bring to its servers. Speeds come
from the world the episode runs in (the speed model's, Harmony; or the simulator, the ablation) and from a
`SpeedSource` of the same kind for the counterfactuals.

Candidate rows that are equal (empty servers, mostly) are stored once with their count: the softmax over
servers is the softmax over distinct rows with log(count) added, so nothing is lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dl2.core import Allocation, ClusterSpec, ClusterView, JobAllocation, JobSpec
from dl2.placement.config import JOB_INPUTS, SERVER_INPUTS
from dl2.placement.features import Change, SlotPlacement, gather_rows, per_node
from dl2.placement.world import SpeedSource, runnable
from dl2.schedulers.placement import NodeState
from dl2.sim.lower_bound import FastestPlacements
from dl2.workload.speed import SpeedModel


@dataclass(slots=True)
class Decisions:
    """Decisions with their candidate rows (ragged: `rows[starts[i]:starts[i+1]]` belong to decision i)."""

    jobs: np.ndarray
    """(n, JOB_INPUTS) float32."""
    rows: np.ndarray
    """(total rows, SERVER_INPUTS) float32, distinct within a decision."""
    counts: np.ndarray
    """(total rows,) float32: how many candidates each distinct row stands for."""
    starts: np.ndarray
    """(n + 1,) int64."""
    choices: np.ndarray
    """(n,) int64: the chosen row, counted from the decision's first row."""
    behaviour: np.ndarray
    """(n,) float64: the probability the acting policy gave the chosen row."""
    rewards: np.ndarray
    """(n,) float64."""

    def __len__(self) -> int:
        return len(self.choices)

    @classmethod
    def concatenate(cls, parts: Sequence[Decisions]) -> Decisions:
        offsets = np.cumsum([0] + [len(part.rows) for part in parts[:-1]])
        return cls(
            np.concatenate([part.jobs for part in parts]),
            np.concatenate([part.rows for part in parts]),
            np.concatenate([part.counts for part in parts]),
            np.concatenate(
                [[0]] + [part.starts[1:] + offset for part, offset in zip(parts, offsets, strict=True)]
            ).astype(np.int64),
            np.concatenate([part.choices for part in parts]),
            np.concatenate([part.behaviour for part in parts]),
            np.concatenate([part.rewards for part in parts]),
        )

    def subset(self, index: np.ndarray) -> Decisions:
        rows, segments = gather_rows(self.starts, index)
        lengths = np.bincount(segments, minlength=len(index))
        return Decisions(
            self.jobs[index],
            self.rows[rows],
            self.counts[rows],
            np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            self.choices[index],
            self.behaviour[index],
            self.rewards[index],
        )


_PROJECTION = np.random.default_rng(12345).standard_normal(64)


@dataclass(slots=True)
class _Open:
    """A job's placement whose reward is still accumulating."""

    allocation: JobAllocation
    decisions: list[int]
    harm: float
    """The relative change its new tasks made to its neighbours' speeds when placed."""
    reference: float
    """The job's speed alone, packed, with the tasks the allocation policy asked for (at least those it holds)."""
    first: float
    """Its relative speed when placed (the reward if it never runs a whole slot at this placement)."""
    total: float = 0.0
    slots: int = 0


class ExperienceRecorder:
    """The `DecisionHook` of training: records decisions and rewards them.

    A placement's reward is the job's speed relative to its speed alone and packed with its asked-for tasks,
    averaged over the slots it keeps that placement (a placement that exposes the job to more servers pays when
    later jobs join them), plus the change its new tasks made to its neighbours' speeds when placed (the slowdown
    it inflicts). Speeds observed in the world the episode runs in (`observe`) give the average; the speed source
    gives the rest."""

    def __init__(self, source: SpeedSource, cluster: ClusterSpec, speed: SpeedModel) -> None:
        self.source = source
        self.cluster = cluster
        self._packed = FastestPlacements(cluster, speed)
        self._reference: dict[tuple[object, ...], float] = {}
        self._jobs: list[np.ndarray] = []
        self._rows: list[np.ndarray] = []
        self._counts: list[np.ndarray] = []
        self._choices: list[int] = []
        self._behaviour: list[float] = []
        self._rewards: list[float] = []
        self._pending: list[int] = []
        """Decisions of the job being placed."""
        self._placed: list[tuple[int, dict[int, tuple[int, int]], list[int], tuple[int, int]]] = []
        """Jobs placed this round with decisions: (rank, what they held before the round, their decisions, the
        (workers, PS) the allocation policy asked for)."""
        self._open: dict[str, _Open] = {}

    def __len__(self) -> int:
        return len(self._choices)

    def decided(self, job: np.ndarray, rows: np.ndarray, choice: int, probability: float) -> None:
        # equal rows have equal keys (a random projection: sorting one column is far cheaper than rows)
        keys = rows.astype(np.float64) @ _PROJECTION[: rows.shape[1]]
        _, first, inverse, counts = np.unique(keys, return_index=True, return_inverse=True, return_counts=True)
        self._jobs.append(job)
        self._rows.append(rows[first])
        self._counts.append(counts.astype(np.float32))
        self._choices.append(int(inverse.reshape(-1)[choice]))
        self._behaviour.append(probability)
        self._rewards.append(0.0)
        self._pending.append(len(self._choices) - 1)

    def job_placed(self, state: NodeState, rank: int, kept: dict[int, tuple[int, int]]) -> None:
        if self._pending:
            asked = state.tenancy.targets[rank] if state.tenancy is not None else (0, 0)
            self._placed.append((rank, kept, self._pending, asked))
            self._pending = []

    def observe(self, view: ClusterView) -> None:
        """A slot boundary: each open placement adds the speed its job ran at in the slot just past."""
        present = {job.spec.job_id: job for job in view.jobs}
        for job_id in list(self._open):
            job = present.get(job_id)
            entry = self._open[job_id]
            if job is None or not job.allocation.same_placement(entry.allocation):
                self._close(job_id)  # finished, or placed differently since
            elif job.last_throughput > 0:
                entry.total += job.last_throughput / entry.reference
                entry.slots += 1

    def end_round(self, view: ClusterView, allocation: Allocation) -> None:
        """The round's placement is final: open the placements that decisions made this round."""
        for job_id in list(self._open):
            if not allocation.get(job_id).same_placement(self._open[job_id].allocation):
                self._close(job_id)
        if not self._placed:
            return
        running = [
            (rank, job.spec, allocation.get(job.spec.job_id))
            for rank, job in enumerate(view.jobs)
            if runnable(job.spec, allocation.get(job.spec.job_id))
        ]
        slot = SlotPlacement([(spec, placed) for _, spec, placed in running], self.cluster)
        position = {rank: i for i, (rank, _, _) in enumerate(running)}
        speeds = self.source.throughputs(slot, range(len(running)))
        relative = np.array([speed / self.reference(*self._counts_of(slot, i)) for i, speed in enumerate(speeds)])
        # per placed job: what its new tasks were and whom they joined; the neighbours' speeds without them are
        # evaluated together
        changes = [self._change(slot, position.get(rank), kept) for rank, kept, _, _ in self._placed]
        without = self.source.throughputs_without_each(slot, [c for c in changes if c is not None and c[3]])
        counterfactual = iter(without)
        for (_, _, decisions, asked), change in zip(self._placed, changes, strict=True):
            if change is None:  # left without a runnable placement
                for index in decisions:
                    self._rewards[index] = 0.0
                continue
            job, _, _, neighbours = change
            harm = 0.0
            for other, speed in zip(neighbours, next(counterfactual) if neighbours else (), strict=True):
                harm += float(relative[other] - speed / self.reference(*self._counts_of(slot, other)))
            # relative to the job alone with the tasks it was asked to hold: declining a task (the placer's
            # "leave unplaced" row) is charged the speed the task would have added, as sharing is charged the
            # slowdown (so is a task that fit nowhere: earlier placements left it no room)
            spec, placed = slot.placed[job]
            reference = self.reference(spec, max(placed.num_workers, asked[0]), max(placed.num_ps, asked[1]))
            self._open[spec.job_id] = _Open(placed, decisions, harm, reference, float(speeds[job]) / reference)
        self._placed = []

    def _close(self, job_id: str) -> None:
        entry = self._open.pop(job_id)
        own = entry.total / entry.slots if entry.slots else entry.first
        for index in entry.decisions:
            self._rewards[index] = own + entry.harm

    @staticmethod
    def _change(slot: SlotPlacement, job: int | None, kept: dict[int, tuple[int, int]]) -> Change | None:
        """(job, the tasks it added per node, the nodes it was not on before, the other jobs on those nodes)."""
        if job is None:
            return None
        removed = {}
        for node, (workers, ps) in per_node(slot.placed[job][1]).items():
            held_workers, held_ps = kept.get(node, (0, 0))
            if (workers, ps) != (held_workers, held_ps):
                removed[node] = (workers - held_workers, ps - held_ps)
        gone = {node for node in removed if node not in kept}
        return job, removed, gone, slot.neighbours(job, removed)

    def reference(self, spec: JobSpec, workers: int, ps: int) -> float:
        """The source's speed of the job alone with these tasks packed (cached per job type and counts)."""
        key = (spec.model, spec.architecture, spec.worker_demand, spec.ps_demand, workers, ps)
        value = self._reference.get(key)
        if value is None:
            packed = self._packed.packed(spec, workers, ps)
            if packed is None:  # more than the cluster holds at once: one task per server, round the cluster
                nodes = self.cluster.num_nodes
                packed = JobAllocation(tuple(i % nodes for i in range(workers)), tuple(i % nodes for i in range(ps)))
            alone = SlotPlacement([(spec, packed)], self.cluster)
            value = self._reference[key] = max(float(self.source.throughputs(alone, [0])[0]), 1e-9)
        return value

    @staticmethod
    def _counts_of(slot: SlotPlacement, job: int) -> tuple[JobSpec, int, int]:
        spec, allocation = slot.placed[job]
        return spec, allocation.num_workers, allocation.num_ps

    def take(self) -> Decisions:
        """Everything recorded so far (open placements are rewarded with what they have seen), and a fresh start."""
        for job_id in list(self._open):
            self._close(job_id)
        lengths = [len(rows) for rows in self._rows]
        decisions = Decisions(
            np.array(self._jobs, dtype=np.float32).reshape(len(lengths), JOB_INPUTS),
            np.concatenate(self._rows) if self._rows else np.zeros((0, SERVER_INPUTS), np.float32),
            np.concatenate(self._counts) if self._counts else np.zeros(0, np.float32),
            np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            np.array(self._choices, dtype=np.int64),
            np.array(self._behaviour, dtype=np.float64),
            np.array(self._rewards, dtype=np.float64),
        )
        self._jobs, self._rows, self._counts = [], [], []
        self._choices, self._behaviour, self._rewards, self._pending, self._placed = [], [], [], [], []
        return decisions


class ReplayBuffer:
    """The most recent decisions, up to `capacity` (whole batches are dropped oldest first)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._parts: list[Decisions] = []
        self._merged: Decisions | None = None

    def __len__(self) -> int:
        return sum(len(part) for part in self._parts)

    def add(self, decisions: Decisions) -> None:
        if len(decisions) == 0:
            return
        self._parts.append(decisions)
        while len(self) - len(self._parts[0]) >= self.capacity:
            self._parts.pop(0)
        self._merged = None

    def sample(self, count: int, rng: np.random.Generator) -> Decisions | None:
        if not self._parts:
            return None
        if self._merged is None:
            self._merged = Decisions.concatenate(self._parts)
        return self._merged.subset(rng.integers(0, len(self._merged), size=min(count, len(self._merged))))
