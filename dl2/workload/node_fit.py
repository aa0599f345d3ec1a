"""Which servers run slow, learned online from the progress of the jobs placed on them.

Real clusters have degraded servers: a thermally throttled GPU, a failing one, a bad PCIe link. A synchronous job
with one worker there runs at that worker's pace, and nothing a deployment is told names such a server: Kubernetes
labels a node with its GPU model, not with how well that GPU is doing. What a deployment does have is each job's
observed throughput at the allocation it held, beside what its world predicts for it (`dl2.workload.job_fit`
computes that ratio every slot). `NodeSpeedFit` reads those ratios:

- only from jobs whose workers all sat on one server, so that a shortfall belongs to that server (a job spread over
  a slow and a healthy server would smear it over both); a job's throughput is its speed while it ran, so a slot
  that began with a resize counts too (the controller's views show none for such a slot, `dl2.kube.observe`);
- each job's mean log-ratio on its server, less the median of its type's jobs (on every server): a type the world
  gets wrong everywhere (a speed shift) is no server's fault;
- a server is slow where the median of those residuals over at least `min_jobs` distinct jobs falls below
  log(`threshold`): jobs there run at most 0.8 times what their types run elsewhere.

It reads observed throughputs only, never a truth, and names no server before three jobs showed it. Where the world
gets interference wrong, a job beside a neighbour also runs short of it: on `interference-2x` and the drawn truths
the healthy servers' medians end at 0.88-1.16 of their types', the slow servers' of `slow-nodes` (computation
three times as long) at 0.59-0.75 (`benchmarks/learned_parts.py`'s cells, seeds 9100-9101). With two jobs a server
and a threshold of 0.7, early medians named healthy servers under `interference-2x`. A server named is spared by
the placers (`dl2.schedulers.slow_nodes.SparingSlowNodes`), so it sees few jobs after; the estimate is made afresh
from every sample each slot, so a server named on an early few is cleared when its jobs' types turn out slow too.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable

from dl2.core import JobAllocation, JobSpec

THRESHOLD = 0.8
"""A server is slow where its jobs run below this share of what their types run elsewhere (the median)."""
MIN_JOBS = 3
"""Distinct jobs a server must have shown short before it is named (one or two may be their types' outliers)."""


class NodeSpeedFit:
    """The servers that jobs' observed progress shows slow (module docstring)."""

    def __init__(self, threshold: float = THRESHOLD, min_jobs: int = MIN_JOBS) -> None:
        if not 0.0 < threshold < 1.0 or min_jobs < 1:
            raise ValueError(f"threshold must be in (0, 1) and min_jobs >= 1; got {threshold}, {min_jobs}")
        self.log_threshold = math.log(threshold)
        self.min_jobs = min_jobs
        self.reset()

    def reset(self) -> None:
        """Forget every observation (a new run)."""
        self.samples: dict[tuple[str, int], tuple[float, int]] = {}
        """(job id, server) -> (sum of log observed / predicted, observations) while its workers sat there alone."""
        self.model_of: dict[str, str] = {}
        self.slow: frozenset[int] = frozenset()
        """The servers named slow so far."""

    def observe(self, ratios: Iterable[tuple[JobSpec, JobAllocation, float]]) -> None:
        """Learn from one slot's (job, allocation it held, observed / predicted throughput)."""
        learned = False
        for spec, allocation, ratio in ratios:
            workers = allocation.worker_nodes
            if ratio <= 0.0 or not workers or any(node != workers[0] for node in workers):
                continue
            key = (spec.job_id, workers[0])
            total, count = self.samples.get(key, (0.0, 0))
            self.samples[key] = (total + math.log(ratio), count + 1)
            self.model_of[spec.job_id] = spec.model
            learned = True
        if learned:
            self.slow = self._estimate()

    def _estimate(self) -> frozenset[int]:
        means = {key: total / count for key, (total, count) in self.samples.items()}
        by_model: dict[str, list[float]] = {}
        for (job_id, _), mean in means.items():
            by_model.setdefault(self.model_of[job_id], []).append(mean)
        typical = {model: statistics.median(values) for model, values in by_model.items()}
        residuals: dict[int, list[float]] = {}
        for (job_id, node), mean in means.items():
            residuals.setdefault(node, []).append(mean - typical[self.model_of[job_id]])
        return frozenset(
            node
            for node, values in residuals.items()
            if len(values) >= self.min_jobs and statistics.median(values) < self.log_threshold
        )
