"""Every pipeline stage in the smoke profile, in a temporary root with its own MLflow store: outputs written,
each recording the code version that made it, runs recording their datasets, a killed run ended, and the
command line. Whether a stage needs to run is DVC's business (`tests/integration/lifecycle/test_dvc.py`).

The whole chain runs once per module (about a minute); the tests then look at what it left.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dl2.paths import REPO_ROOT
from pipelines import params as params_module
from pipelines.params import ParamsError
from pipelines.stage import Layout, StageResult

STAGES = (
    "ingest", "validate", "workloads", "warmup", "feedback", "finetune", "online", "harmony", "evaluate", "ablate",
    "report",
)  # fmt: skip


def run_stage(name: str, params: params_module.Params, layout: Layout) -> StageResult:
    result: StageResult = importlib.import_module(f"pipelines.{name}").run(params, layout)
    return result


def file_bytes(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


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
    for result in results.values():
        for output in result.outputs:
            assert (layout.root / output).exists(), output
    assert {"validate", "warmup", "finetune", "online", "harmony", "evaluate", "ablate"} == {
        n for n, r in results.items() if r.run_id
    }
    metrics = json.loads((layout.reports / "metrics.json").read_text())
    heuristics = {*params.evaluate.baselines, params.warmup.teacher, *params.promote.incumbent}
    assert set(metrics["schedulers"]) == {"online", "finetune", "warmup", *heuristics}
    # no cluster records collected: `online` is the fine-tuned model, byte for byte, simulated once
    assert metrics["model_digests"]["online"] == metrics["model_digests"]["finetune"]
    assert metrics["schedulers"]["online"]["avg_jct_s"] == metrics["schedulers"]["finetune"]["avg_jct_s"]
    assert results["online"].summary == {"cluster_logs": 0, "kept": None}
    # nor is Harmony refit: the deployed folders pass through byte for byte
    assert results["harmony"].summary == {
        "cluster_logs": 0,
        "refits": 0,
        "speed_model_kept": False,
        "placer_kept": False,
    }
    for name, shipped in (("speed-model", "harmony-speed-philly"), ("placer", "harmony-placer-philly")):
        assert file_bytes(layout.model("harmony") / name) == file_bytes(REPO_ROOT / "models" / shipped)
    assert set(metrics["heuristics"]) == heuristics and metrics["teacher"] == params.warmup.teacher
    assert metrics["best_heuristic"] in params.evaluate.baselines
    assert all(metrics["schedulers"][b]["runs"] == len(params.workloads.test_seeds) for b in params.evaluate.baselines)
    ablation = json.loads((layout.reports / "ablation.json").read_text())
    assert list(ablation["variants"]) == list(params.ablate.variants)
    assert "| drf |" in (layout.reports / "summary.md").read_text()
    curve = json.loads((layout.model("finetune") / "history.json").read_text())
    assert [row["iteration"] for row in curve] == list(range(params.finetune.rl.iterations))
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
    from pipelines.ablate import same_as_full

    trained = [v for v in params.ablate.variants if same_as_full(params, v) is None]
    assert trained and len(trained) < len(params.ablate.variants)  # one iteration: no-replay is not trained
    assert len(children) == len(trained) * len(params.ablate.seeds)
    assert {c.data.params["variant"] for c in children} == set(trained)
    assert all(f"{v}.safe_runs" in parent.data.metrics for v in trained)


def test_every_output_records_the_code_that_made_it(
    chain: tuple[params_module.Params, Layout, dict[str, StageResult]],
) -> None:
    from pipelines.code import code_version

    _, layout, results = chain
    for name, result in results.items():
        assert result.code_version == code_version(f"pipelines.{name}"), name
    recorded = {
        "ingest": json.loads((layout.ingested("philly") / "MANIFEST.json").read_text())["code_version"],
        "validate": json.loads(layout.validation_report("philly").read_text())["code_version"],
        "workloads": json.loads(layout.workloads_report.read_text())["code_version"],
        "warmup": json.loads((layout.model("warmup") / "config.json").read_text())["metadata"]["code_version"],
        "feedback": json.loads((layout.simulated_feedback / "MANIFEST.json").read_text())["code_version"],
        "finetune": json.loads((layout.model("finetune") / "config.json").read_text())["metadata"]["code_version"],
        "online": json.loads((layout.reports / "online.json").read_text())["code_version"],
        "harmony": json.loads((layout.reports / "harmony.json").read_text())["code_version"],
        "evaluate": json.loads((layout.reports / "metrics.json").read_text())["code_version"],
        "ablate": json.loads((layout.reports / "ablation.json").read_text())["code_version"],
    }
    assert recorded == {name: results[name].code_version for name in recorded}


def test_runs_record_their_datasets_and_the_data_version(
    chain: tuple[params_module.Params, Layout, dict[str, StageResult]],
) -> None:
    import mlflow

    from pipelines.tracking import data_version

    _, layout, results = chain
    for name, contexts in {"warmup": {"training"}, "finetune": {"training", "feedback"}, "evaluate": {"test"},
                           "ablate": {"training", "test"}, "validate": {"validation"}}.items():  # fmt: skip
        run = mlflow.get_run(results[name].run_id)
        found = {tag.value for d in run.inputs.dataset_inputs for tag in d.tags if tag.key == "mlflow.data.context"}
        assert found == contexts, name
        assert run.data.tags["dvc_data_version"] == data_version(layout.root) != "none"


def test_a_killed_stage_leaves_no_run_running(
    chain: tuple[params_module.Params, Layout, dict[str, StageResult]],
) -> None:
    """A run whose process died (SIGKILL: it could not end its run) is ended as KILLED by the next run of the
    stage; a run of another stage, or one whose process lives, is left alone."""
    import mlflow

    from pipelines import tracking

    _, layout, _ = chain
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    tags = {"dl2.root": str(layout.root.resolve()), "dl2.host": socket.gethostname()}
    client = mlflow.MlflowClient()
    experiment = mlflow.get_experiment_by_name(tracking.EXPERIMENT).experiment_id
    killed = client.create_run(experiment, tags={**tags, "dl2.stage": "report", "dl2.pid": dead.stdout.strip()})
    living = client.create_run(experiment, tags={**tags, "dl2.stage": "report", "dl2.pid": str(os.getpid())})
    other = client.create_run(experiment, tags={**tags, "dl2.stage": "warmup", "dl2.pid": dead.stdout.strip()})
    assert tracking.end_abandoned_runs("report", layout.root) == [killed.info.run_id]
    assert client.get_run(killed.info.run_id).info.status == "KILLED"
    assert client.get_run(living.info.run_id).info.status == "RUNNING"
    assert client.get_run(other.info.run_id).info.status == "RUNNING"
    with tracking.stage_run("warmup", root=layout.root):  # the next run of that stage ends it
        pass
    assert client.get_run(other.info.run_id).info.status == "KILLED"
    client.set_terminated(living.info.run_id)


@pytest.mark.parametrize("stage", STAGES)
def test_command_line_help(stage: str, capsys: pytest.CaptureFixture[str]) -> None:
    module = importlib.import_module(f"pipelines.{stage}")
    with pytest.raises(SystemExit) as done:
        module.cli(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert "--smoke" in text and "--json" in text and "--force" not in text


def test_bad_parameters_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ParamsError, match="unknown key"):
        params_module.load(overrides=["warmup.epoch=3"])
    assert params_module.load(smoke=True, overrides=["warmup.epochs=3"]).warmup.supervised.epochs == 3  # beats smoke
    bad = tmp_path / "params.yaml"
    bad.write_text("workloads: {mode: quantum}\n")
    from pipelines.workloads import cli

    assert cli(["--params", str(bad)]) == 2


def test_warm_up_parameters_are_the_librarys_configuration() -> None:
    params = params_module.load(smoke=True, overrides=["warmup.label_smoothing=0.1", "warmup.record_every=3"])
    config = params.warmup
    assert (config.supervised.label_smoothing, config.record_every) == (0.1, 3)
    assert (config.source, config.mode) == (params.workloads.train_source, params.workloads.mode)
    with pytest.raises(ParamsError, match=r"warmup: label_smoothing: 1\.0 is not allowed \(input should be less"):
        params_module.load(overrides=["warmup.label_smoothing=1.0"])
    with pytest.raises(ParamsError, match=r"warmup: packed: True is not allowed \(packed requests are a compat"):
        params_module.load(overrides=["warmup.packed=true", "workloads.mode=realistic", "finetune.credit=returns"])
    with pytest.raises(ParamsError, match=r"warmup: teacher: 'bogus' is not allowed \(realistic-mode schedulers"):
        params_module.load(overrides=["warmup.teacher=bogus"])


def test_fine_tune_parameters_are_the_librarys_configuration() -> None:
    from dl2.rl.config import NetworkConfig
    from pipelines.rl import ablation_config, finetune_config

    overrides = ["finetune.credit=deviation", "finetune.continuation=drf", "finetune.temperature=0.5"]
    params = params_module.load(smoke=True, overrides=overrides)
    config = finetune_config(params, NetworkConfig())
    assert (config.credit, config.continuation, config.temperature) == ("deviation", "drf", 0.5)
    assert config.validation_seeds == params.workloads.validation_seeds  # from the workloads section
    assert ablation_config(params, NetworkConfig(), 0, "no-replay").credit == "returns"  # ablations keep DL2's
    assert ablation_config(params, NetworkConfig(), 0, "no-replay").replay.enabled is False
    with pytest.raises(ParamsError, match=r"finetune: credit: 'deviation' is not allowed \(exact credit needs"):
        params_module.load(overrides=["finetune.credit=deviation", "workloads.mode=realistic", "warmup.packed=false"])
    with pytest.raises(ParamsError, match=r"finetune: continuation: 'lottery' is not allowed"):
        params_module.load(overrides=["finetune.continuation=lottery"])
    with pytest.raises(ParamsError, match=r"finetune: credit: 'luck' is not allowed \(input should be 'returns'"):
        params_module.load(overrides=["finetune.credit=luck"])
    with pytest.raises(ParamsError, match=r"finetune: gamma: 7 is not allowed \(input should be less than or equal"):
        params_module.load(overrides=["finetune.gamma=7"])
    with pytest.raises(ParamsError, match=r"finetune: learning_rat: unknown key; known: alternatives"):
        params_module.load(overrides=["finetune.learning_rate=0.1", "finetune.learning_rat=0.1"])


def test_defaults_are_the_same_through_every_door(tmp_path: Path) -> None:
    """The library's default, the command line's (no flag given) and the pipeline's (no key given) are one value,
    because both doors build the library's configuration: there are no copies to drift apart."""
    import argparse

    from dl2.cli.train import add_parsers, rl_configs
    from dl2.rl.config import RLConfig, WarmUpConfig
    from pipelines.params import FINETUNE_KEYS, WARMUP_SECTION_KEYS

    parser = argparse.ArgumentParser()
    add_parsers(parser.add_subparsers())
    empty = tmp_path / "params.yaml"
    empty.write_text("{}\n")
    pipeline = params_module.load(empty)
    library_rl, library_warmup = RLConfig(), WarmUpConfig()
    _, cli_rl = rl_configs(parser.parse_args(["train-rl", "--out", str(tmp_path / "m")]), None)
    from dl2.cli.train import warm_up_config

    cli_warmup = warm_up_config(parser.parse_args(["train-sl", "--out", str(tmp_path / "m")]))
    for key in FINETUNE_KEYS:
        if key.path[0] == "rl":
            name = key.path[1:]
            assert _get(pipeline.finetune.rl, name) == _get(cli_rl, name) == _get(library_rl, name), key.name
    for key in WARMUP_SECTION_KEYS:
        assert _get(pipeline.warmup, key.path) == _get(cli_warmup, key.path) == _get(library_warmup, key.path), key.name


def test_online_learns_from_collected_cluster_records_and_keeps_the_better_policy(
    chain: tuple[params_module.Params, Layout, dict[str, StageResult]],
) -> None:
    """A collected log (what `pipelines.collect` writes under data/feedback/clusters) is learned from: the model
    folder records the steps and whether they were kept; the fine-tuned model is untouched."""
    from pipelines import online
    from pipelines.collect import clusters_dir
    from pipelines.registry import model_digest
    from tests.lifecycle_fixtures import decision_log

    params, layout, _ = chain
    finetuned = model_digest(layout.model("finetune"))
    records = decision_log(clusters_dir(layout) / "cluster-a")
    result = online.run(params, layout)
    assert result.summary["cluster_logs"] == 1 and isinstance(result.summary["kept"], bool)
    report = json.loads((layout.reports / online.RECORD).read_text())
    learned = report["online"]
    assert learned["logs"][0]["decisions"] > 0 and learned["kept"] == result.summary["kept"]
    assert "compat-mode" in report["twin"]["skipped"]  # the smoke pipeline trains compat mode: no twin to learn in
    assert learned["logs"][0]["log"].endswith("cluster-a") and records > 0
    import torch

    weights = [torch.load(layout.model(n) / "policy.pt", weights_only=True) for n in ("online", "finetune")]
    same = all(torch.equal(weights[0][k], weights[1][k]) for k in weights[1])
    assert same != learned["kept"]  # not kept: the fine-tuned policy, under the record of what was tried
    kept_in_config = json.loads((layout.model("online") / "config.json").read_text())["metadata"].get("online")
    assert (model_digest(layout.model("online")) == finetuned) != learned["kept"]  # not kept: byte for byte
    assert (kept_in_config is not None) == learned["kept"]
    assert model_digest(layout.model("finetune")) == finetuned


def _get(config: object, path: tuple[str, ...]) -> object:
    for part in path:
        config = getattr(config, part)
    return config


def test_an_ablation_row_that_cannot_differ_says_so() -> None:
    """Hand case: `no-replay` trains bit-identically to `full` on every seed (the budget left replay nothing to
    replay), `no-value-baseline` on one seed of two, and `no-exploration` never moved from the warm-up."""
    from pipelines.ablate import Trained, summarize
    from pipelines.report import ablation_lines

    params = params_module.load(smoke=True, overrides=["ablate.seeds=[0, 1]"])
    results = {
        "full": {0: Trained(100.0, "a", True), 1: Trained(110.0, "b", True)},
        "no-replay": {0: Trained(100.0, "a", True), 1: Trained(110.0, "b", True)},
        "no-value-baseline": {0: Trained(100.0, "a", True), 1: Trained(130.0, "c", True)},
        "no-exploration": {0: Trained(90.0, "w", False), 1: Trained(None, "w", False)},
    }
    table = summarize(params, results)
    rows = table["variants"]
    assert rows["no-replay"]["cannot_differ"] and not rows["full"]["cannot_differ"]
    assert rows["no-value-baseline"]["identical_to_full"] == 1 and not rows["no-value-baseline"]["cannot_differ"]
    assert rows["no-exploration"]["moved_from_warmup"] == 0 and rows["no-exploration"]["safe_runs"] == 1
    assert rows["no-value-baseline"]["test_avg_jct_s"] == 115.0 and rows["no-value-baseline"][
        "vs_full"
    ] == pytest.approx(115 / 105)
    text = "\n".join(ablation_lines(table))
    assert "| no-replay |" in text and "cannot differ at this budget" in text
    assert "no policy update at this budget" in text and "identical to full on 1 of 2 seeds" in text


def test_a_variant_that_cannot_differ_by_construction_is_not_trained_and_says_why() -> None:
    """With one iteration replay has no earlier iteration to draw from: `no-replay` is left out, its row says
    why, and at two iterations it is trained like every other variant."""
    from pipelines.ablate import Trained, same_as_full, summarize
    from pipelines.report import ablation_lines

    params = params_module.load(smoke=True, overrides=["ablate.iterations=1"])
    assert [v for v in params.ablate.variants if same_as_full(params, v)] == ["no-replay"]
    assert not any(same_as_full(params_module.load(smoke=True, overrides=["ablate.iterations=2"]), v)
                   for v in params.ablate.variants)  # fmt: skip
    results = {v: {0: Trained(100.0, v, True)} for v in params.ablate.variants if v != "no-replay"}
    table = summarize(params, results, {"no-replay": str(same_as_full(params, "no-replay"))})
    row = table["variants"]["no-replay"]
    assert row["runs"] == 0 and row["test_avg_jct_s"] is None and row["cannot_differ"] and row["vs_full"] is None
    assert table["order"] == list(params.ablate.variants)
    text = "\n".join(ablation_lines(table))
    assert "| no-replay | 0/0 |" in text and "not trained: replay draws on earlier iterations" in text


def test_harmony_refits_from_collected_logs_with_placements_and_names_those_without(
    chain: tuple[params_module.Params, Layout, dict[str, StageResult]],
) -> None:
    """Collected logs that say where jobs ran refit Harmony in turn (the speed model kept where it errs less on the
    log's last slots, the next log starting from it); one that holds no placement is skipped and named; the
    shipped models are untouched."""
    from pipelines import harmony
    from pipelines.collect import clusters_dir
    from pipelines.steps import harmony_line
    from tests.lifecycle_fixtures import placed_decision_log

    params, layout, _ = chain
    shipped = file_bytes(REPO_ROOT / "models" / "harmony-speed-philly")
    placed_decision_log(clusters_dir(layout) / "a-placed")
    placed_decision_log(clusters_dir(layout) / "b-placed", seed=1)
    placed_decision_log(clusters_dir(layout) / "c-unplaced", placements=False)
    result = harmony.run(params, layout)
    assert "steady samples" in result.summary["skipped_logs"]["data/feedback/clusters/c-unplaced"]
    report = json.loads((layout.reports / harmony.RECORD).read_text())
    first, second = (r for r in report["logs"] if r["log"].endswith("-placed"))
    assert {k: Path(v).name for k, v in first["from"].items()} == {
        "speed-model": "harmony-speed-philly", "placer": "harmony-placer-philly",
    }  # fmt: skip
    for refit in (first, second):
        assert refit["speed_train_samples"] > refit["speed_held_out_samples"] > 0
        assert (refit["speed_error_refit"] < refit["speed_error_deployed"]) == (refit["speed_model_kept"] == "refit")
    assert first["speed_model_kept"] == "refit"  # twice the profiled interference: the shipped model errs more
    assert second["from"]["speed-model"] == "refit to data/feedback/clusters/a-placed"
    assert result.summary["speed_model_kept"] is True
    assert file_bytes(layout.model("harmony") / "speed-model") != shipped
    assert file_bytes(REPO_ROOT / "models" / "harmony-speed-philly") == shipped
    assert (layout.model("harmony") / "placer" / "policy.pt").is_file()
    said = harmony_line(layout).splitlines()  # what the demo prints
    assert said[0].startswith("  harmony: skipped data/feedback/clusters/c-unplaced: ")
    assert said[1].startswith("  harmony, refit to a-placed: speed model's error on the last slots ")
    assert "refit (kept); placer retrained, " in said[1]
    for name in ("a-placed", "b-placed", "c-unplaced"):
        shutil.rmtree(clusters_dir(layout) / name)
