"""`dl2 serve` as a real process: its command line, and SIGKILLs at points of its slot loop with restarts (no
resize repeated, no record lost or written twice, no `Resized` Event lost where a restart replays the slot; the
run is the one without kills)."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from dl2.kube.models import directory_loader
from dl2.kube.rest import EVENTS
from dl2.sim.config import SimConfig
from dl2.sim.decision_log import read_store_log
from dl2.sim.record_store import RecordStore
from testbed.twin import reference_result
from tests.builders import tiny_workload

CONFIG = SimConfig.realistic(seed=1)


def test_serve_has_help_and_refuses_bad_options(tmp_path, capsys):
    from dl2.cli.main import main

    with pytest.raises(SystemExit) as shown:
        main(["serve", "--help"])
    out = capsys.readouterr().out
    assert shown.value.code == 0 and "--policy-name" in out and "--decision-log" in out and "--clock" in out
    assert main(["serve", "--kubeconfig", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.strip().endswith("nowhere: no such file")
    assert main(["serve", "--lease-s", "1", "--renew-deadline-s", "2"]) == 2
    assert "need 0 < retry (2.0) < renew deadline (2.0) < lease (1.0)" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("store", ["folder", "s3"])
def test_serve_killed_at_three_points_repeats_no_resize_and_loses_no_record(
    kube, twin, policies, serve_under_kills, uninterrupted_run, tmp_path, store, request
):
    """With the records in a folder, and in object storage (the managed clusters' store)."""
    workload = tiny_workload(num_jobs=6, num_nodes=1, seed=5)
    models = tmp_path / "models"  # no version 1 there: the incumbent (DRF) decides every slot, quickly
    models.mkdir()
    reference, finish, resized = uninterrupted_run(workload, CONFIG, tmp_path / "reference", directory_loader(models))
    acting = next(slot for slot, count in sorted(resized.items()) if count and slot > 2)
    kills = [("journaled", 2), ("resized-1", acting), ("status", acting + 2)]  # before, amid and after resizes
    with twin(workload, CONFIG) as cluster:
        policies.create("active")
        log = request.getfixturevalue("s3_url") if store == "s3" else str(tmp_path / "decisions")
        run = serve_under_kills(cluster, tmp_path, models, kills, decision_log=log)
        run.run()
        through_api = {j.job_id: j.finish_s for j in cluster.result().jobs}
        resizes = run.resizes()
        events = [e for e in kube.rest().list(EVENTS) if e["reason"] == "Resized"]
    assert run.kills == kills and run.starts == 4
    assert resizes and max(resizes.values()) == 1  # no resize was sent twice in a slot
    assert sum(resizes.values()) == sum(resized.values())  # nor lost
    assert through_api == finish == {j.job_id: j.finish_s for j in reference_result(workload, "drf", CONFIG).jobs}
    announced = Counter((int(re.match(r"slot (\d+):", e["note"])[1]), e["regarding"]["name"]) for e in events)
    assert set(announced) <= set(resizes) and max(announced.values()) == 1
    # the slot killed amid its resizes: the killed process's Events were held until the slot's end and died with
    # it, so the restart that replays the slot from its journal sends them, one for every resize of the slot
    assert {key for key in resizes if key[0] == acting} == {key for key in announced if key[0] == acting}
    records = read_store_log(RecordStore(log).child("dl2-local"))
    assert max(Counter((r.time_s, r.job_id) for r in records).values()) == 1
    assert records == reference  # none lost, none added: the same run
