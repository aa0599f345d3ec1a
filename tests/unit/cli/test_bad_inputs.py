"""A hand-written corpus of bad inputs, one or more per class of issue 17, at every boundary: each ends in a clean
refusal (exit status 2 and one line naming the file, row or key, or a quarantined log), never a traceback, a
hang, a blow-up or a silent acceptance, and nothing is written.

The files are under `tests/bad_inputs/<boundary>/`; `expected.json` names each one's boundary and the words its
one line must hold. Command-line cases are listed here. Commands run in-process through `dl2.cli.main.main`; a
few run as subprocesses to show the exit status and the absence of a traceback end to end.
"""

from __future__ import annotations

import json
import multiprocessing
import pickle
import shutil
import subprocess
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from dl2.cli.main import main
from dl2.core import Dl2Error, InputError

ROOT = Path(__file__).resolve().parents[3]
CORPUS = Path(__file__).resolve().parents[2] / "bad_inputs"
EXPECTED: dict[str, dict[str, Any]] = json.loads((CORPUS / "expected.json").read_text())
DL2 = ROOT / ".venv" / "bin" / "dl2"


def cases(boundary: str) -> list[str]:
    return sorted(name for name, case in EXPECTED.items() if case["boundary"] == boundary)


def refused(code: int, captured: Any, words: list[str]) -> str:
    """The command refused its input: status 2, nothing on stdout, one line on stderr holding `words`."""
    assert code == 2, captured.err
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err
    for word in words:
        assert word in lines[0], (word, lines[0])
    return str(lines[0])


def listing(folder: Path) -> set[str]:
    return {str(path.relative_to(folder)) for path in folder.rglob("*")}


def test_every_corpus_file_has_its_expectation() -> None:
    files = {str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*") if p.is_file() and p.name != "expected.json"}
    assert files == set(EXPECTED)


# -- trace CSV and authors' JSON workloads -----------------------------------------------------------------------


@pytest.mark.parametrize("name", cases("trace CSV") + cases("authors' JSON"))
def test_a_bad_workload_file_is_one_line_and_status_2(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / Path(name).name
    shutil.copy(CORPUS / name, path)
    before = listing(tmp_path)
    code = main(["simulate", "--workload", str(path), "--scheduler", "drf", "--mode", "compat", "--json"])
    line = refused(code, capsys.readouterr(), [str(path), *EXPECTED[name]["words"]])
    assert len(line) < 600
    assert listing(tmp_path) == before


def test_a_job_asking_for_1e9_gpus_or_a_cluster_of_1e9_nodes_is_refused_before_anything_is_allocated(
    tmp_path: Path,
) -> None:
    from dl2.workload.reference import load_reference_workloads
    from dl2.workload.traces import load_trace_csv, philly_cluster

    nodes = tmp_path / "vc_nodes.csv"
    nodes.write_text("vc,node num\na,1000000000\n")
    calls = [
        lambda: load_trace_csv(CORPUS / "trace/gpus-1e9.csv", philly_cluster()),
        lambda: load_reference_workloads(CORPUS / "workload/nodes-1e9.json"),
        lambda: load_reference_workloads(CORPUS / "workload/worker-gpus-1e9.json"),
        lambda: philly_cluster(nodes),
    ]
    philly_cluster()  # the shipped cluster, loaded once outside the measurement
    for call in calls:
        tracemalloc.start()
        with pytest.raises(InputError):
            call()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 20 * 2**20, peak


# -- model folders -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A valid model folder (per-job network, window 4, one hidden layer of 8) whose config.json the cases replace."""
    from dl2.env.observation import ObservationConfig
    from dl2.rl.config import NetworkConfig
    from dl2.rl.model_io import PolicyConfig, save_model
    from dl2.rl.networks import PolicyNetwork

    config = PolicyConfig(ObservationConfig(window=4), NetworkConfig(hidden=(8,), kind="per-job"))
    policy = PolicyNetwork(config.observation.shape, config.network)
    return save_model(tmp_path_factory.mktemp("models") / "base", config, policy.state_dict())


def _model_folder(model_weights: Path, tmp_path: Path, config_file: Path) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(model_weights, folder)
    shutil.copy(config_file, folder / "config.json")
    return folder


def test_the_base_model_folder_loads(model_weights: Path) -> None:
    from dl2.rl.learned import LearnedScheduler

    assert LearnedScheduler.from_dir(model_weights).config.observation.window == 4


@pytest.mark.parametrize("name", cases("model folder"))
def test_a_bad_model_folder_is_refused_by_the_cli_the_trainer_and_the_controller(
    name: str, model_weights: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dl2.kube.models import PolicyRuntime, directory_loader
    from dl2.rl.training import load_trained

    folder = _model_folder(model_weights, tmp_path, CORPUS / name)
    words = EXPECTED[name]["words"]
    code = main(["simulate", "--workload", "dl2-official-small", "--scheduler", str(folder), "--mode", "compat"])
    refused(code, capsys.readouterr(), [str(folder), *words])
    with pytest.raises(InputError) as raised:
        load_trained(folder)  # train-sl/train-rl --init, pipelines
    assert all(word in str(raised.value) for word in words), str(raised.value)
    shutil.copytree(folder, tmp_path / "registry" / "dl2-policy" / "1")  # the controller's directory loader
    runtime = PolicyRuntime(directory_loader(tmp_path / "registry"))
    assert runtime.ensure("dl2-policy", "1") is False
    assert runtime.load_error is not None and "InputError" in runtime.load_error


@pytest.mark.parametrize(
    ("make", "words"),
    [
        pytest.param(lambda folder: shutil.rmtree(folder), ["model folder not found"], id="missing-folder"),
        pytest.param(lambda folder: (folder / "policy.pt").unlink(), ["policy.pt", "missing"], id="missing-weights"),
        pytest.param(
            lambda folder: (folder / "policy.pt").write_bytes(b"\x00\x01 not a zip"),
            ["policy.pt", "cannot load weights"],
            id="corrupt-weights",
        ),
        pytest.param(lambda folder: (folder / "config.json").unlink(), ["no config.json"], id="missing-config"),
    ],
)
def test_a_missing_or_broken_model_folder_is_named_as_such(
    make: Any, words: list[str], model_weights: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "model"
    shutil.copytree(model_weights, folder)
    make(folder)
    code = main(["simulate", "--workload", "synthetic-small", "--scheduler", str(folder)])
    line = refused(code, capsys.readouterr(), words)
    assert "unknown scheduler" not in line


# -- params.yaml -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", cases("params.yaml"))
def test_a_bad_params_file_is_one_line_naming_the_key(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipelines import collect
    from pipelines.params import ParamsError, load

    path = tmp_path / "params.yaml"
    shutil.copy(CORPUS / name, path)
    words = EXPECTED[name]["words"]
    with pytest.raises(ParamsError) as raised:
        load(path)
    assert all(word in str(raised.value) for word in words), str(raised.value)
    monkeypatch.setenv("DL2_PIPELINE_ROOT", str(tmp_path))
    before = listing(tmp_path)
    code = collect.cli(["--params", str(path)])  # a stage refuses before it opens any run or writes anything
    captured = capsys.readouterr()
    assert code == 2 and len(captured.err.splitlines()) == 1 and "Traceback" not in captured.err, captured.err
    assert listing(tmp_path) == before


# -- decision logs -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", cases("decision log"))
def test_a_bad_decision_record_is_refused_by_the_reader(name: str) -> None:
    from dl2.core.log_format import read_log

    with pytest.raises(InputError) as raised:
        read_log(CORPUS / name)  # the fine-tune reader; the controller's journal uses the same parser (below)
    assert all(word in str(raised.value) for word in EXPECTED[name]["words"]), str(raised.value)


def test_the_controller_refuses_a_journal_with_a_bad_record(tmp_path: Path) -> None:
    from dl2.kube.records import DecisionLog

    record = json.loads((CORPUS / "log/held-workers-string.jsonl").read_text().splitlines()[1])
    journal = tmp_path / ".journal"
    journal.mkdir()
    entry = {"record": record, "namespace": "team-a", "name": "job", "workers": 1, "ps": 1, "reason": "policy"}
    (journal / "slot-000000001.json").write_text(json.dumps({"slot": 1, "entries": [entry]}))
    with pytest.raises(InputError, match="held_workers"):
        DecisionLog(tmp_path).journal(1)


def test_poison_logs_are_quarantined_and_the_good_ones_used_and_the_watermark_advances(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One collection over a good log and poison logs of the corpus (the unreadable ones, and two that only the
    suite's checks refuse: each suite run takes seconds): each poison log goes to quarantine with its validation
    report (bytes unchanged), the good log becomes training feedback, the watermark moves past all of them, and
    the fine-tune reader, given poison logs directly, skips and names them."""
    from pipelines import collect
    from pipelines.feedback_logs import usable_logs
    from pipelines.stage import Layout
    from tests.lifecycle_fixtures import decision_log, smoke_params

    monkeypatch.setenv("DL2_MLRUNS", str(tmp_path / "mlruns"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    layout = Layout(tmp_path)
    params = smoke_params()
    incoming = layout.root / params.data.incoming
    good = decision_log(incoming / "cluster-a")
    poison = [f"log/{name}.jsonl" for name in ("binary-bytes", "deep-nesting", "not-json", "not-object")]
    poison += ["log/held-workers-string.jsonl", "log/mode-unknown.jsonl"]
    for name in poison:
        shutil.copy(CORPUS / name, incoming / Path(name).name)

    result = collect.run(params, layout, window="w1")
    assert result.summary["collected"] == {"cluster-a": good}
    assert set(result.summary["quarantined"]) == {Path(name).name for name in poison}
    for name in poison:
        log = Path(name).stem
        quarantined = layout.root / "data" / "quarantine" / "w1" / log
        assert json.loads((quarantined / "validation.json").read_text())["success"] is False
        (segment,) = quarantined.glob("segment-*.jsonl")
        assert segment.read_bytes() == (CORPUS / name).read_bytes()  # nothing lost
    held = result.summary["quarantined"]["held-workers-string.jsonl"]
    assert "type_problem" in held and "held_workers" in held  # the suite checks types: "3" is not a count
    assert set(collect.watermark(layout)) == {"cluster-a", *(Path(name).name for name in poison)}
    assert collect.run(params, layout, window="w2").summary["changed"] is False

    feedback = layout.root / "data" / "feedback" / "by-hand"
    feedback.mkdir(parents=True)
    shutil.copytree(collect.clusters_dir(layout) / "cluster-a", feedback / "cluster-a")
    for name in ("log/held-workers-string.jsonl", "log/binary-bytes.jsonl"):
        shutil.copy(CORPUS / name, feedback / Path(name).name)
    from pipelines.feedback_logs import find_logs

    logs, skipped = usable_logs(params, layout, find_logs(feedback))
    assert logs == [feedback / "cluster-a"]
    assert set(skipped) == {
        "data/feedback/by-hand/held-workers-string.jsonl",
        "data/feedback/by-hand/binary-bytes.jsonl",
    }


# -- command-line arguments --------------------------------------------------------------------------------------

CLI_CASES: dict[str, tuple[list[str], list[str]]] = {
    "train-rl iterations -1": (["train-rl", "--iterations", "-1"], ["--iterations", "-1"]),
    "train-rl gamma 5": (["train-rl", "--gamma", "5"], ["--gamma", "5"]),
    "train-rl workers 1e9": (["train-rl", "--workers", "1000000000"], ["--workers"]),
    "train-rl episode slots 0": (["train-rl", "--episode-slots", "0"], ["--episode-slots"]),
    "train-rl unknown source": (["train-rl", "--source", "bogus"], ["--source", "bogus"]),
    "train-rl missing init": (["train-rl", "--init", "models/nowhere"], ["models/nowhere", "model folder not found"]),
    "train-sl learning rate -1": (["train-sl", "--learning-rate", "-1"], ["--learning-rate", "-1"]),
    "train-sl unknown teacher": (["train-sl", "--teacher", "bogus"], ["--teacher", "bogus"]),
    "train-sl unknown source": (["train-sl", "--source", "bogus"], ["--source", "bogus"]),
    "train-sl window forty": (["train-sl", "--window", "forty"], ["--window", "forty"]),
    "train-sl unknown network": (["train-sl", "--network", "transformer"], ["--network", "transformer"]),
    "train-sl unknown placer": (["train-sl", "--placer", "random"], ["--placer", "random"]),
    "train-sl hidden zero": (["train-sl", "--hidden", "0"], ["--hidden"]),
    "train-sl missing init": (["train-sl", "--init", "models/nowhere"], ["models/nowhere", "model folder not found"]),
    "compare seeds 1e9": (["compare", "-w", "synthetic-small", "--seeds", "1000000000"], ["--seeds"]),
    "compare seeds negative": (["compare", "-w", "synthetic-small", "--seeds", "-1"], ["--seeds"]),
    "simulate missing file": (
        ["simulate", "-w", "data/nowhere.csv", "-s", "drf"],
        ["data/nowhere.csv", "file not found"],
    ),
    "simulate unknown name": (["simulate", "-w", "bogus-workload", "-s", "drf"], ["unknown workload; known names"]),
    "simulate folder": (["simulate", "-w", "tests", "-s", "drf"], ["is a folder"]),
    "simulate missing model": (
        ["simulate", "-w", "synthetic-small", "-s", "models/nowhere"],
        ["model folder not found"],
    ),
    "simulate seed 2**70": (["simulate", "-w", "synthetic-small", "-s", "drf", "--seed", str(2**70)], ["seeds"]),
    "simulate slot 1e308": (["simulate", "-w", "synthetic-small", "-s", "drf", "--slot-s", "1e308"], ["--slot-s"]),
    "simulate stall 0": (["simulate", "-w", "synthetic-small", "-s", "drf", "--stall-slots", "0"], ["--stall-slots"]),
    "simulate bad source size": (["simulate", "-w", "synthetic-small@lots", "-s", "drf"], ["synthetic-small@lots"]),
    "evaluate missing model": (["evaluate", "--model", "models/nowhere", "-w", "synthetic-small"], ["model folder"]),
    "cluster nodes 1e9": (["cluster", "--simulate", "synthetic-small", "--nodes", "1000000000"], ["--nodes"]),
    "cluster jobs 0": (["cluster", "--simulate", "synthetic-small", "--jobs", "0"], ["--jobs"]),
    "cluster kueue fraction 5": (["cluster", "--kueue-fraction", "5"], ["--kueue-fraction"]),
    "cluster port 70000": (["cluster", "--port", "70000"], ["--port"]),
    "cluster real nodes 17": (["cluster", "--real-nodes", "17"], ["--real-nodes", "from 0 to 16"]),
    "cluster real nodes -1": (["cluster", "--real-nodes", "-1"], ["--real-nodes"]),
    "cluster real nodes simulated": (
        ["cluster", "--simulate", "synthetic-small", "--real-nodes", "1"],
        ["--real-nodes", "--simulate"],
    ),
    "serve port -1": (["serve", "--metrics-port", "-1"], ["--metrics-port"]),
    "serve slot nan": (["serve", "--slot-s", "nan"], ["--slot-s"]),
    "serve lease -1": (["serve", "--lease-s", "-1"], ["--lease-s"]),
}
"""argv (an `--out` in the temporary folder is added to the training commands) and the words of the one line."""


@pytest.mark.parametrize("case", list(CLI_CASES))
def test_a_bad_command_line_is_one_line_and_status_2(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv, words = CLI_CASES[case]
    out = tmp_path / "out"
    if argv[0] in ("train-sl", "train-rl"):
        argv = [*argv, "--out", str(out)]
    monkeypatch.chdir(ROOT)
    refused(main(argv), capsys.readouterr(), words)
    assert not out.exists()


def test_compare_out_naming_an_existing_file_is_refused_and_the_file_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    existing = tmp_path / "report.txt"
    existing.write_text("keep me\n")
    code = main(["compare", "-w", "synthetic-small", "--schedulers", "drf", "--out", str(existing)])
    refused(code, capsys.readouterr(), ["--out", "is a file"])
    assert existing.read_text() == "keep me\n"


def test_an_unexpected_error_is_one_line_and_status_1_and_debug_shows_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The safety net, not the fix: a bug is one line pointing to --debug; --debug lets the exception through."""
    from dl2.cli import workloads

    def broken(args: Any) -> int:
        raise ZeroDivisionError("division by zero\nsecond line")

    monkeypatch.setattr(workloads, "run", broken)
    assert main(["workloads"]) == 1
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert "internal error: ZeroDivisionError: division by zero second line" in line and "--debug" in line
    with pytest.raises(ZeroDivisionError):
        main(["--debug", "workloads"])


@pytest.mark.parametrize(
    "argv",
    [
        ["train-sl", "--source", "bogus", "--workers", "2"],
        ["simulate", "--workload", str(CORPUS / "workload/binary-bytes.json"), "-s", "drf"],
        ["simulate", "--workload", str(CORPUS / "workload/deep-nesting.json"), "-s", "drf"],
    ],
    ids=["train-sl-bogus-source", "binary-workload", "deep-workload"],
)
def test_end_to_end_a_bad_input_exits_2_with_one_line_and_no_traceback(argv: list[str], tmp_path: Path) -> None:
    if argv[0] == "train-sl":
        argv = [*argv, "--out", str(tmp_path / "out")]
    done = subprocess.run([str(DL2), *argv], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


# -- errors across processes -------------------------------------------------------------------------------------


def _error_classes() -> list[type[Dl2Error]]:
    import importlib
    import pkgutil

    import dl2
    import pipelines

    for package in (dl2, pipelines):
        for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            importlib.import_module(module.name)
    found: list[type[Dl2Error]] = []
    pending: list[type[Dl2Error]] = [Dl2Error]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending += cls.__subclasses__()
    return sorted(found, key=lambda cls: f"{cls.__module__}.{cls.__qualname__}")


def _instance(cls: type[Dl2Error]) -> Dl2Error:
    import inspect

    parameters = [
        p
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.name != "self" and p.default is inspect.Parameter.empty and p.kind is not p.VAR_POSITIONAL
    ]
    if not parameters:
        return cls("something went wrong")
    return cls(*(f"{p.name}-value" for p in parameters))


def test_every_dl2_error_survives_pickling() -> None:
    classes = _error_classes()
    assert {"InputError", "ConfigError", "UsageError", "ParamsError", "StageFailed", "SimulationError"} <= {
        cls.__name__ for cls in classes
    }
    for cls in classes:
        error = _instance(cls)
        error.__dict__.setdefault("extra", 1)
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is cls
        assert str(copy) == str(error) and copy.args == error.args and copy.__dict__ == error.__dict__
    rich = InputError("jobs.csv", "must be positive", row=3, field="duration")
    copy = pickle.loads(pickle.dumps(rich))
    assert (copy.path, copy.row, copy.field, copy.message) == ("jobs.csv", 3, "duration", "must be positive")


def _refuse_in_worker(_: int) -> None:
    raise InputError("bogus", "unknown workload source", field="source")


def test_an_error_raised_in_a_worker_process_reaches_the_parent() -> None:
    match = "bogus, field 'source': unknown workload source"
    with multiprocessing.get_context("fork").Pool(1) as pool, pytest.raises(InputError, match=match):
        pool.map_async(_refuse_in_worker, [0]).get(timeout=60)


def test_the_policy_error_survives_pickling() -> None:
    from dl2.kube.policy import PolicyError

    copy = pickle.loads(pickle.dumps(PolicyError("guardrails.maxReplicas", "must not be negative, got -1")))
    assert (copy.field_path, str(copy)) == (
        "guardrails.maxReplicas",
        "spec.guardrails.maxReplicas: must not be negative, got -1",
    )
