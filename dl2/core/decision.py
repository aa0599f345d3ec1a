"""Decision records: one per job per slot, as the Kubernetes controller and the simulator log them.

The log is append-only JSON Lines; `dl2.rl` reads it for supervised warm-up and online fine-tuning.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """One job's decision in one slot and what was observed afterwards."""

    time_s: float
    """Slot start, seconds since the log's origin."""
    job_id: str
    model: str
    """Job type (catalogue model name)."""
    model_version: str
    """Policy that proposed the decision (e.g. 'dl2-policy/3' or 'drf')."""
    arrival_s: float
    declared_epochs: float
    progress_epochs: float
    """Epochs done at the start of the slot."""
    incumbent_workers: int
    """Workers the incumbent scheduler would give."""
    incumbent_ps: int
    proposed_workers: int
    """Workers the policy proposed."""
    proposed_ps: int
    applied_workers: int
    """Workers actually applied (after guardrails / mode)."""
    applied_ps: int
    observed_epochs: float
    """Epoch progress observed during the slot."""
    slot_s: float

    def to_json_dict(self) -> dict[str, Any]:
        return asdict(self)
