"""The `dl2` command line: its stable JSON contract, CSV workloads, one-line errors, help, compare and listings.

Most tests run the installed console script (`.venv/bin/dl2`) in a subprocess from the repository root, as a user
or a script would; a few call `dl2.cli.main.main` in-process where that is simpler.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from dl2.cli import simulate as simulate_command
from dl2.cli.main import main
from dl2.workload.registry import WORKLOAD_NAMES
from dl2.workload.traces import COMMON_COLUMNS

REPO_ROOT = Path(__file__).resolve().parents[3]
DL2 = str(Path(sys.executable).parent / "dl2")
if not Path(DL2).is_file():  # running outside the venv: fall back to the repository's own
    DL2 = str(REPO_ROOT / ".venv" / "bin" / "dl2")
REFERENCE_FILE = REPO_ROOT / "data" / "reference" / "dl2-official" / "traces-small-uniform.json"
WALL_TIME_FIELDS = {"wall_s"}
COMPAT_SIMULATE = ["simulate", "--workload", "dl2-official-small", "--scheduler", "drf", "--mode", "compat"]


def dl2(*args: str, env: dict[str, str | None] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the console script; `env` adds variables to the environment (None removes one)."""
    environment = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            environment.pop(key, None)
        else:
            environment[key] = value
    return subprocess.run(
        [DL2, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
        check=False,
    )


def without_wall_time(data: Any) -> Any:
    if isinstance(data, dict):
        return {key: without_wall_time(value) for key, value in data.items() if key not in WALL_TIME_FIELDS}
    if isinstance(data, list):
        return [without_wall_time(value) for value in data]
    return data


def write_csv(path: Path, *rows: str, header: str = ",".join(COMMON_COLUMNS)) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


@cache
def compat_simulate_json() -> tuple[str, str]:
    """Two identical `--json` runs of the compat contract command (stdout of each)."""
    outputs = []
    for _ in range(2):
        completed = dl2(*COMPAT_SIMULATE, "--seed", "0", "--json")
        assert completed.returncode == 0, completed.stderr
        outputs.append(completed.stdout)
    return outputs[0], outputs[1]


# --- the stable contract -------------------------------------------------------------------------------------------


def test_compat_simulate_json_is_one_object_with_the_headline_fields() -> None:
    stdout, _ = compat_simulate_json()
    report = json.loads(stdout)  # the whole of stdout is exactly one JSON document
    assert isinstance(report, dict)
    assert stdout.endswith("\n") and stdout.count("\n") == 1
    for key in ("avg_jct_s", "p99_jct_s", "makespan_s", "num_jobs", "avg_jct_slots"):
        assert key in report, key
        assert isinstance(report[key], int | float) and report[key] > 0
    assert report["num_jobs"] == 600
    assert report["mode"] == "compat"
    assert report["scheduler"] == "drf"
    per_workload = report["per_workload"]
    assert len(per_workload) == 10
    assert [entry["workload"] for entry in per_workload] == [f"dl2-official-small/{k}" for k in range(10)]
    assert all(entry["num_jobs"] == 60 for entry in per_workload)
    mean_slots = sum(entry["avg_jct_slots"] for entry in per_workload) / len(per_workload)
    assert report["avg_jct_slots"] == pytest.approx(mean_slots, rel=1e-12)
    assert report["avg_jct_slots"] == pytest.approx(report["avg_jct_s"] / 1200.0, rel=1e-12)
    for entry in per_workload:
        assert entry["avg_jct_slots"] == pytest.approx(entry["avg_jct_s"] / entry["slot_s"], rel=1e-12)
        assert entry["p99_jct_s"] >= entry["median_jct_s"]


def test_compat_simulate_json_is_deterministic_apart_from_wall_time() -> None:
    first, second = compat_simulate_json()
    assert without_wall_time(json.loads(first)) == without_wall_time(json.loads(second))


def test_realistic_single_workload_json() -> None:
    completed = dl2(
        "simulate", "--workload", "synthetic-small", "--scheduler", "optimus", "--mode", "realistic", "--json"
    )
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    assert "per_workload" not in report
    assert (report["workload"], report["scheduler"], report["mode"], report["num_jobs"]) == (
        "synthetic-small",
        "optimus",
        "realistic",
        200,
    )
    for key in ("avg_jct_s", "p99_jct_s", "makespan_s"):
        assert report[key] > 0
    assert report["p99_jct_s"] >= report["median_jct_s"]


def test_table_output_goes_to_stdout_and_nothing_to_stderr() -> None:
    completed = dl2("simulate", "--workload", "synthetic-small", "--scheduler", "drf")
    assert completed.returncode == 0, completed.stderr
    assert "avg_jct_s" in completed.stdout
    assert completed.stderr == ""


# --- CSV workloads ------------------------------------------------------------------------------------------------


def test_csv_workload_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_csv(
        tmp_path / "mine.csv",
        "a,0,1,3600,unknown,unknown",
        "b,60,2,1800,failed,unknown",
        "c,90,4,600,unknown,resnet-50",
    )
    assert main(["simulate", "--workload", str(path), "--scheduler", "fifo", "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert (report["workload"], report["num_jobs"]) == ("mine", 3)
    assert report["avg_jct_s"] > 0
    # and through the real script, with a relative path from the repository root
    relative = os.path.relpath(path, REPO_ROOT)
    completed = dl2("simulate", "--workload", relative, "--scheduler", "drf", "--json")
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["num_jobs"] == 3


# --- bad input: exit status 2, one line on stderr, no traceback ----------------------------------------------------

Case = Callable[[Path], tuple[list[str], list[str]]]
"""tmp_path -> (arguments, words the error line must contain)."""


def _csv_case(rows: tuple[str, ...], header: str, words: list[str]) -> Case:
    def build(tmp_path: Path) -> tuple[list[str], list[str]]:
        path = write_csv(tmp_path / "jobs-in.csv", *rows, header=header)
        return ["simulate", "--workload", str(path), "--scheduler", "drf"], [str(path), *words]

    return build


def _empty_csv(tmp_path: Path) -> tuple[list[str], list[str]]:
    path = tmp_path / "empty.csv"
    path.write_text("")
    return ["simulate", "--workload", str(path), "--scheduler", "drf"], [str(path), "empty"]


def _missing_json(tmp_path: Path) -> tuple[list[str], list[str]]:
    path = tmp_path / "nowhere.json"
    return ["simulate", "--workload", str(path), "--scheduler", "drf", "--mode", "compat"], [str(path)]


def _malformed_json(tmp_path: Path) -> tuple[list[str], list[str]]:
    path = tmp_path / "broken.json"
    path.write_text('{"num_nodes": 2, "traces": [')
    return ["simulate", "--workload", str(path), "--scheduler", "drf", "--mode", "compat"], [str(path), "JSON"]


HEADER = ",".join(COMMON_COLUMNS)
BAD_INPUT: dict[str, Case] = {
    "unknown workload": lambda _: (["simulate", "-w", "no-such-workload", "-s", "drf"], ["no-such-workload"]),
    "unknown scheduler": lambda _: (["simulate", "-w", "synthetic-small", "-s", "nope"], ["nope", "drf"]),
    "negative duration": _csv_case(
        ("a,0,1,100,unknown,unknown", "b,60,2,-5,unknown,unknown"), HEADER, ["row 2", "duration"]
    ),
    "empty csv": _empty_csv,
    "missing column": _csv_case(
        ("a,0,1,100,unknown",), "job_id,submit_time,num_gpus,duration,status", ["job_type", "missing"]
    ),
    "compat tiresias": lambda _: (
        ["simulate", "-w", "dl2-official-small", "-s", "tiresias", "--mode", "compat"],
        ["tiresias", "compat"],
    ),
    "speed noise 2": lambda _: (
        ["simulate", "-w", "synthetic-small", "-s", "drf", "--speed-noise", "2"],
        ["--speed-noise"],
    ),
    "nonexistent json": _missing_json,
    "malformed json": _malformed_json,
    "unknown flag": lambda _: (["simulate", "-w", "synthetic-small", "-s", "drf", "--bogus"], ["--bogus"]),
    "unknown placer": lambda _: (["simulate", "-w", "synthetic-small", "-s", "drf", "--placer", "x"], ["--placer"]),
    "bad seeds": lambda _: (["compare", "-w", "synthetic-small", "--seeds", "1,x"], ["--seeds"]),
    "non-positive slot": lambda _: (["simulate", "-w", "synthetic-small", "-s", "drf", "--slot-s", "0"], ["--slot-s"]),
    "realistic flag in compat": lambda _: (
        ["simulate", "-w", "dl2-official-small", "-s", "drf", "--mode", "compat", "--speed-noise", "0.1"],
        ["--speed-noise", "realistic"],
    ),
}


@pytest.mark.parametrize("case", list(BAD_INPUT), ids=list(BAD_INPUT))
def test_bad_input_is_one_line_and_status_2(case: str, tmp_path: Path) -> None:
    args, words = BAD_INPUT[case](tmp_path)
    completed = dl2(*args)
    assert completed.returncode == 2, completed.stderr
    assert completed.stdout == ""
    assert "Traceback" not in completed.stderr
    lines = completed.stderr.splitlines()
    assert len(lines) == 1, completed.stderr
    assert lines[0].startswith("dl2"), lines[0]
    assert "error" in lines[0]
    for word in words:
        assert word in lines[0], (word, lines[0])


def _reference_file(tmp_path: Path, **changes: object) -> Path:
    """A copy of the authors' small file, first workload only, with some top-level settings changed."""
    document = json.loads(REFERENCE_FILE.read_text())
    document["traces"] = document["traces"][:1]
    document.update(changes)
    path = tmp_path / "ref.json"
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param(
            {"max_workers_per_job": 0},
            id="max-workers-0",
        ),
        pytest.param(
            {"max_workers_per_job": "many"},
            id="max-workers-text",
        ),
        pytest.param(
            {"num_nodes": 0},
            id="no-nodes",
        ),
        pytest.param(
            {"slot_seconds": 0},
            id="slot-0",
        ),
    ],
)
def test_bad_reference_settings_are_one_line_errors(
    changes: dict[str, object], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _reference_file(tmp_path, **changes)
    code = main(["simulate", "--workload", str(path), "--scheduler", "drf", "--mode", "compat", "--json"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    assert len(captured.err.splitlines()) == 1
    assert str(path) in captured.err


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(
            ["simulate", "-s", "drf", "--slot-s", "nan"],
            id="slot-nan",
        ),
        pytest.param(
            ["simulate", "-s", "drf", "--seed", "-1"],
            id="negative-seed",
        ),
        pytest.param(
            ["compare", "--seeds", ",", "--schedulers", "drf"],
            id="no-seeds",
        ),
        pytest.param(
            ["compare", "--schedulers", ","],
            marks=[
                pytest.mark.filterwarnings("ignore:No artists with labels"),
            ],
            id="no-schedulers",
        ),
    ],
)
def test_nonsense_options_are_one_line_errors(
    args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = write_csv(tmp_path / "w.csv", "a,0,1,100,unknown,unknown", "b,60,2,50,unknown,unknown")
    code = main(
        [*args, "--workload", str(workload), *(["--out", str(tmp_path / "out")] if args[0] == "compare" else [])]
    )
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    assert len(captured.err.splitlines()) == 1


def test_a_job_no_scheduler_can_run_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # 5,000 GPUs requested on the 2,816-GPU Philly cluster: Tiresias gangs requested sizes, so it never runs it
    path = write_csv(tmp_path / "huge.csv", "a,0,5000,100,unknown,unknown")
    original = simulate_command.sim_config
    monkeypatch.setattr(simulate_command, "sim_config", lambda a, s: replace(original(a, s), max_slots=50))
    code = main(["simulate", "--workload", str(path), "--scheduler", "tiresias", "--json"])
    captured = capsys.readouterr()
    assert code == 2
    assert len(captured.err.splitlines()) == 1


# --- help ------------------------------------------------------------------------------------------------------------


def test_top_level_help() -> None:
    completed = dl2("--help")
    assert completed.returncode == 0
    for word in ("simulate", "compare", "workloads", "--version"):
        assert word in completed.stdout


@pytest.mark.parametrize(
    ("command", "options"),
    [
        ("simulate", ["--workload", "--scheduler", "--mode", "--placer", "--seed", "--json", "--speed-noise"]),
        ("compare", ["--workload", "--schedulers", "--mode", "--seeds", "--out", "--json"]),
        ("workloads", ["name", "--seed", "--json"]),
    ],
)
def test_subcommand_help(command: str, options: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: dl2 {command}")
    for option in options:
        assert option in out, option


def test_version() -> None:
    completed = dl2("--version")
    assert completed.returncode == 0
    assert completed.stdout.startswith("dl2 ")


def test_no_command_is_a_usage_error() -> None:
    completed = dl2()
    assert completed.returncode == 2
    assert len(completed.stderr.splitlines()) == 1


# --- compare ---------------------------------------------------------------------------------------------------------

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _check_compare_summary(summary: dict[str, Any]) -> None:
    assert (summary["workload"], summary["mode"], summary["seeds"]) == ("dl2-official-small", "compat", [0])
    rows = {row["scheduler"]: row for row in summary["schedulers"]}
    assert list(rows) == ["drf", "optimus"]
    for row in rows.values():
        assert row["runs"] == 10
        for key in ("avg_jct_s", "avg_jct_ci95_s", "avg_jct_slots", "avg_jct_ci95_slots", "p99_jct_s", "makespan_s"):
            assert key in row, key
        assert row["avg_jct_s"] > 0 and row["avg_jct_ci95_s"] > 0
        assert row["avg_jct_slots"] == pytest.approx(row["avg_jct_s"] / 1200.0)
    assert rows["drf"]["jct_vs_first"] == 1.0
    assert rows["optimus"]["jct_vs_first"] == pytest.approx(rows["optimus"]["avg_jct_s"] / rows["drf"]["avg_jct_s"])
    assert len(summary["runs"]) == 20
    assert {(run["scheduler"], run["workload"]) for run in summary["runs"]} == {
        (name, f"dl2-official-small/{k}") for name in ("drf", "optimus") for k in range(10)
    }


def test_compare_writes_json_png_and_a_table(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    completed = dl2(
        "compare",
        "--workload",
        "dl2-official-small",
        "--mode",
        "compat",
        "--schedulers",
        "drf,optimus",
        "--out",
        str(out),
        env={"COLUMNS": "200"},
    )
    assert completed.returncode == 0, completed.stderr
    summary = json.loads((out / "compare.json").read_text())
    _check_compare_summary(summary)
    png = (out / "compare.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 1000
    assert "drf" in completed.stdout and "optimus" in completed.stdout
    assert "avg JCT" in completed.stdout
    assert "compare.json" in completed.stdout
    assert "Traceback" not in completed.stderr
    assert not list(out.glob(".*")), "temporary files left behind"


def test_compare_json_prints_only_json(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    completed = dl2(
        "compare",
        "--workload",
        "dl2-official-small",
        "--mode",
        "compat",
        "--schedulers",
        "drf,optimus",
        "--out",
        str(out),
        "--json",
    )
    assert completed.returncode == 0, completed.stderr
    summary = json.loads(completed.stdout)
    _check_compare_summary(summary)
    assert without_wall_time(summary) == without_wall_time(json.loads((out / "compare.json").read_text()))
    assert completed.stderr == ""  # no progress bar either


# --- workloads -------------------------------------------------------------------------------------------------------


def test_workloads_json_lists_every_name() -> None:
    completed = dl2("workloads", "--json")
    assert completed.returncode == 0, completed.stderr
    rows = json.loads(completed.stdout)
    assert [row["name"] for row in rows] == list(WORKLOAD_NAMES)


def test_workloads_table_lists_every_name_on_a_wide_terminal() -> None:
    completed = dl2("workloads", env={"COLUMNS": "200"})
    assert completed.returncode == 0, completed.stderr
    for name in WORKLOAD_NAMES:
        assert name in completed.stdout, name


def test_workloads_table_lists_every_name_when_piped() -> None:
    completed = dl2("workloads", env={"COLUMNS": None, "LINES": None})
    assert completed.returncode == 0, completed.stderr
    for name in WORKLOAD_NAMES:
        assert name in completed.stdout, name


def test_workloads_describes_philly() -> None:
    completed = dl2("workloads", "philly", "--json")
    assert completed.returncode == 0, completed.stderr
    description = json.loads(completed.stdout)
    assert description["name"] == "philly"
    assert description["n_jobs"] == 6391
    assert sum(description["num_gpus_count"].values()) == 6391
