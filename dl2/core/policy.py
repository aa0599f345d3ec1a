"""The protocols every scheduling policy implements (heuristics and learned policies alike)."""

from __future__ import annotations

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
