"""The Airflow DAGs: they import cleanly and declare what operators rely on, and a real Airflow 3 scheduler runs
them end to end.

The end-to-end test starts `airflow standalone` (scheduler, DAG processor, triggerer, API server; SQLite
metadata) on loopback with the DAGs of a sandbox copy of the repository (the smoke profile, its own DVC state
and MLflow store; the Airflow Variable `dl2_root` names it), triggers `dl2_trace_ingest` twice and then
`dl2_online_finetune` through the REST API, waits for them, and stops every process it started by its
process-group id.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.lifecycle_fixtures import ROOT

DAG_IDS = ("dl2_online_finetune", "dl2_promote", "dl2_trace_ingest", "dl2_warmup")
DVC_STAGES = ("ingest", "validate", "workloads", "warmup", "feedback", "finetune", "online", "harmony", "evaluate")
START_TIMEOUT_S = 180
RUN_TIMEOUT_S = 900


def airflow_environment(home: Path, dags: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AIRFLOW", "MLFLOW_", "DL2_"))}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home / 'airflow.db'}",
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    )
    return env


def test_dagbag_imports_every_dag_and_declares_what_operators_rely_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in airflow_environment(tmp_path, ROOT / "dags").items():
        monkeypatch.setenv(key, value)
    monkeypatch.syspath_prepend(str(ROOT / "dags"))  # as Airflow does for its dags folder (shared helpers)
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == list(DAG_IDS)
    for dag in bag.dags.values():
        assert dag.catchup is False and dag.start_date is not None and dag.max_active_runs == 1, dag.dag_id
        assert len(dag.params) == 0, dag.dag_id  # root and profile come from the root, not from a hand-passed conf
        for task in dag.tasks:
            assert task.retries >= 1 and task.execution_timeout is not None, (dag.dag_id, task.task_id)
            if task.task_id in (*DVC_STAGES, "collect", "commit", "promote"):
                assert task.pool == "dl2_dvc", (dag.dag_id, task.task_id)  # DVC locks the repository
    schedules = {dag_id: bag.dags[dag_id].schedule for dag_id in DAG_IDS}
    assert schedules["dl2_trace_ingest"] == "@daily" and schedules["dl2_online_finetune"] == "@hourly"
    assert [asset.uri for asset in schedules["dl2_warmup"]] == ["dl2://traces/validated"]
    assert [asset.uri for asset in schedules["dl2_promote"]] == ["dl2://models/dl2-policy/challenger"]
    assert [a.uri for a in bag.dags["dl2_trace_ingest"].get_task("publish").outlets] == ["dl2://traces/validated"]
    assert [t.task_id for t in bag.dags["dl2_online_finetune"].topological_sort()][:2] == ["collect", "workloads"]


def test_the_pipeline_package_imports_no_airflow() -> None:
    code = "import sys, pipelines.lifecycle, pipelines.promote, pipelines.collect; print('airflow' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


# -- a real scheduler ---------------------------------------------------------------------------------------------


def free_port() -> int:
    with closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Standalone:
    url: str
    token: str
    home: Path
    root: Path

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"null")

    def trigger(self, dag_id: str) -> str:
        return str(self.call("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None})["dag_run_id"])

    def wait(self, dag_id: str, run_id: str) -> str:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while time.monotonic() < deadline:
            state = str(self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"])
            if state in ("success", "failed"):
                return state
            time.sleep(3)
        raise AssertionError(f"{dag_id} {run_id} did not finish within {RUN_TIMEOUT_S} s; logs: {self.home}")

    def settle(self, dag_id: str) -> dict[str, str]:
        """Wait until no run of the DAG is queued or running (the scheduler adds its own scheduled run when a DAG
        is unpaused); run id -> state."""
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while True:
            runs = {r["dag_run_id"]: r["state"] for r in self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns")["dag_runs"]}
            if all(state in ("success", "failed") for state in runs.values()):
                return runs
            assert time.monotonic() < deadline, f"{dag_id} runs did not finish: {runs}; logs: {self.home}"
            time.sleep(3)

    def tasks(self, dag_id: str, run_id: str) -> dict[str, tuple[str, int]]:
        found = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]
        return {t["task_id"]: (t["state"], t["try_number"]) for t in found}

    def asset_events(self, uri: str) -> list[dict[str, Any]]:
        with closing(sqlite3.connect(self.home / "airflow.db")) as connection:
            query = "SELECT e.extra, e.source_dag_id FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.uri=?"
            return [
                {"extra": json.loads(extra or "{}"), "dag": dag} for extra, dag in connection.execute(query, (uri,))
            ]


def _alive(group: int) -> bool:
    listing = subprocess.run(["ps", "-eo", "pgid=,stat="], capture_output=True, text=True).stdout
    return any(line.split()[0] == str(group) and not line.split()[1].startswith("Z") for line in listing.splitlines())


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGINT to the group twice (the scheduler waits for its workers after the first), then SIGTERM to the
    parent, SIGKILL to whatever is left (stack notes, gotcha 14)."""
    group = process.pid  # started with setsid: pid == pgid
    for sig, pause in ((signal.SIGINT, 3), (signal.SIGINT, 5)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, sig)
        time.sleep(pause)
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
    deadline = time.monotonic() + 20
    while _alive(group) and time.monotonic() < deadline:
        time.sleep(1)
    if _alive(group):
        os.killpg(group, signal.SIGKILL)
        time.sleep(1)
    process.wait(timeout=10)
    assert not _alive(group), f"processes left in group {group}"


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    from pipelines import sandbox

    base = tmp_path_factory.mktemp("airflow-standalone")
    root = sandbox.make(base / "repo", overrides={"data": {"traces": ["philly"]}})
    (root / "work" / "dvc-remote").mkdir(parents=True)
    home = base / "airflow"
    home.mkdir()
    port = free_port()
    env = airflow_environment(home, root / "dags")
    env.update(sandbox.environment(root))
    env.update(
        AIRFLOW__API__HOST="127.0.0.1",
        AIRFLOW__API__PORT=str(port),
        AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{port}/execution/",
        AIRFLOW__CORE__PARALLELISM="2",
        AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=str(free_port()),
        AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=str(free_port()),
        AIRFLOW_VAR_DL2_ROOT=str(root),
    )
    log = (home / "standalone.log").open("wb")
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "airflow"), "standalone"],
        env=env,
        cwd=home,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=5) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            assert process.poll() is None and time.monotonic() < deadline, (home / "standalone.log").read_text()[-3000:]
            time.sleep(2)
        passwords = home / "simple_auth_manager_passwords.json.generated"
        while not passwords.is_file():
            assert process.poll() is None and time.monotonic() < deadline, f"no {passwords.name}; logs: {home}"
            time.sleep(1)
        body = json.dumps({"username": "admin", "password": json.loads(passwords.read_text())["admin"]}).encode()
        request = urllib.request.Request(f"{url}/auth/token", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            token = json.loads(response.read())["access_token"]
        server = Standalone(url, token, home, root)
        server.call("POST", "/api/v2/pools", {"name": "dl2_dvc", "slots": 1, "description": "DVC locks the repo"})
        while True:
            try:
                for dag_id in ("dl2_trace_ingest", "dl2_online_finetune"):
                    server.call("GET", f"/api/v2/dags/{dag_id}")
                break
            except urllib.error.HTTPError:  # not parsed yet
                assert time.monotonic() < deadline, f"the DAGs were not parsed in time; logs: {home}"
                time.sleep(2)
        yield server
    finally:
        stop(process)
        log.close()


@pytest.mark.slow
def test_a_real_scheduler_runs_ingest_then_online_fine_tuning(standalone: Standalone) -> None:
    from pipelines import collect
    from pipelines.stage import Layout
    from tests.lifecycle_fixtures import decision_log

    incoming = standalone.root / "work" / "decisions"
    records = decision_log(incoming / "cluster-a")  # what a controller logged
    (incoming / "broken.jsonl").write_text("{not a record\n")  # and a poisoned log

    first = standalone.trigger("dl2_trace_ingest")
    second = standalone.trigger("dl2_trace_ingest")
    standalone.call("PATCH", "/api/v2/dags/dl2_trace_ingest", {"is_paused": False})
    runs = standalone.settle("dl2_trace_ingest")  # ours, and the one the scheduler adds on unpausing
    assert {first, second} <= set(runs) and set(runs.values()) == {"success"}, runs
    publishes = {run: standalone.tasks("dl2_trace_ingest", run)["publish"][0] for run in runs}
    # the data changed once (the first run to go): one event; every later run found nothing new and skipped it
    assert sorted(publishes.values()) == ["skipped"] * (len(runs) - 1) + ["success"], publishes
    ingested = next(run for run, state in publishes.items() if state == "success")
    (event,) = standalone.asset_events("dl2://traces/validated")
    assert event["dag"] == "dl2_trace_ingest" and event["extra"]["profile"] == "smoke"
    assert "data/ingested" in event["extra"]["ingest"]

    tuned = standalone.trigger("dl2_online_finetune")
    standalone.call("PATCH", "/api/v2/dags/dl2_online_finetune", {"is_paused": False})
    runs = standalone.settle("dl2_online_finetune")
    assert tuned in runs and set(runs.values()) == {"success"}, runs
    states = {run: standalone.tasks("dl2_online_finetune", run) for run in runs}
    published = [run for run, tasks in states.items() if tasks["publish"][0] == "success"]
    assert len(published) == 1, states  # one new challenger; a run after it found every stage up to date
    assert all(state in ("success", "skipped") for tasks in states.values() for state, _ in tasks.values()), states
    assert all(tries == 1 for tasks in states.values() for _, tries in tasks.values()), states
    (challenger,) = standalone.asset_events("dl2://models/dl2-policy/challenger")
    assert challenger["extra"]["feedback_records"] == records and challenger["extra"]["version"] == 1

    root = standalone.root
    segments = sorted((collect.clusters_dir(Layout(root)) / "cluster-a").glob("segment-*.jsonl"))
    assert len(segments) == 1 and len(segments[0].read_text().splitlines()) == records
    assert (root / "data" / "quarantine").is_dir()
    lock = (root / "dvc.lock").read_text()
    assert all(f"  {stage}:" in lock for stage in ("ingest", "validate", "warmup", "finetune", "online", "evaluate"))
    log = subprocess.run(["git", "log", "--format=%s"], cwd=root, capture_output=True, text=True, check=True).stdout
    assert f"dl2_trace_ingest {ingested}" in log and f"dl2_online_finetune {published[0]}" in log
    status = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True).stdout
    assert "dvc.lock" not in status  # what the runs produced is committed
    assert any((root / "work" / "dvc-remote").rglob("*")), "nothing pushed to the DVC remote"
