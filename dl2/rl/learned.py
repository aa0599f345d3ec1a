"""`LearnedScheduler`: a trained DL2 policy behind the same `Scheduler` protocol as the heuristics.

Each slot it drives a `SlotDecision` with the policy network (NumPy inference), one task at a time, until the
policy stops or nothing more is possible, exactly as in training. A greedy `per-job` policy in realistic mode plays
the slot in compiled code where numba is installed (`dl2.rl.compiled_slot`: the same decisions, Python entered
once per window instead of once per task).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dl2.core import Allocation, ClusterView
from dl2.env.decision import SlotDecision
from dl2.env.observation import Observer
from dl2.rl.compiled_slot import SlotKernel, slot_kernel
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
        self._slot: SlotKernel | None = None
        if greedy and not self.compat and not config.observation.raw_dl2 and policy.uses_compiled:
            self._slot = slot_kernel(policy)
        self.reset()

    def __getstate__(self) -> dict[str, object]:
        """Pickled without the compiled slot (a worker rebuilds it from the policy)."""
        state = dict(self.__dict__)
        state["_slot"] = state["_slot"] is not None
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        compiled_slot = bool(state.pop("_slot"))
        self.__dict__.update(state)
        self._slot = slot_kernel(self.policy) if compiled_slot else None

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
        if self._slot is not None and rng is None and not decision.places_each_task:
            self.decisions += self._slot.decide(decision, observer)
            return decision.allocation()
        while not decision.done:
            if rng is None:
                action = policy.greedy_action(observer(decision), decision.mask())
            else:
                action, _ = policy.act(observer(decision), decision.mask(), rng)
            decision.step(action)
            self.decisions += 1
        return decision.allocation()
