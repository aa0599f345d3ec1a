"""The shape of the policy and value networks, without torch: what a model folder's config and the NumPy
inference (`dl2.rl.inference`, the rollout workers) need to know of them."""

from __future__ import annotations

from dataclasses import dataclass

MASKED_LOGIT = -1e9
"""Logit of an impossible action (masked out of the softmax)."""
KINDS = ("per-job", "per-job-local", "mlp")


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    """Shape of the policy and value networks."""

    hidden: tuple[int, ...] = (128, 128)
    """Widths of the hidden layers (ReLU); DL2's code used 2 x 160 (or 1 x 120 in its experiments)."""
    kind: str = "per-job"
    """'per-job' (shared per-job scorer), 'per-job-local' (its encoder sees only the job) or 'mlp' (DL2's flat
    network)."""


