"""What the actor-critic keeps between iterations: the running scale of returns and the replay of recent decisions."""

from __future__ import annotations

import math

import numpy as np


class ReturnScale:
    """Running mean and deviation of returns, so the value network learns numbers of order one."""

    def __init__(self) -> None:
        self.count, self.mean, self.m2 = 0, 0.0, 0.0

    def update(self, values: np.ndarray) -> None:
        batch_count = len(values)
        if batch_count == 0:
            return
        batch_mean, batch_var = float(values.mean()), float(values.var())
        delta = batch_mean - self.mean
        total = self.count + batch_count
        self.mean += delta * batch_count / total
        self.m2 += batch_var * batch_count + delta**2 * self.count * batch_count / total
        self.count = total

    @property
    def std(self) -> float:
        return math.sqrt(self.m2 / self.count) if self.count > 1 and self.m2 > 0 else 1.0


class ReplayBuffer:
    def __init__(self, capacity: int, observation_size: int, num_actions: int) -> None:
        self.capacity = capacity
        self.observations = np.zeros((capacity, observation_size), dtype=np.float32)
        self.masks = np.zeros((capacity, num_actions), dtype=np.int8)
        self.actions = np.zeros(capacity, dtype=np.int64)
        self.returns = np.zeros(capacity, dtype=np.float32)
        self.size = 0
        self.cursor = 0

    def add(self, observations: np.ndarray, masks: np.ndarray, actions: np.ndarray, returns: np.ndarray) -> None:
        for start in range(0, len(actions), self.capacity):
            chunk = slice(start, min(start + self.capacity, len(actions)))
            count = chunk.stop - chunk.start
            positions = (self.cursor + np.arange(count)) % self.capacity
            self.observations[positions] = observations[chunk]
            self.masks[positions] = masks[chunk]
            self.actions[positions] = actions[chunk]
            self.returns[positions] = returns[chunk]
            self.cursor = int((self.cursor + count) % self.capacity)
            self.size = min(self.size + count, self.capacity)

    def sample(self, count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        index = rng.integers(0, self.size, size=min(count, self.size))
        return self.observations[index], self.masks[index], self.actions[index], self.returns[index]
