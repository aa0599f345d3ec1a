"""What the speed-prediction model sees of a placed job: its own features and one row per server it uses.

Harmony §3 (INFOCOM'19): a job's speed depends on its type, its workers and PS, how they are spread over
servers and which jobs share those servers. A job is encoded as

- a job row: type (one-hot), architecture, worker and PS counts (scaled, inverted, logarithms), how many
  servers it spans, the share of its worker-PS pairs that share a server (the intra-server traffic);
- one row per server it uses: its own workers and PS there (shares, and their pairs), the other jobs there
  counted by type, the resources those others use and what is left free.

The encoding sees placements and job types only, never the simulator's interference matrix or speed
function. One slot's jobs are encoded together (`encode_slot`), so the neighbours of each come from the same
placement; rows of all jobs are stacked with `segments` saying which job each server row belongs to.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from dl2.core import Architecture, ClusterSpec, JobAllocation, JobSpec
from dl2.workload.catalogue import CATALOGUE, MODEL_NAMES

NUM_TYPES = len(MODEL_NAMES)
JOB_FEATURES = NUM_TYPES + 11
SERVER_FEATURES = 7 + NUM_TYPES + 2
SCALE_TASKS = 16.0
"""Task counts are divided by this (DL2's per-job cap)."""

Placed = tuple[JobSpec, JobAllocation]
"""A job and where its tasks run."""
Change = tuple[int, dict[int, tuple[int, int]], set[int], list[int]]
"""Tasks one job added in a round: its index in a slot's placement, the tasks it added (node -> workers, PS),
the nodes it was not on before, and the other jobs on the nodes it added tasks to."""


@dataclass(frozen=True, slots=True)
class Encoded:
    """Jobs encoded for the speed model."""

    jobs: np.ndarray
    """(num_jobs, JOB_FEATURES) float32."""
    servers: np.ndarray
    """(num_rows, SERVER_FEATURES) float32: the server rows of every job, job by job."""
    segments: np.ndarray
    """(num_rows,) int64: the job (row of `jobs`) each server row belongs to; non-decreasing."""

    def __len__(self) -> int:
        return len(self.jobs)

    @classmethod
    def concatenate(cls, parts: Sequence[Encoded]) -> Encoded:
        if not parts:
            return cls(
                np.zeros((0, JOB_FEATURES), np.float32),
                np.zeros((0, SERVER_FEATURES), np.float32),
                np.zeros(0, np.int64),
            )
        offsets = np.cumsum([0] + [len(part) for part in parts[:-1]])
        return cls(
            np.concatenate([part.jobs for part in parts]),
            np.concatenate([part.servers for part in parts]),
            np.concatenate([part.segments + offset for part, offset in zip(parts, offsets, strict=True)]),
        )

    def subset(self, rows: np.ndarray) -> Encoded:
        """The jobs at `rows` (in that order), with their server rows."""
        index, segments = gather_rows(self.starts(), rows)
        return Encoded(self.jobs[rows], self.servers[index], segments)

    def starts(self) -> np.ndarray:
        """starts[j]: the first server row of job j; starts[-1] = number of rows."""
        result: np.ndarray = np.searchsorted(self.segments, np.arange(len(self.jobs) + 1))
        return result


def gather_rows(starts: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(server-row indices, new segments) of the jobs at `rows`, without a Python loop over jobs."""
    rows = np.asarray(rows, dtype=np.int64)
    lengths = starts[rows + 1] - starts[rows]
    offsets = np.repeat(starts[rows] - np.cumsum(lengths) + lengths, lengths)
    return offsets + np.arange(lengths.sum()), np.repeat(np.arange(len(rows)), lengths)


class SlotPlacement:
    """One slot's placed jobs, indexed by server: who holds what where, and what each server has left.

    Built once per slot, vectorised over (job, server) pairs: a week of Philly logs hundreds of thousands of
    job-slots, most of them spread over many servers."""

    def __init__(self, placed: Sequence[Placed], cluster: ClusterSpec) -> None:
        self.placed = placed
        capacity = _capacity(cluster)
        inverse = np.divide(1.0, capacity, out=np.zeros_like(capacity), where=capacity > 0)
        jobs, nodes, workers, ps = [], [], [], []
        for index, (_, allocation) in enumerate(placed):
            for node, (w, p) in per_node(allocation).items():
                jobs.append(index)
                nodes.append(node)
                workers.append(w)
                ps.append(p)
        self.entry_job = np.array(jobs, dtype=np.int64)
        """Per (job, server) pair: the job's index in `placed` (pairs of a job are consecutive)."""
        entry_node = self.entry_node = np.array(nodes, dtype=np.int64)
        entry_tasks = np.column_stack([np.array(workers, dtype=float), np.array(ps, dtype=float)]).reshape(-1, 2)
        types = np.array([CATALOGUE[spec.model].type_index for spec, _ in placed], dtype=np.int64)
        demands = np.array(
            [spec.worker_demand.as_tuple() + spec.ps_demand.as_tuple() for spec, _ in placed], dtype=float
        ).reshape(-1, 6)
        totals = np.array([(a.num_workers, a.num_ps) for _, a in placed], dtype=float).reshape(-1, 2)
        job_of = self.entry_job
        use = entry_tasks[:, :1] * demands[job_of, :3] + entry_tasks[:, 1:] * demands[job_of, 3:]
        node_used = np.zeros_like(capacity)
        np.add.at(node_used, entry_node, use)
        node_types = np.zeros((len(capacity), NUM_TYPES))
        np.add.at(node_types, (entry_node, types[job_of]), 1.0)
        others_types = node_types[entry_node]
        others_types[np.arange(len(job_of)), types[job_of]] -= 1.0
        rows = np.zeros((len(job_of), SERVER_FEATURES), np.float32)
        share = np.divide(entry_tasks, totals[job_of], out=np.zeros_like(entry_tasks), where=totals[job_of] > 0)
        rows[:, 0:2] = share
        rows[:, 2] = share[:, 0] * share[:, 1]
        rows[:, 3:5] = ((node_used[entry_node] - use) * inverse[entry_node])[:, :2]
        rows[:, 5:7] = (1.0 - node_used[entry_node] * inverse[entry_node])[:, :2]
        rows[:, 7 : 7 + NUM_TYPES] = others_types
        rows[:, 7 + NUM_TYPES] = others_types.sum(axis=1)
        rows[:, 8 + NUM_TYPES] = others_types.sum(axis=1) == 0
        self.rows = rows
        self._inverse, self._types, self._demands = inverse, types, demands
        self._entry_of = {(j, n): e for e, (j, n) in enumerate(zip(jobs, nodes, strict=True))}
        self._on_node: dict[int, list[int]] = {}
        for j, n in zip(jobs, nodes, strict=True):
            self._on_node.setdefault(n, []).append(j)
        pairs = np.zeros(len(placed))
        np.add.at(pairs, job_of, entry_tasks[:, 0] * entry_tasks[:, 1])
        spans = np.bincount(job_of, minlength=len(placed)).astype(float)
        self.job_rows = job_rows(placed, types, totals, spans, pairs)
        self.starts = np.searchsorted(job_of, np.arange(len(placed) + 1))

    def encode(self, which: Sequence[int] | None = None) -> Encoded:
        """The jobs at indices `which` of `placed` (all by default)."""
        if which is None:
            return Encoded(self.job_rows, self.rows, self.entry_job.copy())
        chosen = np.asarray(which, dtype=np.int64)
        index, segments = gather_rows(self.starts, chosen)
        return Encoded(self.job_rows[chosen], self.rows[index], segments)

    def jobs_on(self, node: int) -> list[int]:
        """The jobs (indices of `placed`) with a task on `node`."""
        return self._on_node.get(node, [])

    def nodes_of(self, job: int) -> list[int]:
        """The servers of job `job`, in the order of its server rows."""
        nodes: list[int] = self.entry_node[self.starts[job] : self.starts[job + 1]].tolist()
        return nodes

    def neighbours(self, job: int, nodes: Iterable[int]) -> list[int]:
        """The other jobs with a task on any of `nodes`, by index."""
        return sorted({other for node in nodes for other in self._on_node.get(node, ()) if other != job})

    def without(self, job: int, removed: dict[int, tuple[int, int]], gone: set[int], which: Sequence[int]) -> Encoded:
        """The jobs `which` encoded as if job `job` had not placed `removed` (node -> workers, PS); on the nodes
        of `gone` it then holds nothing. Only the server rows on those nodes change (what the others use and
        leave free, and the job's type among them where it is gone)."""
        chosen = np.asarray(which, dtype=np.int64)
        index, segments = gather_rows(self.starts, chosen)
        rows = self.rows[index]
        lengths = self.starts[chosen + 1] - self.starts[chosen]
        block = np.concatenate([[0], np.cumsum(lengths)])
        worker, ps = self._demands[job, :3], self._demands[job, 3:]
        own_type = self._types[job]
        for position, other in enumerate(chosen.tolist()):
            for node, (workers, servers) in removed.items():
                entry = self._entry_of.get((other, node))
                if entry is None:
                    continue
                row = int(block[position] + entry - self.starts[other])
                use = (workers * worker + servers * ps) * self._inverse[node]
                rows[row, 3:5] -= use[:2]
                rows[row, 5:7] += use[:2]
                if node in gone:
                    rows[row, 7 + own_type] -= 1.0
                    rows[row, 7 + NUM_TYPES] -= 1.0
                    rows[row, 8 + NUM_TYPES] = rows[row, 7 + NUM_TYPES] == 0
        return Encoded(self.job_rows[chosen], rows, segments)


def _capacity(cluster: ClusterSpec) -> np.ndarray:
    return np.array([node.capacity.as_tuple() for node in cluster.nodes], dtype=float).reshape(-1, 3)


def job_rows(
    placed: Sequence[Placed], types: np.ndarray, totals: np.ndarray, spans: np.ndarray, pairs: np.ndarray
) -> np.ndarray:
    """Job rows of `placed`: type, architecture, counts, spans and the share of co-located worker-PS pairs."""
    rows = np.zeros((len(placed), JOB_FEATURES), np.float32)
    rows[np.arange(len(placed)), types] = 1.0
    workers, ps = totals[:, 0], totals[:, 1]
    safe_workers, safe_ps = np.maximum(workers, 1.0), np.maximum(ps, 1.0)
    base = NUM_TYPES
    rows[:, base] = [spec.architecture is Architecture.ALLREDUCE for spec, _ in placed]
    rows[:, base + 1] = workers / SCALE_TASKS
    rows[:, base + 2] = ps / SCALE_TASKS
    rows[:, base + 3] = np.where(workers > 0, 1.0 / safe_workers, 0.0)
    rows[:, base + 4] = np.where(ps > 0, 1.0 / safe_ps, 0.0)
    rows[:, base + 5] = np.log1p(workers)
    rows[:, base + 6] = np.log1p(ps)
    rows[:, base + 7] = spans / np.maximum(workers + ps, 1.0)
    rows[:, base + 8] = np.log(np.maximum(spans, 1.0))
    rows[:, base + 9] = np.where((workers > 0) & (ps > 0), pairs / (safe_workers * safe_ps), 0.0)
    rows[:, base + 10] = spans == 1
    return rows


def per_node(allocation: JobAllocation) -> dict[int, tuple[int, int]]:
    """node -> (workers, PS) of one job, nodes in the order they first appear."""
    counts: dict[int, list[int]] = {}
    for node in allocation.worker_nodes:
        counts.setdefault(node, [0, 0])[0] += 1
    for node in allocation.ps_nodes:
        counts.setdefault(node, [0, 0])[1] += 1
    return {node: (w, p) for node, (w, p) in counts.items()}
