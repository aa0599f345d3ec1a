"""Counts what a placer leaves unplaced: the tasks an allocation policy asked for that do not run after a round.

A placer may decline a task (Harmony's 'leave unplaced' row) or find no server for it; either way the
allocation policy's counts are then not held. `TallyingPlacer` wraps any placer and, per placement round, adds
the tasks the policy asked for beyond what each job kept (`asked`) and those of them that are not held when the
round ends (`left`), for every placer alike. It asks for the tenancy (who holds what where), which changes no
decision of a placer that ignores it.
"""

from __future__ import annotations

from collections.abc import Sequence

from dl2.schedulers.placement import Demand, NodeState, Placer
from dl2.schedulers.tenancy import Tenancy


class TallyingPlacer:
    needs_tenancy = True

    def __init__(self, inner: Placer) -> None:
        self.inner = inner
        self.name = inner.name
        self.asked = 0
        """Tasks asked for beyond what the jobs kept, over the rounds so far."""
        self.left = 0
        """Of those, the tasks not held at the end of their round."""
        self._state: NodeState | None = None
        self._kept: list[tuple[int, int]] = []

    @property
    def share_left(self) -> float:
        """`left / asked` over the rounds closed so far (0 when nothing was asked)."""
        return self.left / self.asked if self.asked else 0.0

    def choose(self, state: NodeState, demand: Demand, job_nodes: Sequence[int]) -> int:
        if state is not self._state:
            self.close()
            assert state.tenancy is not None, "place_sticky gives a tenancy to a placer that needs one"
            self._state, self._kept = state, _held(state.tenancy)
            self.asked += sum(
                max(workers - kept[0], 0) + max(ps - kept[1], 0)
                for (workers, ps), kept in zip(state.tenancy.targets, self._kept, strict=True)
            )
        return self.inner.choose(state, demand, job_nodes)

    def close(self) -> None:
        """Count the round in progress (a round ends when the next one starts; call this after the last)."""
        state, self._state = self._state, None
        if state is None or state.tenancy is None:
            return
        targets = state.tenancy.targets
        for (workers, ps), kept, now in zip(targets, self._kept, _held(state.tenancy), strict=True):
            # a task asked for is missing if the job holds fewer than its target, counting only the new ones
            self.left += min(max(workers - now[0], 0), max(workers - kept[0], 0))
            self.left += min(max(ps - now[1], 0), max(ps - kept[1], 0))


def _held(tenancy: Tenancy) -> list[tuple[int, int]]:
    """Per rank, the (workers, PS) the job holds now."""
    return [
        (sum(counts[0] for counts in held.values()), sum(counts[1] for counts in held.values()))
        for held in map(tenancy.holdings, range(len(tenancy.jobs)))
    ]
