"""Health that means progress, piece by piece: `/readyz` after failed attempts of the slot loop and while the API
server does not answer, counters that start at 0, the placeholder bucket refused, and the start-up probe of the
record store (`tests/integration/kube/test_kube_health.py` has them end to end)."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from dl2.config import ConfigError
from dl2.kube.metrics import FALLBACK_REASONS, MODES, Health, HealthServer, Metrics
from dl2.kube.models import PolicyRuntime, smoke_view
from dl2.kube.policy import Mode
from dl2.kube.records import DecisionLog, StoreUnusable
from dl2.kube.settings import ControllerConfig


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.fixture
def served():
    """A Metrics and a Health behind a real HealthServer on a loopback port."""
    metrics, health = Metrics(), Health()
    server = HealthServer(metrics, health, "127.0.0.1", 0).start()
    yield metrics, health, server.port
    server.stop()


def test_two_failed_attempts_in_a_row_make_the_replica_unready_until_a_slot_completes(served):
    _, health, port = served
    health.ready, health.reason = True, "ready"
    health.slot_failed(ConnectionError("no route to the bucket"))
    assert get(port, "/readyz") == (200, "ready\n")  # one failure is retried, not reported
    health.slot_failed(ConnectionError("still no route"))
    code, reason = get(port, "/readyz")
    assert code == 503 and reason.startswith("SlotsFailing: 2 attempts of the slot loop in a row failed since ")
    assert reason.endswith(": ConnectionError: still no route\n")
    assert get(port, "/healthz") == (200, "ok\n")  # alive: a restart would not bring the bucket back
    health.clear_failures()
    assert get(port, "/readyz") == (200, "ready\n")
    health.slot_failed(ConnectionError("once"))  # the count starts again after a completed slot
    assert get(port, "/readyz") == (200, "ready\n")


def test_a_stall_is_reported_before_a_policy_problem(served):
    _, health, port = served
    health.ready, health.reason = False, "LoadFailed"
    assert get(port, "/readyz") == (503, "LoadFailed\n")
    for _ in range(3):
        health.slot_failed(OSError("read-only file system"))
    code, reason = get(port, "/readyz")
    assert code == 503 and reason.startswith("SlotsFailing: 3 attempts") and "OSError: read-only" in reason


def test_a_replica_the_api_server_does_not_answer_is_unready(served):
    _, health, port = served
    health.ready, health.reason = True, "ready"
    health.unreachable = "the API server has not answered for 12 s: MaxRetryError: connection refused"
    assert get(port, "/readyz") == (503, f"ApiUnreachable: {health.unreachable}\n")
    health.unreachable = None
    assert get(port, "/readyz") == (200, "ready\n")


def test_labelled_counters_start_at_zero_for_their_known_labels(served):
    _, _, port = served
    code, text = get(port, "/metrics")
    assert code == 200
    lines = set(text.splitlines())
    reasons = ("no-model", "input-out-of-range", "model-error", "invalid-output")
    expected = (
        [f'dl2_decisions_total{{mode="{mode}"}} 0.0' for mode in ("shadow", "canary", "active")]
        + [f'dl2_fallbacks_total{{reason="{reason}"}} 0.0' for reason in reasons]
        + ['dl2_resizes_total{kind="PyTorchJob"} 0.0', 'dl2_resizes_total{kind="Job"} 0.0']
        + ['dl2_model_loads_total{result="loaded"} 0.0', 'dl2_model_loads_total{result="failed"} 0.0']
        + ["dl2_slot_failures_total 0.0"]
    )
    assert [line for line in expected if line not in lines] == []


def test_the_known_labels_are_the_values_the_controller_gives():
    assert tuple(mode.value for mode in Mode if mode is not Mode.OFF) == MODES
    decision = PolicyRuntime(lambda name, version: None).decide(smoke_view(), "drf")  # no model loaded
    assert decision.fallback is not None and decision.fallback.split(":", 1)[0] in FALLBACK_REASONS


def test_the_stall_gauge_starts_at_the_start_so_a_fresh_replica_is_not_stalled():
    import time

    before = time.time()
    metrics = Metrics()
    started = metrics.registry.get_sample_value("dl2_last_slot_completed_timestamp_seconds")
    assert started is not None and before <= started <= time.time()


def test_the_shipped_placeholder_bucket_is_refused_with_what_to_set():
    with pytest.raises(ConfigError) as refused:
        ControllerConfig("a", decision_log="s3://REPLACE-WITH-YOUR-BUCKET/dl2")
    assert str(refused.value) == (
        "decision_log: 's3://REPLACE-WITH-YOUR-BUCKET/dl2' is not allowed (the shipped placeholder: set your bucket, "
        "DL2_DECISION_LOG in the ConfigMap dl2-scheduler-config (k8s/configmap.yaml) or the chart's records.url)"
    )


def test_the_probe_of_a_writable_folder_leaves_nothing_behind(tmp_path):
    DecisionLog(tmp_path / "decisions").probe("dl2-scheduler-0")
    assert [p for p in (tmp_path / "decisions").rglob("*") if p.is_file()] == []


def test_the_probe_of_a_folder_that_cannot_be_written_says_so_in_one_line(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(StoreUnusable) as refused:
        DecisionLog(tmp_path / "file" / "decisions").probe("dl2-scheduler-0")
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"decision log {tmp_path}/file/decisions: cannot write and read back a probe object")
    assert "(NotADirectoryError: " in message
    assert message.endswith("check the URL, the bucket, the endpoint (AWS_ENDPOINT_URL) and the credentials")


def test_an_unreachable_registry_fails_a_load_at_its_first_try(tmp_path, monkeypatch, caplog) -> None:
    """MLflow's default (7 retries with growing backoff) held the slot loop for minutes; the runtime retries."""
    from dl2.kube.models import MLFLOW_REQUESTS, mlflow_loader

    for variable in MLFLOW_REQUESTS:
        monkeypatch.delenv(variable, raising=False)
    runtime = PolicyRuntime(mlflow_loader(tmp_path, "http://mlflow.invalid:5000"))
    with caplog.at_level("WARNING"):
        assert not runtime.ensure("dl2-policy", "1")
    assert "dl2-policy v1" in (runtime.load_error or "")
    assert not [record for record in caplog.records if "Retrying" in record.getMessage()]


def test_the_registry_settings_of_the_environment_win(tmp_path, monkeypatch) -> None:
    import os

    from dl2.kube.models import mlflow_loader

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3")
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_TIMEOUT", raising=False)
    mlflow_loader(tmp_path, "http://mlflow.invalid:5000")
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "3"
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "10"
