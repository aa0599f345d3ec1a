"""A placer that mixes heuristics at random: diverse placements for the speed model's logs.

Logs of one heuristic cover one corner of the placements (load balancing spreads every job, bin packing
piles jobs together), and a speed model trained on them must still judge placements a learned placer makes
(a job kept together on a server of its own, say). Each task here goes where a heuristic drawn at random puts
it (seeded), so a job's tasks mix spreading, packing, alignment and random servers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dl2.schedulers.binpack import BinPackPlacer
from dl2.schedulers.load_balance import LoadBalancePlacer
from dl2.schedulers.placement import Demand, NodeState, Placer
from dl2.schedulers.tetris import TetrisPlacer

DEFAULT_MIX = (("load-balance", 0.35), ("binpack", 0.35), ("tetris", 0.15), ("random", 0.15))


class MixedPlacer:
    name = "mixed"

    def __init__(self, seed: int = 0, mix: Sequence[tuple[str, float]] = DEFAULT_MIX) -> None:
        known: dict[str, Placer | None] = {
            "load-balance": LoadBalancePlacer(),
            "binpack": BinPackPlacer(),
            "tetris": TetrisPlacer(),
            "random": None,
        }
        self.placers = [known[name] for name, _ in mix]
        weights = np.array([weight for _, weight in mix], dtype=float)
        self.cumulative = np.cumsum(weights / weights.sum())
        self.rng = np.random.default_rng(seed)

    def choose(self, state: NodeState, demand: Demand, job_nodes: Sequence[int]) -> int:
        index = min(int(np.searchsorted(self.cumulative, self.rng.random(), side="right")), len(self.placers) - 1)
        placer = self.placers[index]
        if placer is not None:
            return placer.choose(state, demand, job_nodes)
        fitting = [node for node in range(state.num_nodes) if state.fits(node, demand)]
        return int(self.rng.choice(fitting)) if fitting else -1
