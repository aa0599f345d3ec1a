"""The model registry (`dl2-policy`, aliases), the pyfunc wrapper and the promotion gate, on a temporary MLflow store.

The models (`lifecycle_fixtures.build_models`): `tiny` (a trained warm-up), `bundle` (FIFO) and `stopper` (safe
but slow, so a worse challenger).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from pipelines.stage import Layout
from tests.lifecycle_fixtures import ROOT, build_models, empty_mlflow_db, new_store, smoke_params

# -- fixtures ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def mlflow_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty MLflow database with the schema created once (creating it takes ~6 s)."""
    return empty_mlflow_db(tmp_path_factory.mktemp("mlflow-template"))


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mlflow_template: Path) -> Path:
    """A fresh MLflow store for the test (`DL2_MLRUNS`); never the repository's `mlruns/`."""
    folder = new_store(mlflow_template, tmp_path / "mlruns")
    monkeypatch.setenv("DL2_MLRUNS", str(folder))
    # MLflow exports the URI it is pointed at; without this a previous test's store would be reused
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_REGISTRY_URI", raising=False)
    monkeypatch.chdir(tmp_path)  # MLflow falls back to ./mlruns for some artefacts: keep them in tmp_path
    return folder


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_models(tmp_path_factory.mktemp("models"))


# -- the pyfunc input and output ---------------------------------------------------------------------------------


def test_frame_round_trip_and_checks() -> None:
    from dl2.core import InputError
    from dl2.workload.source import workload
    from pipelines.pyfunc import example_frame, frame_from_view, view_from_frame

    frame = example_frame(workload("authors-tiny", 0), num_jobs=4)
    assert len(frame) == 4 and frame["num_nodes"].eq(6).all()
    view = view_from_frame(frame)
    assert [job.spec.job_id for job in view.jobs] == list(frame["job_id"])
    pd.testing.assert_frame_equal(frame_from_view(view), frame)

    held = frame.assign(held_workers=[2, 0, 0, 0], held_ps=[1, 0, 0, 0], held_worker_nodes=["0,3", "", "", ""])
    held.loc[0, "held_ps_nodes"] = "5"
    view = view_from_frame(held)
    assert view.jobs[0].allocation.worker_nodes == (0, 3) and view.previous.get(view.jobs[0].spec.job_id).ps_nodes == (
        5,
    )
    no_nodes = held.drop(columns=["held_worker_nodes", "held_ps_nodes"])
    unknown = view_from_frame(no_nodes)  # counts kept for the observation, placement unknown to the placer
    assert unknown.jobs[0].allocation.num_workers == 2 and len(unknown.previous) == 0

    allreduce = frame.assign(architecture="allreduce", max_ps=0, ps_cpu=0.0)
    assert view_from_frame(allreduce).jobs[0].spec.requested_ps == 0
    for bad, message in [
        (frame.drop(columns=["slot_s"]), "missing columns: slot_s"),
        (frame.assign(model=["resnet-50", "no-such-model", "dssm", "dssm"]), "unknown model"),
        (frame.assign(num_nodes=[6, 6, 7, 6]), "same on every row"),
        (frame.assign(job_id="same"), "duplicate job id"),
        (held.assign(held_worker_nodes=["0", "", "", ""]), "lists 1 nodes for 2 tasks"),
        (held.assign(held_worker_nodes=["0,9", "", "", ""]), "outside 0..5"),
    ]:
        with pytest.raises(InputError, match=message):
            view_from_frame(bad)


# -- registry ----------------------------------------------------------------------------------------------------


def test_register_twice_gives_one_version_and_the_challenger(
    store: Path, tmp_path: Path, models: dict[str, Path]
) -> None:
    from pipelines import register, registry

    layout = Layout(tmp_path)
    metrics = tmp_path / "reports" / "metrics.json"
    metrics.parent.mkdir()
    digest = registry.model_digest(models["tiny"])
    rows = {"finetune": {"avg_jct_s": 1234.5, "p99_jct_s": 4000.0, "vs_best_heuristic": 0.9, "runs": 2}}
    metrics.write_text(json.dumps({"schedulers": rows, "model_digests": {"finetune": digest}, "workload": "w"}))
    (tmp_path / "reports" / "ablation.json").write_text(json.dumps({"variants": {"full": {"test_avg_jct_s": 1300.0}}}))
    first = register.run(smoke_params(), layout, model=models["tiny"])
    again = register.run(smoke_params(), layout, model=models["tiny"])
    assert first.summary["created"] and first.summary["metrics"] == 4
    assert again.summary == {**first.summary, "created": False}
    versions = registry.list_versions()
    assert [v.version for v in versions] == [1] and versions[0].aliases == ("challenger",)
    assert versions[0].digest == digest
    assert registry.model_metrics(1) == {
        "test.avg_jct_s": 1234.5,
        "test.p99_jct_s": 4000.0,
        "test.vs_best_heuristic": 0.9,
        "ablation.full.test_avg_jct_s": 1300.0,
    }
    assert not [key for key in versions[0].tags if key.startswith("dl2.metrics")]  # tags: identifiers only
    assert {"dl2.mode", "dl2.kind", "dl2.code_version", "dl2.git_commit"} <= set(versions[0].tags)
    assert "1234 s" in versions[0].description
    assert registry.alias("champion") is None

    copy = shutil.copytree(models["tiny"], tmp_path / "copy")  # same content elsewhere: the same version
    assert registry.register(copy)[0].version == 1
    assert registry.register(models["bundle"])[0].version == 2
    assert registry.model_metrics(2) == {}  # an evaluation of another model is never attached
    assert registry.alias("challenger").version == 1  # registering alone moves no alias


def test_the_logged_model_restores_the_torch_it_was_evaluated_with(
    store: Path, tmp_path: Path, models: dict[str, Path]
) -> None:
    """Restoring the environment (`mlflow models serve`, `get_model_dependencies`) must rebuild the one the
    model was evaluated in: the installed torch build, from the project's wheel folder when it is the local CPU
    build (`+cpu`), from PyPI otherwise; every other requirement pinned to what is installed."""
    import importlib.metadata

    import mlflow.pyfunc

    from pipelines import registry

    registry.register(models["tiny"])
    requirements = Path(mlflow.pyfunc.get_model_dependencies(f"models:/{registry.NAME}/1")).read_text().splitlines()
    torch_version = importlib.metadata.version("torch")
    assert f"torch=={torch_version}" in requirements
    find_links = [line for line in requirements if line.startswith("--find-links ")]
    assert bool(find_links) == ("+" in torch_version), requirements
    pins = [line for line in requirements if not line.startswith("-")]
    for pin in pins:
        name, version = pin.split("==")
        assert importlib.metadata.version(name) == version, pin


def test_pyfunc_by_alias_predicts_the_schedulers_allocation(
    store: Path, tmp_path: Path, models: dict[str, Path]
) -> None:
    import mlflow.pyfunc

    from dl2.rl.learned import LearnedScheduler
    from dl2.workload.source import workload
    from pipelines import register, registry
    from pipelines.pyfunc import example_frame, view_from_frame

    register.run(smoke_params(), Layout(tmp_path), model=models["tiny"])
    loaded = mlflow.pyfunc.load_model(f"models:/{registry.NAME}@challenger")
    assert loaded.metadata.get_input_schema().input_names()[:2] == ["job_id", "model"]
    example = example_frame(workload("authors-tiny", 9000), num_jobs=5)
    predicted = loaded.predict(example)
    assert list(predicted.columns) == ["job_id", "workers", "ps", "worker_nodes", "ps_nodes"]
    assert list(predicted["job_id"]) == list(example["job_id"])
    expected = LearnedScheduler.from_dir(models["tiny"]).schedule(view_from_frame(example))
    for row in predicted.itertuples():
        placed = expected.get(row.job_id)
        assert (row.workers, row.ps) == (placed.num_workers, placed.num_ps)
        assert row.worker_nodes == ",".join(map(str, placed.worker_nodes))
    assert loaded.predict(example.iloc[:0]).empty

    folder = registry.download(1, tmp_path / "downloaded")
    assert registry.model_digest(folder) == registry.model_digest(models["tiny"])


# -- the gate ----------------------------------------------------------------------------------------------------


def test_decide_on_numbers() -> None:
    from pipelines.promotion.gate import Score, decide

    drf, fifo = Score(100.0, 300.0, True, 2), Score(120.0, 200.0, True, 2)
    # no champion: the incumbents are the reference, each of them
    assert decide(Score(99.0, 300.0, True, 2), None, {"drf": drf}, 0.0, 1.5).accepted  # 300 <= 1.5 x 300
    verdict = decide(Score(99.0, 451.0, True, 2), None, {"drf": drf}, 0.0, 1.5)
    assert not verdict.accepted and verdict.reason.startswith("safety: p99") and verdict.references == ("drf",)
    verdict = decide(Score(99.0, 301.0, True, 2), None, {"drf": drf, "fifo": fifo}, 0.0, 1.5)
    assert not verdict.accepted and "fifo's 200.0" in verdict.reason  # the tightest p99 bounds it
    assert not decide(Score(96.0, 300.0, True, 2), None, {"drf": drf}, 0.05, 1.5).accepted  # needs <= 95
    assert decide(Score(95.0, 300.0, True, 2), None, {"drf": drf}, 0.05, 1.5).accepted
    # with a champion, the champion is what the challenger replaces (not the incumbents)
    champion = Score(80.0, 250.0, True, 2)
    verdict = decide(Score(90.0, 300.0, True, 2), champion, {"drf": drf}, 0.0, 1.5)
    assert not verdict.accepted and "champion" in verdict.reason and verdict.threshold_avg_jct_s == 80.0
    assert decide(Score(79.0, 300.0, True, 2), champion, {"drf": Score(50.0, 100.0, True, 2)}, 0.0, 1.5).accepted
    broken_champion = Score(float("inf"), float("inf"), False, 0, "stalled")  # no reference any more
    assert decide(Score(90.0, 300.0, True, 2), broken_champion, {"drf": drf}, 0.0, 1.5).references == ("drf",)
    verdict = decide(Score(float("inf"), float("inf"), False, 0, "stalled"), None, {"drf": drf}, 0.0, 1.5)
    assert not verdict.accepted and "not every job finished (stalled)" in verdict.reason


def test_decide_with_the_clusters_twin() -> None:
    """Against the champion, the clusters' calibrated twin decides and the held-out workloads guard: faster in
    the twin (interval below zero) and within (1 + margin) x the champion's held-out average JCT."""
    from pipelines.promotion.gate import ClusterEvidence, Score, decide

    champion, drf = Score(100.0, 300.0, True, 2), Score(200.0, 600.0, True, 2)
    faster = ClusterEvidence(("dl2-local",), 4, -0.06, -0.09, -0.03)
    unsure = ClusterEvidence(("dl2-local",), 4, -0.06, -0.12, +0.01)
    # 103 s held out: not 5% better than the champion's 100 s, within 5% worse, and faster on the cluster
    verdict = decide(Score(103.0, 300.0, True, 2), champion, {"drf": drf}, 0.05, 1.5, cluster=faster)
    assert verdict.accepted and verdict.reason.startswith("faster on the cluster: -6.0% [-9.0%, -3.0%]")
    assert "103.00 s <= 105.00 s" in verdict.reason
    verdict = decide(Score(103.0, 300.0, True, 2), champion, {"drf": drf}, 0.05, 1.5, cluster=unsure)
    assert not verdict.accepted and "not faster on the cluster: -6.0% [-12.0%, +1.0%]" in verdict.reason
    verdict = decide(Score(106.0, 300.0, True, 2), champion, {"drf": drf}, 0.05, 1.5, cluster=faster)
    assert not verdict.accepted and "worse on the held-out workloads: average JCT 106.00 s > 105.00 s" in verdict.reason
    # safety first: a p99 beyond the bound is refused whatever the twin says
    verdict = decide(Score(90.0, 451.0, True, 2), champion, {"drf": drf}, 0.05, 1.5, cluster=faster)
    assert not verdict.accepted and verdict.reason.startswith("safety: p99")
    # better by the margin on the held-out workloads: accepted as before, the twin not needed
    assert decide(Score(95.0, 300.0, True, 2), champion, {"drf": drf}, 0.05, 1.5, cluster=unsure).accepted
    # no champion: the incumbents are the reference and the twin (which compares with the champion) is not used
    verdict = decide(Score(195.0, 600.0, True, 2), None, {"drf": drf}, 0.05, 1.5, cluster=faster)
    assert not verdict.accepted and "cluster" not in verdict.reason


def _start(registry: Any, models: dict[str, Path], champion: str | None, challenger: str) -> tuple[int | None, int]:
    """Set-up only: aliases moved directly (in production only the gate moves `champion`)."""
    champion_version = None
    if champion is not None:
        champion_version = registry.register(models[champion])[0].version
        registry.set_alias("champion", champion_version)
    challenger_version = registry.register(models[challenger])[0].version
    registry.set_alias("challenger", challenger_version)
    return champion_version, challenger_version


def test_gate_rejects_a_challenger_worse_than_the_champion_and_changes_nothing(
    store: Path, tmp_path: Path, models: dict[str, Path]
) -> None:
    import mlflow

    from pipelines import promote, register, registry
    from pipelines.promotion.report import outcome_line

    layout = Layout(tmp_path)
    champion, challenger = _start(registry, models, "bundle", "stopper")
    result = promote.run(smoke_params(), layout)
    decision = json.loads((tmp_path / "reports" / "promotion.json").read_text())
    assert result.summary["status"] == decision["status"] == "rejected"
    assert decision["challenger"]["version"] == challenger and decision["champion"]["version"] == champion
    assert decision["references"] == ["champion"]
    assert decision["reason"].startswith("safety: p99 JCT") and "champion's" in decision["reason"]
    assert decision["scores"]["challenger"]["avg_jct_s"] > decision["scores"]["champion"]["avg_jct_s"]
    assert registry.alias("champion").version == champion and registry.alias("challenger").version == challenger
    assert registry.get(challenger).tags["dl2.promotion"] == "rejected"
    assert not (tmp_path / "data" / "deployments").exists()
    line = outcome_line(result)
    assert line.startswith(f"promote: rejected dl2-policy v{challenger}: safety: p99 JCT")
    assert line.endswith(f"; champion stays v{champion}")

    runs = len(mlflow.search_runs(experiment_names=["dl2"], output_format="list"))
    before = (tmp_path / "reports" / "promotion.json").read_text()
    assert promote.run(smoke_params(), layout).summary["replayed"]  # the same inputs: replayed, not re-evaluated
    assert (tmp_path / "reports" / "promotion.json").read_text() == before
    assert len(mlflow.search_runs(experiment_names=["dl2"], output_format="list")) == runs

    newer = register.run(smoke_params(), layout, model=models["tiny"]).summary["version"]
    again = register.run(smoke_params(), layout, model=models["stopper"])  # judged already: not offered again
    assert again.summary == {**again.summary, "version": challenger, "created": False, "alias": None}
    assert registry.alias("challenger").version == newer


def test_gate_rejects_a_policy_that_starves_a_job(store: Path, tmp_path: Path, models: dict[str, Path]) -> None:
    from pipelines import promote, registry

    _start(registry, models, None, "starver")
    result = promote.run(smoke_params(), Layout(tmp_path))
    decision = json.loads((tmp_path / "reports" / "promotion.json").read_text())
    assert result.summary["status"] == "rejected" and decision["references"] == ["drf"]
    assert decision["reason"].startswith("safety: not every job finished") and "starves" in decision["reason"]
    assert decision["scores"]["challenger"]["finished"] is False
    assert registry.alias("champion") is None


def test_gate_reports_every_heuristic_the_teacher_included(
    store: Path, tmp_path: Path, models: dict[str, Path]
) -> None:
    """Against the incumbent (no champion yet): accepted on a tie at margin 0, and the report shows every
    heuristic with its role, the best of them and the challenger's margin against it."""
    from pipelines import promote, registry
    from pipelines.promotion.report import report_lines

    layout = Layout(tmp_path)
    _, challenger = _start(registry, models, None, "bundle")
    # `bundle` is FIFO: it ties the incumbent FIFO exactly
    params = smoke_params("promote.incumbent=[fifo]", "promote.margin=0.0")
    promote.run(params, layout, confirmation=lambda *_: (True, "confirmed in the test"))
    decision = json.loads((tmp_path / "reports" / "promotion.json").read_text())
    assert decision["status"] == "promoted" and decision["references"] == ["fifo"]
    assert decision["scores"]["challenger"]["avg_jct_s"] == decision["scores"]["fifo"]["avg_jct_s"]
    assert decision["roles"] == {
        "challenger": "challenger",
        "drf": "heuristic",
        "optimus": "heuristic",
        "srpt-knee": "teacher",
        "fifo": "incumbent",
    }  # compat mode: no placement, so no row of the jobs at their asked sizes either
    assert decision["heuristic_placer"] == "load-balance"  # the challenger's: every heuristic row places alike
    best = decision["best_heuristic"]
    assert best == min(("drf", "optimus", "srpt-knee", "fifo"), key=lambda n: decision["scores"][n]["avg_jct_s"])
    expected = decision["scores"]["challenger"]["avg_jct_s"] / decision["scores"][best]["avg_jct_s"] - 1
    assert decision["margin_vs_best_heuristic"] == pytest.approx(expected) and expected > 0  # imitation, no gain
    lines = report_lines(decision)
    assert all(any(line.lstrip().startswith(name) for line in lines) for name in decision["scores"])
    assert f"challenger vs best heuristic placed alike ({best}): +" in "\n".join(lines)
    tags = registry.get(challenger).tags
    assert tags["dl2.best_heuristic"] == best and tags["dl2.vs_best_heuristic"].startswith("+")
    assert registry.model_metrics(challenger)["gate.avg_jct_s"] == decision["scores"]["challenger"]["avg_jct_s"]


def test_the_gate_takes_scores_from_evaluate_only_for_its_code_test_set_and_model_bytes(tmp_path: Path) -> None:
    """Runs are deterministic: the `evaluate` stage's figures are the gate's when that stage ran this code on this
    test set (for a model: on the same bytes, by digest), and are ignored otherwise (the gate then runs it)."""
    import math

    from pipelines.code import code_version
    from pipelines.evaluate import heuristics, test_set
    from pipelines.promotion.gate import Score
    from pipelines.promotion.scoring import evaluated_scores

    params, layout = smoke_params(), Layout(tmp_path)
    names = heuristics(params)
    rows: dict[str, Any] = {n: {"runs": 2, "safe": True, "avg_jct_s": 10.0 + i, "p99_jct_s": 20.0 + i}
                            for i, n in enumerate(names)}  # fmt: skip
    rows["drf"] = {"runs": 2, "safe": False, "avg_jct_s": None, "p99_jct_s": None, "failure": "stalled"}
    rows["online"] = {"runs": 2, "safe": True, "avg_jct_s": 5.0, "p99_jct_s": 6.0}
    document = {
        "code_version": code_version("pipelines.evaluate"),
        "test_set": test_set(params),
        "model_digests": {"online": "abc"},
        "schedulers": rows,
    }
    metrics = tmp_path / "reports" / "metrics.json"
    metrics.parent.mkdir(parents=True)
    metrics.write_text(json.dumps(document))
    scores = evaluated_scores(params, layout)
    assert set(scores) == {*names, "abc"} and scores["drf"] == Score(math.inf, math.inf, False, 2, "stalled")
    assert scores["optimus"] == Score(10.0 + names.index("optimus"), 20.0 + names.index("optimus"), True, 2)
    assert scores["abc"] == Score(5.0, 6.0, True, 2)  # a model by its digest, never by its folder's name
    for changed in ({"code_version": "0" * 16}, {"test_set": {**test_set(params), "stall_slots": 1}}):
        metrics.write_text(json.dumps({**document, **changed}))
        assert evaluated_scores(params, layout) == {}
    metrics.unlink()
    assert evaluated_scores(params, layout) == {}


def test_gate_accepts_a_challenger_better_than_the_champion_and_confirms_it(
    store: Path, tmp_path: Path, models: dict[str, Path]
) -> None:
    from pipelines import promote, registry

    layout = Layout(tmp_path)
    champion, challenger = _start(registry, models, "stopper", "bundle")
    # `bundle` beats the stopper champion; the heuristics (better than both) are reported, not the reference
    result = promote.run(smoke_params(), layout)  # the real confirmation: a separate process loads @champion
    decision = json.loads((tmp_path / "reports" / "promotion.json").read_text())
    assert decision["status"] == "promoted" and decision["confirmation"]["confirmed"], decision
    assert decision["references"] == ["champion"] and decision["margin_vs_best_heuristic"] > 0
    assert "10/10 jobs" in decision["confirmation"]["detail"]
    assert registry.alias("champion").version == challenger
    (record,) = sorted((tmp_path / "data" / "deployments").iterdir())
    assert (
        record.name == f"0001-dl2-policy-v{challenger}.json" and result.outputs[1] == f"data/deployments/{record.name}"
    )
    document = json.loads(record.read_text())
    assert document["action"] == "deploy" and document["previous_version"] == champion
    assert document["digest"] == registry.model_digest(models["bundle"])
    assert document["metrics"]["challenger"]["avg_jct_s"] == decision["scores"]["challenger"]["avg_jct_s"]

    again = promote.run(smoke_params(), layout)
    assert again.summary["status"] == "already-champion"
    assert len(list((tmp_path / "data" / "deployments").iterdir())) == 1

    # what a user does afterwards, in a fresh process: the champion answers a cluster state
    script = (
        "import mlflow.pyfunc; from pipelines import tracking; from pipelines.pyfunc import example_frame; "
        "from dl2.workload.source import workload; tracking.configure(); "
        "model = mlflow.pyfunc.load_model('models:/dl2-policy@champion'); "
        "answer = model.predict(example_frame(workload('authors-tiny', 9000), num_jobs=4)); "
        "print(int(answer['workers'].sum()), int(answer['ps'].sum()), len(answer))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    workers, ps, rows = map(int, done.stdout.split()[-3:])
    assert rows == 4 and workers >= 1 and ps >= 1  # FIFO gives the first jobs a worker and a PS each


def test_unconfirmed_deployment_is_rolled_back(store: Path, tmp_path: Path, models: dict[str, Path]) -> None:
    from pipelines import promote, registry

    layout = Layout(tmp_path)
    champion, challenger = _start(registry, models, "stopper", "bundle")
    calls: list[int] = []

    def unconfirmed(version: int, *_: Any) -> tuple[bool, str]:  # the scheduler never confirms
        calls.append(version)
        return False, "no reply"

    params = smoke_params()
    with pytest.raises(promote.RolledBack, match=f"v{challenger} was not confirmed \\(no reply\\); rolled back"):
        promote.run(params, layout, confirmation=unconfirmed)
    assert calls == [challenger]
    assert registry.alias("champion").version == champion and registry.alias("challenger").version == challenger
    deploy, back = sorted((tmp_path / "data" / "deployments").iterdir())
    assert (deploy.name, back.name) == (f"0001-dl2-policy-v{challenger}.json", f"0002-dl2-policy-v{champion}.json")
    assert json.loads(back.read_text())["action"] == "rollback"
    assert json.loads(back.read_text())["rolled_back_version"] == challenger
    decision = json.loads((tmp_path / "reports" / "promotion.json").read_text())
    assert decision["status"] == "rolled_back" and decision["rollback"] == f"data/deployments/{back.name}"

    with pytest.raises(promote.RolledBack, match="recorded earlier"):  # a re-run changes nothing
        promote.run(params, layout, confirmation=unconfirmed)
    assert calls == [challenger] and len(list((tmp_path / "data" / "deployments").iterdir())) == 2


def test_first_promotion_rolled_back_leaves_no_champion(store: Path, tmp_path: Path, models: dict[str, Path]) -> None:
    from pipelines import promote, registry

    _, challenger = _start(registry, models, None, "bundle")
    with pytest.raises(promote.RolledBack, match="rolled back to no champion"):
        promote.run(
            smoke_params("promote.incumbent=[fifo]", "promote.margin=0.0"),
            Layout(tmp_path),
            confirmation=lambda *_: (False, "timed out"),
        )
    assert registry.alias("champion") is None
    names = sorted(p.name for p in (tmp_path / "data" / "deployments").iterdir())
    assert names == [f"0001-dl2-policy-v{challenger}.json", "0002-dl2-policy-none.json"]


def test_deployment_records_are_never_overwritten(tmp_path: Path) -> None:
    from pipelines.promotion.ledger import latest_record, write_record

    directory = tmp_path / "deployments"
    first = write_record(directory, {"action": "deploy", "version": 3})
    second = write_record(directory, {"action": "deploy", "version": 3})
    assert (first.name, second.name) == ("0001-dl2-policy-v3.json", "0002-dl2-policy-v3.json")
    (directory / "0003-dl2-policy-v9.json").write_text('{"by": "someone else"}')  # e.g. a concurrent writer
    third = write_record(directory, {"action": "rollback", "version": None})
    assert third.name == "0004-dl2-policy-none.json"
    assert json.loads((directory / "0003-dl2-policy-v9.json").read_text()) == {"by": "someone else"}
    assert latest_record(directory) == {"action": "rollback", "version": None}
    assert not [p for p in directory.iterdir() if p.name.startswith(".")]  # no temporary left behind


def test_cli_exit_status_of_a_rollback(
    store: Path,
    tmp_path: Path,
    models: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pipelines import promote, registry

    _start(registry, models, None, "bundle")
    monkeypatch.setattr(promote, "confirm", lambda *_: (False, "timed out"))
    monkeypatch.setattr(promote, "Layout", lambda: Layout(tmp_path))
    assert promote.cli(["--smoke", "--set", "promote.incumbent=[fifo]", "--set", "promote.margin=0.0"]) == 1
    assert "rolled back to no champion" in capsys.readouterr().err
