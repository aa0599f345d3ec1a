"""Decision logs in a folder and in object storage (versitygw, a real S3 server): the create-if-absent that makes a
failover exact, the journal's protocol over it, and what `collect` reads back."""

from __future__ import annotations

import math
import threading
from dataclasses import replace

import pytest

from dl2.core import Allocation, Attribution, InputError, JobAllocation
from dl2.core.log_format import read_log
from dl2.kube.models import smoke_view
from dl2.kube.reconcile import Reason, Target
from dl2.kube.records import DecisionLog, JournalEntry, SlotJournal, draft_records
from dl2.sim.decision_log import read_store_log
from dl2.sim.record_store import RecordStore, is_url


@pytest.fixture(params=["folder", "s3"])
def location(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "folder":
        return str(tmp_path / "log")
    return str(request.getfixturevalue("s3_url"))


def test_urls_and_folders_are_told_apart():
    assert is_url("s3://bucket/x") and is_url("gs://b") and not is_url("/var/lib/dl2") and not is_url("work/d")
    assert not is_url("file:///var/lib/dl2")
    assert not RecordStore("file:///tmp/x").remote
    with pytest.raises(InputError, match="nosuchscheme://b: no filesystem for this URL"):
        RecordStore("nosuchscheme://b")


def test_a_name_is_created_once_and_the_first_writer_wins(location):
    store = RecordStore(location)
    assert store.read(".journal/slot-000000001.json") is None and not store.exists(".journal/slot-000000001.json")
    assert store.create(".journal/slot-000000001.json", "first")
    assert not store.create(".journal/slot-000000001.json", "second")
    assert store.read(".journal/slot-000000001.json") == "first"
    store.put("cluster.json", "a")
    store.put("cluster.json", "b")  # put replaces
    assert store.read("cluster.json") == "b"
    assert store.create("segment-000000002-000000.jsonl", "") and store.create("segment-000000001-000000.jsonl", "x")
    assert store.names(prefix="segment-") == ["segment-000000001-000000.jsonl", "segment-000000002-000000.jsonl"]
    assert store.names(".journal", suffix=".json") == ["slot-000000001.json"]
    store.delete(".journal/slot-000000001.json")
    store.delete(".journal/slot-000000001.json")  # gone already: nothing to do
    assert store.names(".journal") == [] and store.names("nowhere") == []


def test_concurrent_writers_of_one_slot_get_exactly_one_winner(location):
    """Two replicas (or a deposed leader still writing) racing for a slot's journal: one wins, the rest read it."""
    store = RecordStore(location)
    wins: list[int] = []
    barrier = threading.Barrier(8)

    def write(number: int) -> None:
        barrier.wait()
        if RecordStore(location).create(".journal/slot-000000007.json", str(number)):
            wins.append(number)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(wins) == 1 and store.read(".journal/slot-000000007.json") == str(wins[0])


def journal_of(slot: int, view=None) -> SlotJournal:
    view = view or smoke_view()
    targets = [Target(j.spec.job_id, 3, j.spec.max_ps and 1, Reason.PROPOSED) for j in view.jobs]
    proposal = Allocation({j.spec.job_id: JobAllocation((0, 0, 0), (0,) if j.spec.max_ps else ()) for j in view.jobs})
    records = draft_records(view, Allocation(), proposal, targets, "active", "dl2-policy/1", "drf", "test")
    return SlotJournal(slot, tuple(JournalEntry(r, "ns", r.job_id, t) for r, t in zip(records, targets, strict=True)))


def test_a_slot_is_journaled_once_and_completed_once(location):
    log = DecisionLog(location)
    first = log.write_journal(journal_of(5))
    view = smoke_view()
    other = journal_of(5, replace(view, jobs=view.jobs[:1]))
    assert log.write_journal(other) == first  # the first journal of a slot stands (a restart re-decides nothing)
    successor = DecisionLog(location)  # the replica that takes over, with decisions of its own for the slot
    assert successor.write_journal(other) == first and successor.pending() == [5]
    assert log.complete(5, {}) == (0, 0) and log.pending() == [5]  # its own slot: not yet
    progress = {"smoke-ps": 3.5, "smoke-ar": 0.25}
    assert log.complete(6, progress) == (2, 0)
    assert successor.journal(5) is None  # completed: applied again by no one
    records = read_store_log(RecordStore(location))
    assert [(r.job_id, r.observed_epochs) for r in records] == [("smoke-ps", 1.5), ("smoke-ar", 0.25)]
    assert [r.applied_workers for r in records] == [3, 3] and log.pending() == [] and log.records() == records
    log.write_journal(journal_of(5))  # a controller that restarts after the segment was written
    assert log.complete(6, progress) == (0, 0) and len(log.records()) == 2  # nothing twice
    assert successor.complete(6, {"smoke-ps": 9.0}) == (0, 0) and log.records() == records


def test_an_old_journal_whose_outcome_was_never_seen_is_dropped(location):
    log = DecisionLog(location)
    log.write_journal(journal_of(3))
    assert log.complete(9, {"smoke-ps": 9.0}) == (0, 2)
    assert log.pending() == [] and log.records() == []


def test_a_job_gone_by_the_next_slot_observed_no_progress(location):
    log = DecisionLog(location)
    log.write_journal(journal_of(1))
    log.complete(2, {"smoke-ar": 1.0})
    assert {r.job_id: r.observed_epochs for r in log.records()} == {"smoke-ps": 0.0, "smoke-ar": 1.0}


def test_a_folder_log_is_the_segments_every_reader_knows(tmp_path):
    log = DecisionLog(tmp_path)
    log.write_journal(journal_of(1))
    log.complete(2, {"smoke-ar": 1.0})
    assert read_log(tmp_path) == log.records() and len(list(tmp_path.glob("segment-*.jsonl"))) == 1


def test_an_object_another_replica_removed_is_gone_for_this_one(s3_session, s3_url):
    """No listing is cached: after this replica listed the journals, another completes a slot and removes its
    journal; `exists` and `pending` must not answer from the old listing."""
    store = RecordStore(s3_url)
    assert store.create(".journal/slot-000000002.json", "x")
    assert store.names(".journal") == ["slot-000000002.json"] and store.exists(".journal/slot-000000002.json")
    bucket, _, prefix = s3_url.removeprefix("s3://").partition("/")
    (s3_session.folder / bucket / prefix / ".journal" / "slot-000000002.json").unlink()  # through another client
    assert not store.exists(".journal/slot-000000002.json") and store.names(".journal") == []


def test_which_candidate_proposed_survives_the_journal_and_a_never_ending_continuation_is_null(location):
    """A model inside a search: its records say which candidate proposed the slot's allocation and what each one's
    continuation predicted, through the journal (a restart reads it back) into the segment."""
    view = smoke_view()
    targets = [Target(j.spec.job_id, 1, j.spec.max_ps and 1, Reason.PROPOSED) for j in view.jobs]
    attribution = Attribution(("optimus", "dl2"), {"optimus": 5400.0, "speedup-hull": math.inf, "dl2": 5400.0})
    records = draft_records(
        view, Allocation(), Allocation(), targets, "active", "dl2-policy/1", "drf", "test", None, attribution
    )
    log = DecisionLog(location)
    entries = tuple(JournalEntry(r, "ns", r.job_id, t) for r, t in zip(records, targets, strict=True))
    log.write_journal(SlotJournal(5, entries))
    assert DecisionLog(location).journal(5).entries[0].record == records[0]
    assert log.complete(6, {}) == (2, 0)
    for record in read_store_log(RecordStore(location)):
        assert record.proposed_by == "optimus+dl2"
        assert record.predicted_total_s == {"optimus": 5400.0, "speedup-hull": None, "dl2": 5400.0}
