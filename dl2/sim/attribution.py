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


@dataclass(slots=True)
class SlotAttribution:
    """Slots by who proposed what the proposer applied: counted from a log (`slot_attribution`) or, slot by slot,
    by the search itself (`dl2.rl.lookahead.LookaheadScheduler.tally`)."""

    slots: int = 0
    """Slots counted."""
    searched: int = 0
    """Slots whose proposer searched over candidates (`proposed_by` recorded)."""
    contested: int = 0
    """Searched slots where the candidates disagreed."""
    decided: dict[str, int] = field(default_factory=dict)
    """Per candidate, the contested slots whose proposal it made (alone or with others that proposed the same)."""
    alone: dict[str, int] = field(default_factory=dict)
    """Per candidate, the contested slots whose proposal only it made."""

    def count(self, decided_by: Sequence[str], contested: bool) -> None:
        """One more slot: `decided_by` the candidates whose proposal was applied (empty: the proposer decided alone,
        no search); `contested`, whether they disagreed."""
        self.slots += 1
        if not decided_by:
            return
        self.searched += 1
        if not contested:
            return
        self.contested += 1
        for name in decided_by:
            self.decided[name] = self.decided.get(name, 0) + 1
        if len(decided_by) == 1:
            self.alone[decided_by[0]] = self.alone.get(decided_by[0], 0) + 1

    def share(self, candidate: str) -> float:
        """The share of contested slots whose chosen proposal `candidate` made (0 with none contested)."""
        return self.decided.get(candidate, 0) / self.contested if self.contested else 0.0


def slot_attribution(records: Sequence[DecisionRecord]) -> SlotAttribution:
    """How a log's slots were decided (one cluster's records: `records_by_slot`)."""
    tally = SlotAttribution()
    for slot_records in records_by_slot(records).values():
        first = slot_records[0]
        decided_by = first.proposed_by.split(JOINER) if first.proposed_by else []
        tally.count(decided_by, bool(first.predicted_total_s))
    return tally
