"""The controller's decision log: one `DecisionRecord` per job per slot, exactly once across restarts.

A slot's observed progress is only known at the next slot, so a slot's records are written in two steps:

1. when slot t is decided, its draft records (state, incumbent's decision, proposal, applied decision) and the
   targets to apply go to a journal, `<log>/.journal/slot-<t>.json`, created atomically and only if absent
   before any job is resized: a controller that restarts within the slot, or the replica that takes over,
   finds it and applies the same decisions, and a deposed leader that still writes finds its slot taken;
2. at slot t+1 the journal is completed with each job's observed progress (its epochs now less its epochs at t)
   and the nodes its pods ran on through slot t (where they are at t+1, before anything is resized: the placement
   that calibration and Harmony's refit learn from), and written as the segment named by the slot,
   `segment-<t>-000000.jsonl` (created once, never replaced); then the journal is removed.

The log lives in a folder or at an object-storage URL (`dl2.sim.record_store`); on a managed cluster a bucket
shared by the replicas replaces a ReadWriteMany volume.

A restart between any two of these steps repeats only steps that are idempotent, so no record is lost or
written twice. The segments are the format `dl2.sim.decision_log` reads (`pipelines.collect` takes them from
`data.incoming`); the journal folder is hidden, so collection never reads a draft. A journal older than the
previous slot (the controller was away for a slot) is dropped: its observed progress is unknown.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from dl2.core import Allocation, Attribution, ClusterSpec, ClusterView, DecisionRecord, Dl2Error, JobAllocation
from dl2.core.decision import worker_accelerators
from dl2.core.log_format import CLUSTER_FILE, cluster_to_json, parse_record, records_text, segment_name
from dl2.kube.quarantine import RecordedProgress
from dl2.kube.reconcile import Reason, Target
from dl2.sim.decision_log import decision_record, read_store_log
from dl2.sim.record_store import RecordStore

JOURNAL = ".journal"
PROBE = ".probe"
"""Where `DecisionLog.probe` writes (hidden, as the journal: collection never reads it)."""


class StoreUnusable(Dl2Error):
    """The decision log cannot be written and read back: `dl2 serve` refuses to start (one line, exit status 2)."""


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One job of a decided slot: its record (observed progress still 0) and where to apply its target."""

    record: DecisionRecord
    namespace: str
    name: str
    target: Target


@dataclass(frozen=True, slots=True)
class SlotJournal:
    slot: int
    entries: tuple[JournalEntry, ...]

    @property
    def targets(self) -> list[Target]:
        return [entry.target for entry in self.entries]


def draft_records(
    view: ClusterView,
    incumbent: Allocation,
    proposal: Allocation,
    targets: Sequence[Target],
    mode: str,
    proposer: str,
    incumbent_name: str,
    cluster: str,
    propensities: Mapping[str, float] | None = None,
    attribution: Attribution | None = None,
) -> list[DecisionRecord]:
    """The slot's records before its outcome is known (`observed_epochs` 0), one per job of the view, with the
    probability of each applied size where exploration drew it (`dl2.kube.exploration`) and, where the model runs
    inside a search, which candidate proposed the allocation (`Decision.attribution`)."""
    return [
        decision_record(
            view,
            job,
            incumbent.get(job.spec.job_id),
            proposal.get(job.spec.job_id),
            target.size,
            proposer,
            incumbent_name,
            mode,
            0.0,
            cluster,
            propensity=(propensities or {}).get(job.spec.job_id, 1.0),
            attribution=attribution,
        )
        for job, target in zip(view.jobs, targets, strict=True)
    ]


def observed(
    record: DecisionRecord,
    progress: Mapping[str, float],
    placed: Mapping[str, JobAllocation] | None = None,
    cluster: ClusterSpec | None = None,
) -> DecisionRecord:
    """The record completed with the progress seen since (0 for a job that is gone) and, where the job still holds
    pods, the nodes they ran on through the slot (`placed`: what the next slot observes before anything is
    resized; a job that finished within the slot has none left, so its placement stays unknown) and, with
    `cluster` (the one `placed` indexes), the accelerator type of each worker's node."""
    now = progress.get(record.job_id)
    gained = 0.0 if now is None else max(now - record.progress_epochs, 0.0)
    nodes = (placed or {}).get(record.job_id)
    if nodes is None or not (nodes.worker_nodes or nodes.ps_nodes):
        return replace(record, observed_epochs=gained)
    workers = nodes.worker_nodes
    types = worker_accelerators(cluster, workers) if cluster is not None else ()
    return replace(
        record,
        observed_epochs=gained,
        applied_worker_nodes=workers,
        applied_ps_nodes=nodes.ps_nodes,
        applied_worker_accelerators=types,
    )


class DecisionLog:
    """The log of one cluster: segments, `cluster.json` and the journal of the slot in progress, in a folder or
    at an object-storage URL (`dl2.sim.record_store`: both give the atomic create-if-absent the journal needs)."""

    def __init__(self, location: str | Path) -> None:
        self.store = RecordStore(location)
        self._last: SlotJournal | None = None
        """The journal this process last wrote or read (the file is for a restart; this spares parsing it back)."""
        self._described: str | None = None
        self._described_cluster: ClusterSpec | None = None
        """The cluster `_described` was made from (observing gives the same object while the nodes stay)."""

    @staticmethod
    def _journal_name(slot: int) -> str:
        return f"{JOURNAL}/slot-{slot:09d}.json"

    def journal(self, slot: int) -> SlotJournal | None:
        name = self._journal_name(slot)
        if self._last is not None and self._last.slot == slot:
            return self._last if self.store.exists(name) else None
        text = self.store.read(name)
        if text is None:
            return None
        where = f"{self.store}/{name}"
        data = json.loads(text)
        entries = tuple(
            JournalEntry(
                parse_record(json.dumps(item["record"]), where, number),
                item["namespace"],
                item["name"],
                Target(item["record"]["job_id"], item["workers"], item["ps"], Reason(item["reason"])),
            )
            for number, item in enumerate(data["entries"], start=1)
        )
        self._last = SlotJournal(int(data["slot"]), entries)
        return self._last

    def write_journal(self, journal: SlotJournal) -> SlotJournal:
        """Store a slot's decisions, once: if the slot already has a journal, that one stands (and is returned)."""
        document = {
            "slot": journal.slot,
            "entries": [
                {
                    "record": entry.record.to_json_dict(),
                    "namespace": entry.namespace,
                    "name": entry.name,
                    "workers": entry.target.workers,
                    "ps": entry.target.ps,
                    "reason": entry.target.reason.value,
                }
                for entry in journal.entries
            ],
        }
        if self.store.create(self._journal_name(journal.slot), json.dumps(document, sort_keys=True)):
            self._last = journal
            return journal
        self._last = None  # another writer's journal stands: read it
        stored = self.journal(journal.slot)
        assert stored is not None
        return stored

    def pending(self) -> list[int]:
        """Slots with a journal, in order."""
        names = self.store.names(JOURNAL, prefix="slot-", suffix=".json")
        return sorted(int(name.removeprefix("slot-").removesuffix(".json")) for name in names)

    def complete(
        self,
        slot: int,
        progress: Mapping[str, float],
        placed: Mapping[str, JobAllocation] | None = None,
        cluster: ClusterSpec | None = None,
    ) -> tuple[int, int]:
        """At slot `slot`: write the previous slot's records with their observed progress and placement (`observed`;
        `cluster`: the one `placed` indexes, for the workers' accelerator types) and drop older journals. Returns
        (records written, records dropped)."""
        written = dropped = 0
        for earlier in self.pending():
            if earlier >= slot:
                continue
            journal = self.journal(earlier)
            if journal is not None and earlier == slot - 1 and journal.entries:
                records = [observed(e.record, progress, placed, cluster) for e in journal.entries]
                wrote = self.store.create(segment_name(earlier), records_text(records))
                written += len(journal.entries) if wrote else 0
            elif journal is not None and earlier != slot - 1:
                dropped += len(journal.entries)
            self.store.delete(self._journal_name(earlier))
            if self._last is not None and self._last.slot == earlier:
                self._last = None
        return written, dropped

    def records(self) -> list[DecisionRecord]:
        return read_store_log(self.store)

    def probe(self, writer: str) -> None:
        """Create a probe object, read it back, check that creating it again is refused, and remove it: what every
        slot asks of the store (the journal's create-if-absent included), asked once at start, so that a store
        that cannot serve stops `dl2 serve` with one line rather than failing every slot. Raises `StoreUnusable`."""
        name = f"{PROBE}/{re.sub(r'[^A-Za-z0-9_.-]', '-', writer)}-{secrets.token_hex(4)}"
        token = secrets.token_hex(16)
        try:
            created = self.store.create(name, token)
            back = self.store.read(name)
            again = self.store.create(name, "again")
            self.store.delete(name)
        except Exception as error:  # whatever the driver raises (no endpoint, no bucket, no credentials, no access)
            raise StoreUnusable(
                f"decision log {self.store}: cannot write and read back a probe object ({type(error).__name__}: "
                f"{error}); check the URL, the bucket, the endpoint (AWS_ENDPOINT_URL) and the credentials"
            ) from error
        if not created or back != token:
            raise StoreUnusable(f"decision log {self.store}: a probe object written was not read back as written")
        if again:
            raise StoreUnusable(
                f"decision log {self.store}: creating an object that exists replaced it: the store ignores "
                "If-None-Match: *, and the journal needs create-if-absent (use S3, MinIO, R2 or versitygw)"
            )

    def describe_cluster(self, cluster: ClusterSpec) -> bool:
        """Write `cluster.json` if it is missing or says something else; whether it was written."""
        if cluster is self._described_cluster:
            return False  # the document would be `_described` again (JSON with an indent is slow to make)
        document = json.dumps(cluster_to_json(cluster), indent=2, sort_keys=True) + "\n"
        written = document != self._described and self.store.read(CLUSTER_FILE) != document
        if written:
            self.store.put(CLUSTER_FILE, document)
        # remembered once the store holds it: a failed write is tried again next slot
        self._described, self._described_cluster = document, cluster
        return written


def recall(recorded: RecordedProgress, log: DecisionLog) -> None:
    """Note in `recorded` every record of the journals `log` holds (what a previous run decided and did not complete:
    the progress the `PROGRESS_BACKWARDS` check compares with after a restart)."""
    for slot in log.pending():
        journal = log.journal(slot)
        for entry in journal.entries if journal is not None else ():
            recorded.note(entry.record.job_id, entry.record.progress_epochs, slot)
