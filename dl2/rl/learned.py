"""`LearnedScheduler`: a trained DL2 policy behind the same `Scheduler` protocol as the heuristics.

Each slot it drives a `SlotDecision` with the policy network (NumPy inference), one task at a time, until the
policy stops or nothing more is possible, exactly as in training.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dl2.core import Allocation, ClusterView
from dl2.env.decision import SlotDecision
from dl2.env.observation import Observer
from dl2.rl.inference import NumpyPolicy
from dl2.rl.model_io import PolicyConfig, load_config, load_state
from dl2.schedulers.placement import Placer
from dl2.schedulers.registry import PLACERS


class LearnedScheduler:
    def __init__(
        self,
        config: PolicyConfig,
        policy: NumpyPolicy,
        greedy: bool = True,
        seed: int = 0,
        name: str = "dl2",
        compat: bool | None = None,
        placer: Placer | None = None,
    ) -> None:
        """`compat`: the simulator mode it runs in (its slot mechanism follows the mode); None = its training mode.
        `placer`: realistic-mode placement of its counts; None = the placer it was trained with."""
        self.config = config
        self.policy = policy
        self.greedy = greedy
        self.seed = seed
        self.name = name
        self.observer = Observer(config.observation)
        self.placer = placer or PLACERS[config.placer]()
        self.compat = config.mode == "compat" if compat is None else compat
        self.reset()

    @classmethod
    def from_dir(
        cls,
        directory: str | Path,
        greedy: bool = True,
        seed: int = 0,
        compat: bool | None = None,
        placer: Placer | None = None,
    ) -> LearnedScheduler:
        config, _ = load_config(Path(directory))
        state = load_state(Path(directory), config=config)  # shapes checked against config.json
        policy = NumpyPolicy.from_state_dict(state, config.observation.shape, config.network)
        return cls(config, policy, greedy, seed, name=Path(directory).name, compat=compat, placer=placer)

    def reset(self) -> None:
        self.rng = None if self.greedy else np.random.default_rng(self.seed)
        self.decisions = 0

    def schedule(self, view: ClusterView) -> Allocation:
        observation = self.config.observation
        decision = SlotDecision(
            view,
            observation.window,
            self.compat,
            self.placer,
            work_conserving=True,
            packed=self.compat and observation.packed,
        )
        policy, observer, rng = self.policy, self.observer, self.rng
        while not decision.done:
            if rng is None:
                action = policy.greedy_action(observer(decision), decision.mask())
            else:
                action, _ = policy.act(observer(decision), decision.mask(), rng)
            decision.step(action)
            self.decisions += 1
        return decision.allocation()
