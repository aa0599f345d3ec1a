"""DVC alone decides what is stale: every stage's deps cover the code it can run, and in a sandbox copy of the
repository an edited module reruns the stages that import it, whose outputs then record the new code version
(nothing stale is restored from anywhere)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipelines import code, sandbox
from pipelines.tracking import ROOT

SHIPPED_DATA = ("data/reference", "data/traces")
"""What the library reads at run time (`dl2.paths`): a dep of every stage whose code reaches `dl2/paths.py`."""


def stages() -> dict[str, dict[str, object]]:
    return dict(yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"])


def stage_module(command: str) -> str:
    """The module a stage's command runs (`python -m pipelines.x` or the `dl2` command)."""
    words = command.split()
    if words[:2] == ["python", "-m"]:
        return words[2]
    assert words[0] == "dl2", command
    return "dl2.cli.main"


def covered(path: str, deps: list[str]) -> bool:
    return any(path == dep or path.startswith(dep.rstrip("/") + "/") for dep in deps)


@pytest.mark.parametrize("name", list(stages()))
def test_every_stage_lists_the_code_it_imports_and_the_data_the_library_reads(name: str) -> None:
    stage = stages()[name]
    deps = [str(dep) for dep in stage["deps"]]  # type: ignore[attr-defined]
    files = [str(path.relative_to(ROOT)) for path in code.closure(stage_module(str(stage["cmd"])))]
    missing = [path for path in files if not covered(path, deps)]
    assert not missing, f"stage {name} can import {missing} but does not list them in its deps"
    if "dl2/paths.py" in files:
        assert all(covered(data, deps) for data in SHIPPED_DATA), f"stage {name} lacks {SHIPPED_DATA}"


def test_the_closure_follows_lazy_and_relative_imports(tmp_path: Path) -> None:
    package = tmp_path / "pipelines"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from pipelines import b\n")
    (package / "b.py").write_text("from . import c\n")
    (package / "c.py").write_text("import json\nimport dl2.missing\n")
    (package / "d.py").write_text("")  # imported by nobody
    found = [p.name for p in code.closure("pipelines.a", tmp_path)]
    assert found == ["__init__.py", "a.py", "b.py", "c.py"]
    before = code.code_version("pipelines.a", tmp_path)
    (package / "c.py").write_text("import json  # edited\n")
    code.closure.cache_clear()
    assert code.code_version("pipelines.a", tmp_path) != before


@pytest.mark.slow
def test_an_edited_module_reruns_the_stages_that_import_it(tmp_path: Path) -> None:
    """`pipelines/rl.py` is imported by `warmup` (not by `workloads`): after an edit, `dvc repro` reruns the
    warm-up, whose model then records the new code version, and leaves `workloads` alone."""
    root = sandbox.make(tmp_path / "repo", overrides={"data": {"traces": ["philly"]}})

    def dvc(*arguments: str) -> str:
        done = sandbox.run(root, [sys.executable, "-m", "dvc", *arguments], timeout_s=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done.stdout

    def model_version() -> str:
        return str(json.loads((root / "models/staging/warmup/config.json").read_text())["metadata"]["code_version"])

    def runs() -> int:
        script = "from pipelines import tracking; import mlflow; tracking.configure(); "
        script += "print(len(mlflow.search_runs(experiment_names=['dl2'], output_format='list')))"
        return int(sandbox.run(root, [sys.executable, "-c", script]).stdout.strip().splitlines()[-1])

    dvc("repro", "warmup")
    first, workloads_first = model_version(), (root / "reports/workloads.json").read_bytes()
    assert "Running stage" not in dvc("repro", "warmup")  # nothing changed: DVC runs nothing
    before = runs()

    with (root / "pipelines" / "rl.py").open("a") as stream:
        stream.write("\n# an edit a reviewer would make\n")
    status = dvc("status", "warmup")
    assert "pipelines/rl.py" in status and "modified" in status
    output = dvc("repro", "warmup")
    assert "Running stage 'warmup'" in output and "Running stage 'workloads'" not in output
    assert model_version() != first
    expected = sandbox.run(root, [sys.executable, "-c", "from pipelines.code import code_version as v; "
                                  "print(v('pipelines.warmup'))"]).stdout.strip()  # fmt: skip
    assert model_version() == expected
    assert (root / "reports/workloads.json").read_bytes() == workloads_first
    assert runs() == before + 1  # trained again (one new MLflow run), nothing put back from a store
    lock = yaml.safe_load((root / "dvc.lock").read_text())
    assert any(dep["path"] == "pipelines/rl.py" for dep in lock["stages"]["warmup"]["deps"])
    tags = sandbox.run(root, [sys.executable, "-c", "from pipelines import tracking; print(tracking.data_version())"])
    assert tags.stdout.strip().splitlines()[-1] != "none"


def test_the_data_version_hashes_the_ingested_data_only(tmp_path: Path) -> None:
    from pipelines.tracking import data_version

    assert data_version(tmp_path) == "none"
    (tmp_path / "data/ingested/philly").mkdir(parents=True)
    (tmp_path / "data/ingested/philly/MANIFEST.json").write_text('{"files": {"jobs.csv": "abc"}}')
    first = data_version(tmp_path)
    (tmp_path / "dvc.lock").write_text("anything")  # code or model changes do not move it
    (tmp_path / "data/ingested/philly/jobs.csv").write_text("not hashed: the manifest lists its sha256")
    assert data_version(tmp_path) == first
    (tmp_path / "data/ingested/philly/MANIFEST.json").write_text('{"files": {"jobs.csv": "def"}}')
    assert data_version(tmp_path) != first


def test_the_sandbox_is_a_repository_with_its_own_params(tmp_path: Path) -> None:
    root = sandbox.make(tmp_path / "repo", overrides={"data": {"traces": ["philly"]}})
    params = yaml.safe_load((root / "params.yaml").read_text())
    assert params["profile"] == "smoke" and params["data"]["traces"] == ["philly"]
    assert params["data"]["feedback"] == "data/feedback"  # the rest of the section kept
    assert not (root / "dvc.lock").exists() and not (root / "reports").exists()
    assert (root / "dvc.yaml").is_file() and (root / "dl2" / "__init__.py").is_file()
    log = subprocess.run(["git", "log", "--oneline"], cwd=root, capture_output=True, text=True, check=True).stdout
    assert len(log.splitlines()) == 1
    done = sandbox.run(root, [sys.executable, "-c", "import pipelines, dl2; print(pipelines.__file__, dl2.__file__)"])
    assert all(path.startswith(str(root)) for path in done.stdout.split()), done.stdout  # its own code
