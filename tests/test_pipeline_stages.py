"""Every pipeline stage in the smoke profile, in a temporary root with its own MLflow store: outputs written,
re-runs change nothing and add no MLflow run, lost outputs come back from MLflow, the command line works, and
`dvc repro` runs the DVC pipeline in a copy of the repository.

The whole chain runs once per module (about a minute); the tests then look at what it left.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipelines import params as params_module
from pipelines.params import ParamsError
from pipelines.stage import Layout, StageResult
from pipelines.tracking import ROOT

STAGES = ("ingest", "validate", "workloads", "warmup", "feedback", "finetune", "evaluate", "ablate", "report")


def run_stage(name: str, params: params_module.Params, layout: Layout) -> StageResult:
    result: StageResult = importlib.import_module(f"pipelines.{name}").run(params, layout)
    return result


def mlflow_runs() -> int:
    """Runs in the dl2 experiment, child runs included."""
    import mlflow

    from pipelines import tracking

    tracking.configure()
    return len(mlflow.search_runs(experiment_names=[tracking.EXPERIMENT], output_format="list"))


@pytest.fixture(scope="module")
def chain(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[params_module.Params, Layout, dict[str, StageResult]]]:
    root = tmp_path_factory.mktemp("lifecycle")
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("MLFLOW_TRACKING_URI", raising=False)
        patch.setenv("DL2_MLRUNS", str(root / "mlruns"))
        params = params_module.load(smoke=True)
        layout = Layout(root)
        results = {name: run_stage(name, params, layout) for name in STAGES}
        yield params, layout, results


def test_every_stage_writes_its_outputs(chain: tuple[params_module.Params, Layout, dict[str, StageResult]]) -> None:
    params, layout, results = chain
    assert not any(r.up_to_date for r in results.values())
    for result in results.values():
        for output in result.outputs:
            assert (layout.root / output).exists(), output
    assert {"warmup", "finetune", "evaluate", "ablate"} == {n for n, r in results.items() if r.run_id}
    metrics = json.loads((layout.reports / "metrics.json").read_text())
    assert set(metrics["schedulers"]) == {"finetune", "warmup", *params.evaluate.baselines}
    assert metrics["best_heuristic"] in params.evaluate.baselines
    assert all(metrics["schedulers"][b]["runs"] == len(params.workloads.test_seeds) for b in params.evaluate.baselines)
    ablation = json.loads((layout.reports / "ablation.json").read_text())
    assert list(ablation["variants"]) == list(params.ablate.variants)
    assert "| drf |" in (layout.reports / "summary.md").read_text()
    curve = json.loads((layout.model("finetune") / "history.json").read_text())
    assert [row["iteration"] for row in curve] == list(range(params.finetune.iterations))
    assert (layout.plots / "jct_cdf.csv").read_text().startswith("percentile,")


def test_ablation_children_are_logged_under_the_parent(
    chain: tuple[params_module.Params, Layout, dict[str, StageResult]],
) -> None:
    import mlflow

    params, _, results = chain
    parent = mlflow.get_run(results["ablate"].run_id)
    children = mlflow.search_runs(
        experiment_names=["dl2"],
        filter_string=f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'",
        output_format="list",
    )
    assert len(children) == len(params.ablate.variants) * len(params.ablate.seeds)
    assert {c.data.params["variant"] for c in children} == set(params.ablate.variants)
    assert all(f"{v}.safe_runs" in parent.data.metrics for v in params.ablate.variants)


def test_second_run_is_up_to_date_and_adds_no_mlflow_run(
    chain: tuple[params_module.Params, Layout, dict[str, StageResult]],
) -> None:
    params, layout, _ = chain
    before = mlflow_runs()
    stamps = {p: p.stat().st_mtime_ns for p in layout.reports.rglob("*") if p.is_file()}
    again = {name: run_stage(name, params, layout) for name in STAGES}
    assert {n: r.up_to_date for n, r in again.items()} == dict.fromkeys(STAGES, True)
    assert mlflow_runs() == before
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # nothing rewritten


def test_lost_model_is_restored_from_mlflow_not_retrained(
    chain: tuple[params_module.Params, Layout, dict[str, StageResult]],
) -> None:
    from pipelines.warmup import run

    params, layout, results = chain
    policy = (layout.model("warmup") / "policy.pt").read_bytes()
    before = mlflow_runs()
    shutil.rmtree(layout.model("warmup"))  # as `dvc repro` does before re-running a stage, or a fresh checkout
    result = run(params, layout)
    assert result.up_to_date and result.summary.get("restored_from_mlflow")
    assert result.run_id == results["warmup"].run_id
    assert (layout.model("warmup") / "policy.pt").read_bytes() == policy
    assert mlflow_runs() == before


@pytest.mark.parametrize("stage", STAGES)
def test_command_line_help(stage: str, capsys: pytest.CaptureFixture[str]) -> None:
    module = importlib.import_module(f"pipelines.{stage}")
    with pytest.raises(SystemExit) as done:
        module.cli(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert "--smoke" in text and "--force" in text


def test_bad_parameters_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ParamsError, match="unknown key"):
        params_module.load(overrides=["warmup.epoch=3"])
    assert params_module.load(smoke=True, overrides=["warmup.epochs=3"]).warmup.epochs == 3  # overrides beat smoke
    bad = tmp_path / "params.yaml"
    bad.write_text("workloads: {mode: quantum}\n")
    from pipelines.workloads import cli

    assert cli(["--params", str(bad)]) == 2


def test_warm_up_parameters_reach_its_configuration() -> None:
    from pipelines.warmup import warm_up_config

    overrides = ["warmup.label_smoothing=0.1", "warmup.packed=true", "warmup.record_every=3"]
    config = warm_up_config(params_module.load(smoke=True, overrides=overrides))
    assert config.supervised.label_smoothing == 0.1
    assert config.observation.packed is True
    assert config.record_every == 3
    with pytest.raises(ParamsError, match="label_smoothing"):
        params_module.load(overrides=["warmup.label_smoothing=1.0"])
    with pytest.raises(ParamsError, match="compat-mode"):
        params_module.load(overrides=["warmup.packed=true", "workloads.mode=realistic"])


def test_fine_tune_credit_reaches_its_configuration_and_ablations_keep_dl2s() -> None:
    from dl2.rl.networks import NetworkConfig
    from pipelines.rl import finetune_config, rl_config

    overrides = ["finetune.credit=deviation", "finetune.continuation=drf", "finetune.temperature=0.5"]
    params = params_module.load(smoke=True, overrides=overrides)
    config = finetune_config(params, NetworkConfig())
    assert (config.credit, config.continuation, config.temperature) == ("deviation", "drf", 0.5)
    assert rl_config(params, NetworkConfig(), 1, 0, "no-replay").credit == "returns"
    with pytest.raises(ParamsError, match=r"needs workloads\.mode compat"):
        params_module.load(overrides=["finetune.credit=deviation", "workloads.mode=realistic"])
    with pytest.raises(ParamsError, match=r"finetune\.continuation"):
        params_module.load(overrides=["finetune.continuation=lottery"])
    with pytest.raises(ParamsError, match=r"finetune\.credit"):
        params_module.load(overrides=["finetune.credit=luck"])


def test_dvc_repro_in_a_copy(tmp_path: Path) -> None:
    """The DVC pipeline parses, runs its data stages at smoke size, versions the ingested traces in the local
    remote, and is up to date on a second `dvc repro`."""
    copy = tmp_path / "repo"
    for part in ("dl2", "pipelines", "dvc.yaml", "data/traces/philly", "data/traces/alibaba_gpu2023", ".dvcignore"):
        source = ROOT / part
        target = copy / part
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        elif source.exists():
            shutil.copy(source, target)
    (copy / "data" / "reference").symlink_to(ROOT / "data" / "reference")  # read-only inputs of the library
    text = (ROOT / "params.yaml").read_text().replace("profile: full", "profile: smoke", 1)
    (copy / "params.yaml").write_text(text)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.update(DL2_MLRUNS=str(tmp_path / "mlruns"), GX_ANALYTICS_ENABLED="false")
    env.pop("MLFLOW_TRACKING_URI", None)

    def dvc(*arguments: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "dvc", *arguments], cwd=copy, env=env, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    dvc("init", "--no-scm", "-q")
    dvc("remote", "add", "-d", "local", "work/dvc-remote")
    listed = [line.split()[0] for line in dvc("stage", "list").splitlines() if line.strip()]
    assert listed == list(STAGES)
    dvc("repro", "workloads")
    assert json.loads((copy / "reports" / "validation" / "philly.json").read_text())["success"] is True
    assert "didn't change" in dvc("repro", "workloads") or "up to date" in dvc("status", "workloads")
    dvc("push", "-q")
    assert any((copy / "work" / "dvc-remote").rglob("*")), "nothing pushed to the local remote"
    lock = (copy / "dvc.lock").read_text()
    assert "data/ingested" in lock and "md5" in lock
