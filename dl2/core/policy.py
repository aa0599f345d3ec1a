"""The protocols every scheduling policy implements (heuristics and learned policies alike)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
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


@dataclass(frozen=True, slots=True)
class Attribution:
    """Which candidates of a search (`dl2.rl.lookahead`) decided its last slot, and what it predicted for each:
    decision records carry it (`DecisionRecord.proposed_by`, `DecisionRecord.predicted_total_s`), so a cluster's
    log says how often the network decides and by how much its proposals were judged better or worse."""

    decided_by: tuple[str, ...]
    """The candidates whose proposal was applied (every candidate that proposed that allocation; all of them where
    they agreed)."""
    predicted_total_s: Mapping[str, float] = field(default_factory=dict)
    """Per candidate, the total completion time (s) of the active jobs that its proposal's continuation predicted
    (infinite where it cannot finish or was refused); empty where all agreed and nothing was looked ahead."""

    @property
    def contested(self) -> bool:
        """Whether the candidates disagreed, so that the search chose."""
        return bool(self.predicted_total_s)


def decision_attribution(scheduler: Scheduler) -> Attribution | None:
    """What decided `scheduler`'s last `schedule` among its candidates, where it is a search over candidates;
    None for any other scheduler (it decided alone)."""
    attribution: Attribution | None = getattr(scheduler, "attribution", None)
    return attribution
