"""The networks' configuration, without torch: NumPy inference and model folders read it (`dl2.rl.networks`)."""

from __future__ import annotations

from dataclasses import dataclass

MASKED_LOGIT = -1e9
KINDS = ("per-job", "per-job-local", "mlp")


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    """Shape of the policy and value networks."""

    hidden: tuple[int, ...] = (128, 128)
    """Widths of the hidden layers (ReLU); DL2's code used 2 x 160 (or 1 x 120 in its experiments)."""
    kind: str = "per-job"
    """'per-job' (shared per-job scorer), 'per-job-local' (its encoder sees only the job) or 'mlp' (DL2's flat
    network)."""
