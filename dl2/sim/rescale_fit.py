"""What a resize costs on this cluster, learned online from the jobs' progress.

A what-if run plays the catalogue's rescale cost (`RescaleCost`: a hot resize of tens of milliseconds, DL2 §6.3).
A cluster whose jobs resize by checkpoint and restart loses minutes each time, and a search that resizes as if it
were free then resizes too often. Each slot boundary shows it: a job whose placement changed at the start of the
previous slot and that ran the rest of it made `Δprogress x samples_per_epoch / last_throughput` seconds of
training progress (`last_throughput` is its speed while it ran), so it lost the rest of the slot to the resize.
`RescaleFit` keeps the mean of those losses, apart for jobs that were running before (stop and restore) and jobs
starting from no tasks (restore alone), and `rescale()` turns them into the `RescaleCost` a what-if run plays:
the world's own until `MIN_OBSERVATIONS` of both are seen or while the losses are below `HOT_LIMIT_S` (a
hot resize: nothing to correct), else a checkpoint-restart whose restore is the starts' mean loss and whose stop
is what running jobs lose beyond it.

It reads progress, throughput and allocations that a deployment observes (`ClusterView`), never a truth.
"""

from __future__ import annotations

from dataclasses import replace

from dl2.core import ClusterView, JobAllocation
from dl2.sim.config import RescaleCost, RescaleKind

MIN_OBSERVATIONS = 3
"""Resizes of running jobs and starts each seen before the fit replaces the world's cost."""
HOT_LIMIT_S = 5.0
"""A mean loss under this is a hot resize (the world's cost is kept): below it, a loss is the speed noise's."""


class RescaleFit:
    """The mean training time a resize loses, per kind (module docstring)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget every observation (a new run)."""
        self._held: dict[str, JobAllocation] = {}
        """Job id -> what it held in the slot before the previous one (the view before's)."""
        self._progress: dict[str, float] = {}
        """Job id -> its epochs at the view before."""
        self.running_losses: list[float] = []
        """Seconds lost to each observed resize of a job that was running."""
        self.start_losses: list[float] = []
        """Seconds lost to each observed start (or restart) of a job that held no tasks."""

    def observe(self, view: ClusterView) -> int:
        """Learn from a slot boundary's view; returns how many resizes it learned from."""
        learned = 0
        held_before, progress_before = self._held, self._progress
        for job in view.jobs:
            job_id, allocation = job.spec.job_id, job.allocation
            before = held_before.get(job_id)
            if before is None or allocation.is_empty or allocation.same_placement(before):
                continue
            if job.last_throughput <= 0:
                continue
            progress = progress_before.get(job_id)
            if progress is None:
                continue
            ran_s = (job.progress_epochs - progress) * job.spec.samples_per_epoch / job.last_throughput
            lost = min(max(view.slot_s - ran_s, 0.0), view.slot_s)
            (self.start_losses if before.is_empty else self.running_losses).append(lost)
            learned += 1
        self._held = {job.spec.job_id: job.allocation for job in view.jobs}
        self._progress = {job.spec.job_id: job.progress_epochs for job in view.jobs}
        return learned

    def rescale(self, world: RescaleCost) -> RescaleCost:
        """The cost a what-if run plays: `world`'s until enough is seen or while resizes are hot, else the
        checkpoint-restart the losses show."""
        if len(self.running_losses) < MIN_OBSERVATIONS or len(self.start_losses) < MIN_OBSERVATIONS:
            return world
        running = sum(self.running_losses) / len(self.running_losses)
        start = sum(self.start_losses) / len(self.start_losses)
        if running < HOT_LIMIT_S and start < HOT_LIMIT_S:
            return world
        return replace(
            world,
            kind=RescaleKind.CHECKPOINT,
            stop_s=max(running - start, 0.0),
            restore_min_s=start,
            restore_max_s=start,
        )
