"""Policy and value networks of DL2's shape (§4.1): a fully connected trunk over the flattened window of jobs,
a softmax over the 3J+1 actions for the policy and a single linear output for the value network, which has the
same trunk shape with its own weights. Widths are configurable (DL2's code: 2 x 160, or 1 x 120 in its
experiments). Impossible actions are masked out of the softmax.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

MASKED_LOGIT = -1e9


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    """Shape of the policy and value networks."""

    hidden: tuple[int, ...] = (256, 256)
    """Widths of the hidden layers (ReLU)."""


def _trunk(input_size: int, hidden: tuple[int, ...]) -> tuple[nn.Sequential, int]:
    layers: list[nn.Module] = []
    width = input_size
    for size in hidden:
        layers += [nn.Linear(width, size), nn.ReLU()]
        width = size
    return nn.Sequential(*layers), width


class PolicyNetwork(nn.Module):
    def __init__(self, input_size: int, num_actions: int, config: NetworkConfig) -> None:
        super().__init__()
        self.trunk, width = _trunk(input_size, config.hidden)
        self.head = nn.Linear(width, num_actions)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        """Unmasked logits, shape (batch, actions)."""
        logits: torch.Tensor = self.head(self.trunk(observations))
        return logits

    def masked_logits(self, observations: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
        return self.forward(observations).masked_fill(masks == 0, MASKED_LOGIT)


class ValueNetwork(nn.Module):
    def __init__(self, input_size: int, config: NetworkConfig) -> None:
        super().__init__()
        self.trunk, width = _trunk(input_size, config.hidden)
        self.head = nn.Linear(width, 1)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        """Value estimates, shape (batch,)."""
        value: torch.Tensor = self.head(self.trunk(observations)).squeeze(-1)
        return value
