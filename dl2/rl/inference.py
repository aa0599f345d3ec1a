"""Torch-free inference for the policy network: the same MLP evaluated with NumPy.

At batch size one a NumPy forward pass is several times cheaper than a torch call, which matters when a slot
takes a hundred decisions (DL2 §6.3 reports decisions in milliseconds), and rollout workers need no torch.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from dl2.rl.networks import MASKED_LOGIT


class NumpyPolicy:
    """Policy network weights as NumPy arrays: (weight, bias) per layer, ReLU between layers."""

    def __init__(self, layers: list[tuple[np.ndarray, np.ndarray]]) -> None:
        self.layers = [(np.ascontiguousarray(w.T, dtype=np.float32), b.astype(np.float32)) for w, b in layers]

    @classmethod
    def from_state_dict(cls, state: Mapping[str, object]) -> NumpyPolicy:
        """From a `PolicyNetwork` state dict (tensors or arrays): trunk.0, trunk.2, ..., head."""
        names = sorted(
            {key.rsplit(".", 1)[0] for key in state if key.startswith("trunk.")}, key=lambda n: int(n.split(".")[1])
        )
        names.append("head")
        layers = [(_array(state[f"{name}.weight"]), _array(state[f"{name}.bias"])) for name in names]
        return cls(layers)

    def logits(self, observation: np.ndarray) -> np.ndarray:
        x = observation.astype(np.float32, copy=False)
        last = len(self.layers) - 1
        for index, (weight, bias) in enumerate(self.layers):
            x = x @ weight + bias
            if index < last:
                np.maximum(x, 0.0, out=x)
        return x

    def act(
        self, observation: np.ndarray, mask: np.ndarray, rng: np.random.Generator | None = None
    ) -> tuple[int, float]:
        """An action and its log-probability: the most likely possible action, or a sample when `rng` is given."""
        logits = np.where(mask > 0, self.logits(observation), MASKED_LOGIT)
        shifted = logits - logits.max()
        probabilities = np.exp(shifted)
        probabilities /= probabilities.sum()
        if rng is None:
            action = int(np.argmax(logits))
        else:
            drawn = int(np.searchsorted(np.cumsum(probabilities), rng.random(), side="right"))
            action = min(drawn, len(logits) - 1)
            if mask[action] == 0:  # rounding at the very end of the cumulative sum
                action = int(np.argmax(logits))
        return action, float(np.log(max(probabilities[action], 1e-30)))


def _array(value: object) -> np.ndarray:
    if hasattr(value, "detach"):
        return value.detach().cpu().numpy()  # type: ignore[no-any-return]
    return np.asarray(value)
