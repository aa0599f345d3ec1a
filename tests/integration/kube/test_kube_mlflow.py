"""The controller loads a pinned version from the MLflow registry, as the pipelines register it: its own small
loader (`dl2.kube.models.mlflow_loader`, no `pipelines` import), smoke-tested, swapped in, and refused with the
last good model kept when a version cannot be loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from dl2.kube.controller import Controller, ControllerConfig
from dl2.kube.models import PolicyRuntime, mlflow_loader
from dl2.rl.learned import LearnedScheduler
from tests.lifecycle_fixtures import empty_mlflow_db, new_store

MODEL = Path(__file__).resolve().parents[3] / "models" / "dl2-philly"


@pytest.mark.slow
def test_a_registered_version_is_downloaded_smoke_tested_and_served(kube, policies, tmp_path, monkeypatch):
    from pipelines import registry

    store = new_store(empty_mlflow_db(tmp_path / "template"), tmp_path / "mlruns")
    monkeypatch.setenv("DL2_MLRUNS", str(store))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_REGISTRY_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    version, _ = registry.register(MODEL)
    uri = f"sqlite:///{store / 'mlflow.db'}"
    loader = mlflow_loader(tmp_path / "cache", uri)
    runtime = PolicyRuntime(loader)
    assert runtime.ensure("dl2-policy", str(version.version))
    assert isinstance(runtime.current.scheduler, LearnedScheduler)
    assert (tmp_path / "cache" / "dl2-policy" / str(version.version) / "config.json").is_file()
    assert not runtime.ensure("dl2-policy", "99") and "99" in runtime.load_error
    assert runtime.current.version == str(version.version)  # the last good model keeps serving
    policies.create("shadow", version=str(version.version))
    config = ControllerConfig("a", decision_log=tmp_path / "decisions", clock="cluster")
    controller = Controller(kube.controller_api(), config, loader)
    controller.refresh_policy(policies.read())
    controller.publish_status()
    status = policies.read()["status"]
    assert status["loadedModel"]["version"] == str(version.version)
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"
