"""Fully connected stacks in torch, in the layout that `numpy_inference.linear_layers` reads back."""

from __future__ import annotations

import itertools

from torch import nn


def mlp(sizes: list[int], final_activation: bool) -> nn.Sequential:
    """Linear layers `sizes[0] -> sizes[1] -> ...` with a ReLU after each but the last (and after the last too
    if `final_activation`). The Linear layers sit at indices 0, 2, 4, ... of the `nn.Sequential`: saved state
    dicts name them so, and NumPy inference and the weight-shape checks rely on it."""
    layers: list[nn.Module] = []
    for index, (inputs, outputs) in enumerate(itertools.pairwise(sizes)):
        layers.append(nn.Linear(inputs, outputs))
        if index < len(sizes) - 2 or final_activation:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)
