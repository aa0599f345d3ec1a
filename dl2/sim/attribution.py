"""Who decided a cluster's slots, read back from its decision records.

A proposer that searches over candidates (`dl2.rl.lookahead`: heuristics and the network) records in each of a
slot's records which candidates proposed the allocation it chose (`DecisionRecord.proposed_by`) and, where they
disagreed, the total completion time each candidate's continuation predicted (`predicted_total_s`). Summed over
a log, that says how often the network decides where it matters, and by how much the search judged the winner
better than the base (the first candidate, which decides the continuations).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from dl2.core import DecisionRecord
from dl2.core.log_format import records_by_slot
from dl2.sim.decision_log import JOINER


@dataclass(frozen=True, slots=True)
class SlotAttribution:
    """A log's slots by who proposed what the proposer applied."""

    slots: int
    """Slots with records."""
    searched: int
    """Slots whose proposer searched over candidates (`proposed_by` recorded)."""
    contested: int
    """Searched slots where the candidates disagreed."""
    decided: dict[str, int] = field(default_factory=dict)
    """Per candidate, the contested slots whose proposal it made (alone or with others that proposed the same)."""
    alone: dict[str, int] = field(default_factory=dict)
    """Per candidate, the contested slots whose proposal only it made."""

    def share(self, candidate: str) -> float:
        """The share of contested slots whose chosen proposal `candidate` made (0 with none contested)."""
        return self.decided.get(candidate, 0) / self.contested if self.contested else 0.0


def slot_attribution(records: Sequence[DecisionRecord]) -> SlotAttribution:
    """How a log's slots were decided (one cluster's records: `records_by_slot`)."""
    decided: dict[str, int] = {}
    alone: dict[str, int] = {}
    searched = contested = 0
    by_slot = records_by_slot(records)
    for slot_records in by_slot.values():
        first = slot_records[0]
        if not first.proposed_by:
            continue
        searched += 1
        if not first.predicted_total_s:
            continue
        contested += 1
        names = first.proposed_by.split(JOINER)
        for name in names:
            decided[name] = decided.get(name, 0) + 1
        if len(names) == 1:
            alone[names[0]] = alone.get(names[0], 0) + 1
    return SlotAttribution(len(by_slot), searched, contested, decided, alone)
