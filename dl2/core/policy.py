"""The protocols every scheduling policy implements (heuristics and learned policies alike)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from dl2.core.allocation import Allocation
from dl2.core.view import ClusterView


class Scheduler(Protocol):
    """Maps a read-only cluster view to an allocation; never mutates simulator state (STYLE rule 2)."""

    name: str

    def reset(self) -> None:
        """Forget anything learned during a previous run (called before each simulation)."""
        ...

    def schedule(self, view: ClusterView) -> Allocation:
        """Workers and parameter servers, with their nodes, for the coming slot."""
        ...


def drawn_propensities(scheduler: Scheduler) -> Mapping[str, float]:
    """Per job, the probability with which `scheduler` drew what its last `schedule` returned for it, where it
    draws its decisions (`dl2.schedulers.exploring`); empty for a deterministic scheduler (every job: 1). Decision
    records log it (`DecisionRecord.applied_propensity`), so that a challenger can be evaluated off-policy."""
    propensities: Mapping[str, float] = getattr(scheduler, "propensities", {})
    return propensities
