"""The Airflow DAGs: they import cleanly, and `airflow dags test` runs each one end to end on tiny inputs.

One Airflow home (SQLite metadata, migrated once per session) serves every DAG test; the DAG runs share one
pipeline root and one MLflow store in tmp, in lifecycle order: ingest a 120-job slice of Philly, warm up and
register a challenger, fine-tune on simulated cluster feedback and register the next challenger, then a gate that
rejects a worse challenger. Each `airflow dags test` is a subprocess with the smoke profile (`-c` conf).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from lifecycle_fixtures import ROOT, build_models, empty_mlflow_db, smoke_params

from pipelines.stage import Layout

DAG_IDS = ("dl2_online_finetune", "dl2_promote", "dl2_trace_ingest", "dl2_warmup")
TRACE_JOBS = 120
"""Jobs of the Philly slice the ingest DAG validates (tiny input: the DAG, not the data, is under test)."""
DAG_TEST_TIMEOUT_S = 180
"""A DAG run that fails waits for its task's retry: this ends it."""


@dataclass(frozen=True)
class Lifecycle:
    """Where the DAG runs of this module read and write."""

    root: Path
    env: Mapping[str, str]
    """Environment of `airflow dags test`: Airflow home and database, dags folder, MLflow store, data folder."""

    @property
    def layout(self) -> Layout:
        return Layout(self.root)

    def conf(self, *overrides: str) -> dict[str, Any]:
        return {"smoke": True, "root": str(self.root), "set": ["data.traces=[philly]", *overrides]}


# -- fixtures ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def airflow_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment of an Airflow home in tmp whose SQLite metadata database is migrated once per session."""
    home = tmp_path_factory.mktemp("airflow")
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AIRFLOW", "MLFLOW_"))}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(ROOT / "dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home / 'airflow.db'}",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR="false",
    )
    done = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "airflow"), "db", "migrate"], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return env


@pytest.fixture(scope="module")
def lifecycle(tmp_path_factory: pytest.TempPathFactory, airflow_env: dict[str, str]) -> Iterator[Lifecycle]:
    """A pipeline root and MLflow store for this module's DAG runs (the in-process set-up uses the same store)."""
    root = tmp_path_factory.mktemp("lifecycle")
    store = root / "mlruns"
    empty_mlflow_db(store)
    data = _tiny_data_dir(root / "shipped")
    env = {**airflow_env, "DL2_MLRUNS": str(store), "DL2_DATA_DIR": str(data)}
    with pytest.MonkeyPatch.context() as patch:  # in-process registry calls see the same store
        patch.setenv("DL2_MLRUNS", str(store))
        patch.delenv("MLFLOW_TRACKING_URI", raising=False)
        patch.delenv("MLFLOW_REGISTRY_URI", raising=False)
        yield Lifecycle(root, env)


def _tiny_data_dir(folder: Path) -> Path:
    """A data folder (`DL2_DATA_DIR`) with the authors' reference data and the first jobs of Philly."""
    (folder / "traces" / "philly").mkdir(parents=True)
    (folder / "reference").symlink_to(ROOT / "data" / "reference")
    shipped = ROOT / "data" / "traces" / "philly"
    lines = (shipped / "jobs.csv").read_text().splitlines(keepends=True)
    (folder / "traces" / "philly" / "jobs.csv").write_text("".join(lines[: TRACE_JOBS + 1]))
    (folder / "traces" / "philly" / "vc_nodes.csv").write_bytes((shipped / "vc_nodes.csv").read_bytes())
    return folder


def dags_test(lifecycle: Lifecycle, dag_id: str, conf: Mapping[str, Any]) -> str:
    """`airflow dags test DAG_ID -c CONF`; the output, after checking that the run succeeded.

    The output goes to a file as it comes (`airflow-dags-test-<dag>.log` in the root): a failing task waits for
    its retry, so a failure shows up as the timeout, and the file then says what failed."""
    command = [str(ROOT / ".venv" / "bin" / "airflow"), "dags", "test", dag_id, "-c", json.dumps(conf)]
    log = lifecycle.root / f"airflow-dags-test-{dag_id}.log"
    with log.open("w") as stream:
        process = subprocess.Popen(command, env=dict(lifecycle.env), cwd=lifecycle.root, stdout=stream, stderr=stream)
        try:
            returncode = process.wait(timeout=DAG_TEST_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            returncode = process.wait()
    output = log.read_text()
    finished = [line for line in output.splitlines() if "DagRun Finished" in line]
    lines = [line for line in output.splitlines() if "No tasks to run" not in line]  # a retry being awaited
    errors = "\n".join(line for line in lines if "Error" in line or "error" in line)
    tail = "\n".join(lines[-40:])
    assert returncode == 0 and finished and "state=success" in finished[-1], f"{errors[-3000:]}\n...\n{tail}"
    return output


def asset_events(lifecycle: Lifecycle) -> list[tuple[str, str]]:
    """(asset URI, producing DAG) of every asset event in the Airflow metadata database."""
    database = Path(lifecycle.env["AIRFLOW_HOME"]) / "airflow.db"
    with closing(sqlite3.connect(database)) as connection:
        query = "SELECT a.uri, e.source_dag_id FROM asset_event e JOIN asset a ON a.id = e.asset_id"
        return [(str(uri), str(dag_id)) for uri, dag_id in connection.execute(query)]


@pytest.fixture(scope="module")
def ingested(lifecycle: Lifecycle) -> str:
    return dags_test(lifecycle, "dl2_trace_ingest", lifecycle.conf())


@pytest.fixture(scope="module")
def warmed_up(lifecycle: Lifecycle, ingested: str) -> str:
    return dags_test(lifecycle, "dl2_warmup", lifecycle.conf())


# -- the DAG files -----------------------------------------------------------------------------------------------


def test_dagbag_imports_every_dag_without_errors(airflow_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in airflow_env.items():
        if key.startswith("AIRFLOW"):
            monkeypatch.setenv(key, value)
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == list(DAG_IDS)
    for dag in bag.dags.values():
        assert dag.catchup is False and dag.start_date is not None and dag.max_active_runs == 1, dag.dag_id
        assert all(task.retries >= 1 for task in dag.tasks), dag.dag_id
    schedules = {dag_id: bag.dags[dag_id].schedule for dag_id in DAG_IDS}
    assert schedules["dl2_trace_ingest"] == "@daily" and schedules["dl2_online_finetune"] == "@hourly"
    assert [asset.uri for asset in schedules["dl2_warmup"]] == ["dl2://traces/validated"]
    assert [asset.uri for asset in schedules["dl2_promote"]] == ["dl2://models/dl2-policy/challenger"]
    assert [a.uri for a in bag.dags["dl2_trace_ingest"].get_task("validate").outlets] == ["dl2://traces/validated"]


# -- `airflow dags test` of each DAG, in lifecycle order ---------------------------------------------------------


def test_trace_ingest_dag_versions_and_validates_the_traces(lifecycle: Lifecycle, ingested: str) -> None:
    manifest = json.loads((lifecycle.root / "data" / "ingested" / "philly" / "MANIFEST.json").read_text())
    assert manifest["jobs"] == TRACE_JOBS and set(manifest["files"]) == {"jobs.csv", "vc_nodes.csv"}
    report = json.loads((lifecycle.root / "reports" / "validation" / "philly.json").read_text())
    assert report["success"] is True
    assert ("dl2://traces/validated", "dl2_trace_ingest") in asset_events(lifecycle)  # schedules dl2_warmup


def test_warmup_dag_registers_a_challenger(lifecycle: Lifecycle, warmed_up: str) -> None:
    from pipelines import registry

    assert (lifecycle.root / "models" / "staging" / "warmup" / "policy.pt").is_file()
    (version,) = registry.list_versions()
    assert version.aliases == ("challenger",) and version.tags["dl2.kind"] == "warm-up"
    assert version.digest == registry.model_digest(lifecycle.root / "models" / "staging" / "warmup")
    assert registry.alias("champion") is None


def test_online_finetune_dag_learns_from_new_feedback_then_advances_the_watermark(
    lifecycle: Lifecycle, warmed_up: str
) -> None:
    from pipelines import feedback, registry, watermark

    params = smoke_params("data.traces=[philly]")
    feedback.run(params, lifecycle.layout)  # a simulated cluster logs its decisions under data/feedback
    assert watermark.state(lifecycle.layout)["logs"] == {}
    before = registry.alias("challenger")

    dags_test(lifecycle, "dl2_online_finetune", lifecycle.conf())
    after = registry.alias("challenger")
    assert after is not None and before is not None and after.version > before.version
    assert after.digest == registry.model_digest(lifecycle.root / "models" / "staging" / "finetune")
    consumed = watermark.state(lifecycle.layout)
    (log,) = consumed["logs"]
    assert log.startswith("simulated/") and consumed["logs"][log]["segments"]
    (window,) = consumed["windows"]
    manifest = json.loads(
        (watermark.feedback_root(lifecycle.layout) / "windows" / window / "MANIFEST.json").read_text()
    )
    assert manifest["records"] > 0
    assert ("dl2://models/dl2-policy/challenger", "dl2_online_finetune") in asset_events(lifecycle)


def test_promote_dag_rejects_a_worse_challenger_and_keeps_the_champion(
    lifecycle: Lifecycle, warmed_up: str, tmp_path: Path
) -> None:
    from pipelines import register, registry

    models = build_models(tmp_path / "models", trained=lifecycle.root / "models" / "staging" / "warmup")
    champion = registry.register(models["bundle"])[0].version
    registry.set_alias("champion", champion)  # set-up only: in production only the gate moves `champion`
    challenger = register.run(smoke_params(), lifecycle.layout, model=models["stopper"]).summary["version"]
    assert registry.alias("challenger").version == challenger

    output = dags_test(lifecycle, "dl2_promote", lifecycle.conf())
    assert f"promote: rejected dl2-policy v{challenger}: safety: " in output
    assert f"champion stays v{champion}" in output
    decision = json.loads((lifecycle.root / "reports" / "promotion.json").read_text())
    assert decision["status"] == "rejected" and decision["champion"]["version"] == champion
    assert registry.alias("champion").version == champion
    assert registry.alias("challenger").version == challenger
    assert not (lifecycle.root / "data" / "deployments").exists()


# -- the feedback watermark of dl2_online_finetune (no Airflow) ------------------------------------------------


def test_watermark_windows_are_stable_and_only_a_commit_consumes_them(tmp_path: Path) -> None:
    from pipelines import watermark

    layout = Layout(tmp_path)
    source = tmp_path / "data" / "feedback"
    segments = source / "cluster-a"
    segments.mkdir(parents=True)
    (segments / "segment-000001.jsonl").write_text('{"n": 1}\n{"n": 2}\n')
    (segments / "cluster.json").write_text("{}")
    (source / "cluster-b.jsonl").write_text('{"n": 1}\n{"n": 2, "still": "being written"')  # no newline yet

    first = watermark.collect(source, layout, "run-1")
    assert first["records"] == 3 and first["logs"] == 2
    (segments / "segment-000002.jsonl").write_text('{"n": 3}\n')
    assert watermark.collect(source, layout, "run-1") == first  # a retried run reads the same window
    window = tmp_path / first["window"]
    assert (window / "cluster-a" / "cluster.json").is_file()
    assert (window / "cluster-b.jsonl").read_text() == '{"n": 1}\n'  # whole lines only

    second = watermark.collect(source, layout, "run-2")  # run-1 never committed (it failed): its records stay
    assert second["records"] == 4
    watermark.commit(layout, "run-2")
    assert watermark.commit(layout, "run-2")["committed"]  # committing twice changes nothing
    state = watermark.state(layout)
    assert state["logs"]["cluster-a"]["segments"] == ["segment-000001.jsonl", "segment-000002.jsonl"]
    assert state["logs"]["cluster-b.jsonl"]["lines"] == 1

    with (source / "cluster-b.jsonl").open("a") as stream:
        stream.write("}\n")
    third = watermark.collect(source, layout, "run-3")
    assert third["records"] == 1 and (tmp_path / third["window"] / "cluster-b.jsonl").read_text().startswith('{"n": 2')
