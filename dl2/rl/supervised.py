"""Supervised warm-up (DL2 §4.2): train the policy to imitate a teacher with cross-entropy over masked logits."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch

from dl2.env.observation import InputShape
from dl2.rl.config import SupervisedConfig
from dl2.rl.demonstrations import Demonstrations
from dl2.rl.networks import PolicyNetwork


@dataclass(slots=True)
class SupervisedHistory:
    """Per epoch: mean training loss and accuracy on the held-out demonstrations."""

    train_loss: list[float] = field(default_factory=list)
    held_out_accuracy: list[float] = field(default_factory=list)


def minibatches(rng: np.random.Generator, count: int, size: int) -> Iterator[torch.Tensor]:
    """One pass over `count` samples in a fresh random order: index tensors of `size` (the last may be shorter)."""
    order = torch.from_numpy(rng.permutation(count))
    for start in range(0, count, size):
        yield order[start : start + size]


def accuracy(policy: PolicyNetwork, data: Demonstrations, batch_size: int = 4096) -> float:
    """Share of states where the policy's most likely possible action is the teacher's."""
    if len(data) == 0:
        return float("nan")
    correct = 0
    with torch.no_grad():
        for start in range(0, len(data), batch_size):
            observations = torch.from_numpy(data.observations[start : start + batch_size])
            masks = torch.from_numpy(data.masks[start : start + batch_size])
            predicted = policy.masked_logits(observations, masks).argmax(dim=1).numpy()
            correct += int((predicted == data.actions[start : start + batch_size]).sum())
    return correct / len(data)


def imitation_loss(logits: torch.Tensor, masks: torch.Tensor, actions: torch.Tensor, smoothing: float) -> torch.Tensor:
    """Cross-entropy with the teacher's action, label-smoothed over the possible actions only (smoothing over
    impossible ones, as `torch.nn.CrossEntropyLoss(label_smoothing=...)` would, meets their masked logits)."""
    log_probs = torch.log_softmax(logits, dim=1)
    loss = -log_probs.gather(1, actions[:, None]).squeeze(1)
    if smoothing > 0:
        possible = masks.to(log_probs.dtype)
        spread = -(log_probs * possible).sum(dim=1) / possible.sum(dim=1)
        loss = (1 - smoothing) * loss + smoothing * spread
    return loss.mean()


def train_supervised(
    train: Demonstrations,
    held_out: Demonstrations,
    config: SupervisedConfig,
    shape: InputShape,
    policy: PolicyNetwork | None = None,
    on_epoch: Callable[[int, float, float], None] | None = None,
) -> tuple[PolicyNetwork, SupervisedHistory]:
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    if policy is None:
        policy = PolicyNetwork(shape, config.network)
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.learning_rate)
    history = SupervisedHistory()
    observations = torch.from_numpy(train.observations)
    masks = torch.from_numpy(train.masks)
    actions = torch.from_numpy(train.actions)
    for epoch in range(config.epochs):
        total, batches = 0.0, 0
        for batch in minibatches(rng, len(train), config.batch_size):
            loss = imitation_loss(
                policy.masked_logits(observations[batch], masks[batch]),
                masks[batch],
                actions[batch],
                config.label_smoothing,
            )
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            total += float(loss.detach())
            batches += 1
        history.train_loss.append(total / max(batches, 1))
        history.held_out_accuracy.append(accuracy(policy, held_out))
        if on_epoch is not None:
            on_epoch(epoch, history.train_loss[-1], history.held_out_accuracy[-1])
    return policy, history
