"""The closed loop on the local cluster (`pipelines.cluster_loop`), on a temporary MLflow store: the champion in
shadow mode records every decision and resizes nothing, the records are collected as feedback, the gate's
confirmation is the controller's SchedulerPolicy handshake, and the new champion runs in active mode with the
JCTs `dl2 simulate` gives for the same slice; a second run changes nothing."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dl2.core import DecisionRecord
from pipelines.stage import Layout
from tests.lifecycle_fixtures import build_models, empty_mlflow_db, new_store, smoke_params


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = new_store(empty_mlflow_db(tmp_path / "template"), tmp_path / "mlruns")
    monkeypatch.setenv("DL2_MLRUNS", str(folder))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_REGISTRY_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    return folder


def _record(job: str, incumbent: tuple[int, int], proposed: tuple[int, int]) -> DecisionRecord:
    from dataclasses import fields

    values: dict[str, Any] = {f.name: 0 for f in fields(DecisionRecord)}
    values.update(
        time_s=1200.0, slot_s=600.0, cluster="c", job_id=job, model="resnet-50", architecture="ps", model_version="1",
        incumbent="drf", mode="shadow", incumbent_workers=incumbent[0], incumbent_ps=incumbent[1],
        proposed_workers=proposed[0], proposed_ps=proposed[1], applied_workers=incumbent[0],
        applied_ps=incumbent[1], held_workers=1, held_ps=1,
    )  # fmt: skip
    return DecisionRecord(**values)


def test_decision_lines_show_where_the_policy_differs_from_the_incumbent() -> None:
    from pipelines.cluster_loop import decision_lines

    records = [_record("same", (2, 1), (2, 1)), _record("differs", (2, 1), (4, 2))]
    lines = decision_lines(records, "drf")
    assert "drf (w,ps)" in lines[0]
    assert len(lines) == 3 and "differs" in lines[1] and lines[1].split()[0] == "2"  # slot 1200 s / 600 s
    assert lines[1].split()[-3:] == ["2,1", "4,2", "2,1"]
    assert lines[2].strip() == "(1 of 2 records where the policy differs from drf)"
    assert "same" in decision_lines(records[:1], "drf")[1]  # nothing differs: the first records


@pytest.mark.slow
def test_the_loop_records_in_shadow_promotes_through_the_controller_and_runs_active(
    store: Path, tmp_path: Path
) -> None:
    from dl2.rl.model_io import load_config, load_state, save_model
    from pipelines import cluster_loop, collect, promote, registry
    from pipelines.cluster_loop import CLUSTER_NAME
    from pipelines.params import Params
    from pipelines.promotion.confirmation import Confirm
    from pipelines.promotion.report import outcome_line

    models = build_models(tmp_path / "models")
    # the cluster's jobs as a truth unlike the catalogue says: the twin and `dl2 simulate` both play it
    params: Params = smoke_params(f"data.incoming={tmp_path / 'incoming'}", "cluster.truth=speed-shift")
    layout = Layout(tmp_path)
    (tmp_path / "work").mkdir()
    champion = registry.register(models["stopper"])[0].version  # slow but safe: the challenger beats it
    registry.set_alias("champion", champion)
    learned: dict[str, Any] = {}

    # the challenger places otherwise (as a placement chosen in the twin would): its active pass needs a cluster
    # that places alike
    config, state = load_config(models["bundle"])[0], load_state(models["bundle"])
    placed = save_model(tmp_path / "placed", replace(config, placer="isolate"), state, card="bundle, isolated\n")

    def learn(confirmation: Confirm) -> str:
        learned["collected"] = collect.run(params, layout).summary
        challenger = registry.register(placed)[0].version
        registry.set_alias("challenger", challenger)
        result = promote.run(params, layout, confirmation=confirmation)
        learned["promotion"] = result.summary
        return outcome_line(result)

    lines: list[str] = []
    report = cluster_loop.run(params, layout, learn, say=lines.append)
    text = "\n".join(lines)

    shadow, active = report["shadow"], report["active"]
    assert shadow["version"] == champion and shadow["resizes"] == 0 and shadow["records"] > 0
    assert learned["collected"]["records"] == shadow["records"]  # every record the controller wrote, collected
    assert learned["promotion"]["status"] == "promoted", text
    assert registry.alias("champion").version == active["version"] != champion
    decision = json.loads((tmp_path / "reports" / "promotion.json").read_text())
    assert decision["confirmation"]["confirmed"]  # the handshake: the controller loaded it and is Ready
    assert decision["confirmation"]["detail"].startswith(f"the controller runs v{active['version']}")
    assert f"the controller's answer: the controller runs v{active['version']}" in text
    assert active["resizes"] > 0 and active["records"] > shadow["records"]
    # the simulator's JCTs, up to the progress the job objects report (annotations round it)
    assert active["avg_jct_h"] == pytest.approx(report["simulate"]["policy"], rel=1e-3)
    assert shadow["avg_jct_h"] == pytest.approx(report["simulate"]["asked-sizes"], rel=1e-3)  # nothing resized
    assert "shadow: jobs at their asked sizes" in text and "simulator, drf (the incumbent)" in text
    assert "as the truth speed-shift says" in text
    records = list((tmp_path / "incoming" / CLUSTER_NAME).glob("segment-*.jsonl"))
    assert records and json.loads((tmp_path / "reports" / "cluster_loop.json").read_text()) == report
    # the champion before and after the loop, side by side in the registry with what each did on the slice
    before_loop, after_loop = registry.model_metrics(champion), registry.model_metrics(active["version"])
    assert before_loop["cluster.shadow_avg_jct_h"] == shadow["avg_jct_h"]
    assert before_loop["cluster.simulated_avg_jct_h"] == report["simulate_before"]["policy"]
    assert after_loop["cluster.active_avg_jct_h"] == active["avg_jct_h"]
    assert after_loop["cluster.simulated_avg_jct_h"] == report["simulate"]["policy"]
    assert before_loop["cluster.asked_sizes_avg_jct_h"] == after_loop["cluster.asked_sizes_avg_jct_h"]
    assert f"simulator, v{champion} (the champion before the loop)" in text
    assert report["placement"] == {"before": config.placer, "active": "isolate"}
    assert f"v{active['version']} places with isolate (v{champion}: {config.placer})" in text
    assert "simulator, asked sizes, isolate " in text
    isolated = report["simulate"]["asked-sizes, placed as the active version"]
    assert isolated == pytest.approx(
        cluster_loop.asked_sizes_h(cluster_loop.load_slice(params.cluster), "isolate", params.cluster)
    )

    again: list[str] = []
    assert cluster_loop.run(params, layout, learn, say=again.append) == report  # nothing runs again
    assert again[0].startswith(f"  up to date: v{active['version']} already ran in active mode")
