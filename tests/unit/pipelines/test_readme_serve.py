"""The README's `dl2 serve` works after `make demo` as written: it reads its versions from the MLflow store the
lifecycle leaves (`pipelines.lifecycle.store_uri`), with the kubeconfig `dl2 cluster` writes, and the version the
sample SchedulerPolicy pins loads from a store registered as the pipelines register."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from dl2.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[3]
PAGES = (ROOT / "README.md", ROOT / "k8s" / "README.md")
MODEL = ROOT / "models" / "dl2-philly"


def _checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_check_commands_serve", ROOT / "docs" / "check_commands.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def serve_commands(page: Path) -> list[argparse.Namespace]:
    """The `dl2 serve` commands of a page's code blocks, parsed by the CLI's own parser."""
    import shlex

    checker = _checker()
    found = []
    for _, command, inline in checker.commands(page):
        argv = shlex.split(checker.without_comment(command))
        if not inline and argv[:2] == ["dl2", "serve"]:
            found.append(build_parser().parse_args(argv[1:]))
    return found


def _pinned_version() -> str:
    return str(yaml.safe_load((ROOT / "k8s" / "schedulerpolicy.yaml").read_text())["spec"]["model"]["version"])


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_the_documented_serve_reads_the_store_the_lifecycle_leaves(page: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dl2.cli.cluster import DEFAULT_KUBECONFIG
    from pipelines.lifecycle import store_uri

    for name in ("MLFLOW_TRACKING_URI", "DL2_MLRUNS", "DL2_PIPELINE_ROOT"):
        monkeypatch.delenv(name, raising=False)
    (args,) = serve_commands(page)
    assert args.models_dir is None  # `make demo` writes no model folders: it registers versions in MLflow
    assert args.mlflow_uri == store_uri() == "sqlite:///mlruns/mlflow.db"
    assert args.kubeconfig == DEFAULT_KUBECONFIG.with_name(f"{DEFAULT_KUBECONFIG.stem}-serve.kubeconfig")


@pytest.mark.slow
def test_the_documented_serve_loads_the_pinned_version_from_a_store_the_pipelines_registered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dl2.kube.models import PolicyRuntime, mlflow_loader
    from dl2.rl.learned import LearnedScheduler
    from pipelines import registry
    from tests.lifecycle_fixtures import empty_mlflow_db, new_store

    store = new_store(empty_mlflow_db(tmp_path / "template"), tmp_path / "mlruns")
    monkeypatch.setenv("DL2_MLRUNS", str(store))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_REGISTRY_URI", raising=False)
    monkeypatch.chdir(tmp_path)  # the README's relative paths, from a checkout's root
    version, _ = registry.register(MODEL)
    assert str(version.version) == _pinned_version()  # the lifecycle's first registered version
    (args,) = serve_commands(ROOT / "README.md")
    runtime = PolicyRuntime(mlflow_loader(args.model_cache, args.mlflow_uri))  # as `dl2 serve` builds it
    assert runtime.ensure("dl2-policy", _pinned_version()), runtime.load_error
    assert isinstance(runtime.current.scheduler, LearnedScheduler)
    assert (tmp_path / args.model_cache / "dl2-policy" / _pinned_version() / "config.json").is_file()
