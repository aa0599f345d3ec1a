"""`Dl2Env`: a Gymnasium environment over the simulator (DL2 §4.1).

An episode is one workload. Each step is one action of the slot's task-by-task allocation
(`dl2.env.decision`): add a worker, a PS or both to a job of the current window, or stop. When the last window
is closed the simulator runs the slot and the step returns the slot's reward; slots in which no decision is
possible run without asking. `info["action_mask"]` marks the possible actions; an impossible action counts as
stop. Rewards (`EnvConfig.reward`):

- "progress" (DL2 §4.3): the sum over jobs of the slot's epoch progress divided by the job's declared epochs;
- "jct": minus the job-time spent in the system during the slot, in slots (divided by `reward_scale`), whose
  undiscounted sum is minus the total JCT: the objective itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import gymnasium
import numpy as np

from dl2.core import Workload
from dl2.env.config import EnvConfig
from dl2.env.decision import SlotDecision, action_count
from dl2.env.observation import Observer
from dl2.schedulers.registry import PLACERS
from dl2.sim.config import Mode
from dl2.sim.run import World
from dl2.sim.simulator import Simulation, SlotOutcome

WorkloadSource = Sequence[Workload] | Callable[[np.random.Generator], Workload]
"""Fixed workloads (one is drawn per episode) or a generator called with the environment's random generator."""


class Dl2Env(gymnasium.Env[np.ndarray, np.int64]):
    metadata = {"render_modes": []}  # noqa: RUF012 (Gymnasium declares it as an instance variable)

    def __init__(self, workloads: WorkloadSource, config: EnvConfig | None = None, world: World | None = None) -> None:
        """`world`: how the jobs really run (None: the catalogue of the simulator's mode)."""
        self.config = config or EnvConfig()
        if self.config.reward not in ("progress", "jct"):
            raise ValueError(f"reward must be 'progress' or 'jct', got {self.config.reward!r}")
        self.workloads = workloads
        self.world = world or World.catalogue(self.config.sim.mode)
        self.observation_space = gymnasium.spaces.Box(
            low=0.0 if not self.config.observation.raw_dl2 else -np.inf,
            high=1.0 if not self.config.observation.raw_dl2 else np.inf,
            shape=(self.config.observation.size,),
            dtype=np.float32,
        )
        self.action_space = gymnasium.spaces.Discrete(action_count(self.config.window))
        self.compat = self.config.sim.mode is Mode.COMPAT
        self.placer = PLACERS[self.config.placer]()
        self.simulation: Simulation | None = None
        self.decision: SlotDecision | None = None
        self._carried_reward = 0.0
        self.observer = Observer(self.config.observation)

    # -- Gymnasium API -------------------------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        workload = self._draw_workload(options or {})
        sim_seed = int(self.np_random.integers(2**31 - 1))
        # a policy that starves every job is truncated at max_slots, not stopped by the simulator's stall guard
        config = replace(
            self.config.sim, seed=sim_seed, stall_slots=max(self.config.sim.stall_slots, self.config.max_slots + 1)
        )
        self.simulation = Simulation(workload, config, self.world.speed, self.world.interference)
        self.slots = 0
        self.slot_rewards: list[float] = []
        # slots that ran before the first decision: their reward is paid with the first step
        self._carried_reward, _, _ = self._next_decision()
        return self._observation(), self._info()

    def step(self, action: np.int64 | int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.decision is None or self.simulation is None:
            raise RuntimeError("call reset() first")
        self.decision.step(int(action))
        reward, terminated, truncated = self._carried_reward, False, False
        self._carried_reward = 0.0
        if self.decision.done:
            slot_reward, terminated, truncated = self._next_decision()
            reward += slot_reward
        return self._observation(), reward, terminated, truncated, self._info()

    # -- internals -----------------------------------------------------------------------------------------------

    def _draw_workload(self, options: dict[str, Any]) -> Workload:
        if callable(self.workloads):
            return self.workloads(self.np_random)
        index = options.get("workload")
        if index is None:
            index = int(self.np_random.integers(len(self.workloads)))
        return self.workloads[index]

    def _next_decision(self) -> tuple[float, bool, bool]:
        """Run the finished slot (if any), then slots needing no decision, until a decision or the end."""
        assert self.simulation is not None
        reward = 0.0
        if self.decision is not None and self.decision.done:
            reward += self._run_slot()
        while not self.simulation.done:
            view = self.simulation.begin_slot()
            self.decision = SlotDecision(
                view,
                self.config.window,
                self.compat,
                self.placer,
                work_conserving=self.config.work_conserving,
                packed=self.compat and self.config.observation.packed,
            )
            if self.slots >= self.config.max_slots:  # cut here; the observation shows the state it was cut in
                return reward, False, True
            if not self.decision.done:
                return reward, False, False
            reward += self._run_slot()
        self.decision = None
        return reward, True, False

    def _run_slot(self) -> float:
        assert self.simulation is not None and self.decision is not None
        outcome = self.simulation.apply(self.decision.allocation())
        self.slots += 1
        reward = self.slot_reward(outcome)
        self.slot_rewards.append(reward)
        return reward

    def slot_reward(self, outcome: SlotOutcome) -> float:
        assert self.simulation is not None
        if self.config.reward == "jct":
            return -outcome.job_seconds / self.simulation.slot_s / self.config.reward_scale
        declared = self._declared
        return sum(gained / declared[job_id] for job_id, gained in outcome.progress_epochs.items())

    @property
    def _declared(self) -> dict[str, float]:
        assert self.simulation is not None
        cache = getattr(self, "_declared_cache", None)
        if cache is None or cache[0] is not self.simulation:
            cache = (self.simulation, {spec.job_id: spec.declared_epochs for spec in self.simulation.specs})
            self._declared_cache = cache
        return cache[1]

    def _observation(self) -> np.ndarray:
        if self.decision is None:
            return np.zeros(self.config.observation.size, dtype=np.float32)
        return self.observer(self.decision)

    def _info(self) -> dict[str, Any]:
        if self.decision is not None:
            mask = self.decision.mask()
        else:  # the episode is over: only stop
            mask = np.zeros(action_count(self.config.window), dtype=np.int8)
            mask[-1] = 1
        return {"action_mask": mask, "slot": self.simulation.slot if self.simulation else 0}
