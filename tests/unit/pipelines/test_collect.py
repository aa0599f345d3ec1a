"""Collecting cluster feedback: new records past the watermark become a versioned segment, a malformed log is
quarantined with its report while the good ones are used, and collecting again finds nothing new."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines import collect
from pipelines.stage import Layout
from tests.lifecycle_fixtures import decision_log, smoke_params


@pytest.fixture
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Layout:
    monkeypatch.setenv("DL2_MLRUNS", str(tmp_path / "mlruns"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return Layout(tmp_path)


def test_new_records_are_collected_once_and_a_malformed_log_is_quarantined(layout: Layout) -> None:
    params = smoke_params()
    incoming = layout.root / params.data.incoming
    good = decision_log(incoming / "cluster-a")
    lines = (incoming / "cluster-a").glob("segment-*.jsonl")
    first = json.loads(next(iter(sorted(lines))).read_text().splitlines()[0])
    (incoming / "broken.jsonl").write_text(json.dumps({**first, "held_workers": -3}) + "\n" + "{not json\n")

    result = collect.run(params, layout, window="w1")
    assert result.summary["collected"] == {"cluster-a": good}
    (where,) = result.summary["quarantined"].values()
    assert where.startswith("data/quarantine/w1/broken")
    target = collect.clusters_dir(layout) / "cluster-a"
    assert sorted(p.name for p in target.iterdir()) == ["cluster.json", "segment-000001-w1.jsonl"]
    assert len((target / "segment-000001-w1.jsonl").read_text().splitlines()) == good
    quarantined = layout.root / "data" / "quarantine" / "w1" / "broken"
    assert json.loads((quarantined / "validation.json").read_text())["success"] is False
    assert (quarantined / "segment-000001-w1.jsonl").read_text().endswith("{not json\n")  # nothing lost
    assert set(collect.watermark(layout)) == {"cluster-a", "broken.jsonl"}

    again = collect.run(params, layout, window="w2")  # nothing new: nothing changes
    assert again.summary["changed"] is False and again.summary["records"] == 0
    assert sorted(p.name for p in target.iterdir()) == ["cluster.json", "segment-000001-w1.jsonl"]

    with (incoming / "broken.jsonl").open("a") as stream:  # the log goes on; its new records are judged alone
        stream.write(json.dumps({**first, "time_s": first["time_s"] + 1e6}) + "\n")
        stream.write(json.dumps(first)[:-1])  # still being written: waits for the next window
    third = collect.run(params, layout, window="w3")
    assert third.summary["collected"] == {"broken.jsonl": 1} and not third.summary["quarantined"]
    assert (collect.clusters_dir(layout) / "broken" / "segment-000001-w3.jsonl").is_file()


def test_records_in_object_storage_are_collected_the_same_way(layout: Layout, s3_url: str) -> None:
    """Where the controllers keep their records in a bucket (`dl2 serve --decision-log s3://...`), `collect` reads
    the same folders there."""
    from dataclasses import replace

    from dl2.sim.record_store import RecordStore

    params = smoke_params()
    local = layout.root / "staged"
    good = decision_log(local / "cluster-a")
    store = RecordStore(s3_url).child("cluster-a")
    for path in sorted((local / "cluster-a").iterdir()):
        store.create(path.name, path.read_text())
    params = replace(params, data=replace(params.data, incoming=s3_url))
    result = collect.run(params, layout, window="w1")
    assert result.summary["collected"] == {"cluster-a": good} and not result.summary["quarantined"]
    target = collect.clusters_dir(layout) / "cluster-a"
    assert sorted(p.name for p in target.iterdir()) == ["cluster.json", "segment-000001-w1.jsonl"]
    assert (target / "cluster.json").read_bytes() == (local / "cluster-a" / "cluster.json").read_bytes()
    assert collect.run(params, layout, window="w2").summary["changed"] is False  # nothing new, nothing twice
    later = sorted((local / "cluster-a").glob("segment-*.jsonl"))[0].read_text()  # the controller writes on
    store.create("segment-999999999-000000.jsonl", later)
    assert collect.run(params, layout, window="w3").summary["collected"] == {"cluster-a": len(later.splitlines())}
