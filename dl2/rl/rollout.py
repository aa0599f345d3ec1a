"""Rollouts: one episode of the environment driven by a policy (NumPy inference, no torch needed).

Rollout workers run `run_episode` in separate processes (or on Ray); the learner turns the episodes into
returns and gradients. An episode records, per decision, the observation, mask, action, its behaviour
log-probability, the slot it belongs to and whether job-aware exploration chose it; and per slot the reward.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dl2.env.config import EnvConfig
from dl2.env.env import Dl2Env
from dl2.rl.config import ExplorationConfig
from dl2.rl.exploration import exploratory_action
from dl2.rl.inference import NumpyPolicy
from dl2.sim.run import World
from dl2.workload.source import workload


@dataclass(slots=True)
class Episode:
    observations: np.ndarray
    masks: np.ndarray
    actions: np.ndarray
    log_probs: np.ndarray
    slot_of: np.ndarray
    """Index (in `slot_rewards`) of the slot each decision belongs to."""
    explored: np.ndarray
    slot_rewards: np.ndarray
    avg_jct_s: float
    """Average JCT of the episode's jobs (NaN if truncated)."""
    num_slots: int
    workload: str
    truncated: bool = False
    """The episode was cut at the environment's `max_slots`; `final_observation` is where it stopped."""
    final_observation: np.ndarray | None = None

    @property
    def num_decisions(self) -> int:
        return len(self.actions)


@dataclass(frozen=True, slots=True)
class EpisodeTask:
    """Everything a worker needs to run one episode (picklable)."""

    policy: NumpyPolicy
    env: EnvConfig
    source: str
    workload_seed: int
    episode_seed: int
    greedy: bool = False
    epsilon: float = 0.0
    exploration: ExplorationConfig = field(default_factory=lambda: ExplorationConfig(enabled=False))
    record: bool = True
    world: World | None = None
    """How the episode's jobs really run (None: the catalogue)."""


def run_episode(task: EpisodeTask) -> Episode:
    policy = task.policy
    env = Dl2Env([workload(task.source, task.workload_seed)], task.env, task.world)
    rng = np.random.default_rng(task.episode_seed)
    observation, info = env.reset(seed=task.episode_seed)
    observations, masks, actions, log_probs, slot_of, explored = [], [], [], [], [], []
    ratio, ratio_slot = 1.0, -1
    done = False
    while not done:
        mask = info["action_mask"]
        slot = len(env.slot_rewards)
        exploring = task.epsilon > 0 and rng.random() < task.epsilon
        if exploring:
            if slot != ratio_slot:  # a fresh target PS:worker ratio each slot
                ratio, ratio_slot = float(np.exp(rng.uniform(np.log(0.25), np.log(4.0)))), slot
            assert env.decision is not None
            action = exploratory_action(env.decision, mask, ratio, task.exploration, rng)
            log_prob = 0.0
        else:
            action, log_prob = policy.act(observation, mask, None if task.greedy else rng)
        if task.record:
            observations.append(observation)
            masks.append(mask)
            actions.append(action)
            log_probs.append(log_prob)
            slot_of.append(slot)
            explored.append(exploring)
        observation, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
    cut = bool(truncated)
    assert env.simulation is not None
    average = float("nan")
    if env.simulation.done:
        result = env.simulation.result("policy")
        average = float(np.mean([job.jct_s for job in result.jobs]))
    size = env.config.observation.size
    return Episode(
        np.array(observations, dtype=np.float32).reshape(-1, size),
        np.array(masks, dtype=np.int8).reshape(-1, 3 * env.config.window + 1),
        np.array(actions, dtype=np.int64),
        np.array(log_probs, dtype=np.float32),
        np.array(slot_of, dtype=np.int64),
        np.array(explored, dtype=bool),
        np.array(env.slot_rewards, dtype=np.float64),
        average,
        env.slots,
        env.simulation.workload.name,
        cut,
        env.observer(env.decision) if cut and env.decision is not None else None,
    )


def slot_returns(rewards: np.ndarray, gamma: float, myopic: bool) -> np.ndarray:
    """Per slot: its own reward (DL2's code, myopic) or the discounted sum of this and later rewards."""
    if myopic:
        return rewards.copy()
    returns = np.empty_like(rewards)
    running = 0.0
    for index in range(len(rewards) - 1, -1, -1):
        running = rewards[index] + gamma * running
        returns[index] = running
    return returns
