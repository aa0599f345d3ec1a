"""Torch-free evaluation of `layers.mlp` stacks: the weights of a state dict as NumPy arrays and their forward pass.

At batch size one a NumPy product is several times cheaper than a torch call, and rollout workers, the simulator's
speed model and the placer then need no torch. The arithmetic is float32 throughout, as in torch."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

Layers = list[tuple[np.ndarray, np.ndarray]]
"""(weight as inputs x outputs, bias) per linear layer."""


def dense(x: np.ndarray, layers: Layers, final_activation: bool) -> np.ndarray:
    """`x` through `layers`, a ReLU after each but the last (and after the last if `final_activation`)."""
    last = len(layers) - 1
    for index, (weight, bias) in enumerate(layers):
        x = x @ weight + bias
        if index < last or final_activation:
            np.maximum(x, 0.0, out=x)
    return x


def linear_layers(state: Mapping[str, object], prefix: str) -> Layers:
    """The Linear layers of an `nn.Sequential` at `prefix` (indices 0, 2, 4, ...), in order."""
    indices = sorted(
        {int(key[len(prefix) :].split(".")[0]) for key in state if key.startswith(prefix) and key.endswith(".weight")}
    )
    return [
        (
            to_array(state[f"{prefix}{i}.weight"]).T.astype(np.float32),
            to_array(state[f"{prefix}{i}.bias"]).astype(np.float32),
        )
        for i in indices
    ]


def single_linear(state: Mapping[str, object], name: str) -> Layers:
    """The one `nn.Linear` named `name` (not in a `nn.Sequential`), as a one-layer stack."""
    return [
        (to_array(state[f"{name}.weight"]).T.astype(np.float32), to_array(state[f"{name}.bias"]).astype(np.float32))
    ]


def to_array(value: object) -> np.ndarray:
    """A tensor (detached, on the CPU) or anything array-like as a NumPy array."""
    if hasattr(value, "detach"):
        return value.detach().cpu().numpy()  # type: ignore[no-any-return]
    return np.asarray(value)
