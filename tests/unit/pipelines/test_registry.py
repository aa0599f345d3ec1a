"""Workloads by name or path."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dl2.core import InputError
from dl2.paths import reference_dir, traces_dir
from dl2.workload.describe import describe
from dl2.workload.registry import WORKLOAD_NAMES, describe_available, load_workloads
from dl2.workload.synthetic import PRESETS

JOB_ROWS = (
    "job_id,submit_time,num_gpus,duration,status,job_type\na,0,1,100,unknown,unknown\nb,60,2,50,unknown,unknown\n"
)


def test_names() -> None:
    expected = {"dl2-official-default", "dl2-official-small", "philly", "alibaba-gpu2023", *PRESETS}
    assert set(WORKLOAD_NAMES) == expected
    assert len(WORKLOAD_NAMES) == len(expected)


@pytest.mark.parametrize(
    ("name", "count", "jobs", "nodes"),
    [("dl2-official-default", 10, 200, 500), ("dl2-official-small", 10, 60, 48)],
)
def test_reference_workloads(name: str, count: int, jobs: int, nodes: int) -> None:
    workloads = load_workloads(name)
    assert len(workloads) == count
    assert {w.num_jobs for w in workloads} == {jobs}
    assert {w.cluster.num_nodes for w in workloads} == {nodes}
    assert workloads[0].name == f"{name}/0"
    assert describe(workloads[0])["duration_s"] is None  # the authors' jobs have no traced run time


@pytest.mark.parametrize(("name", "jobs", "nodes"), [("philly", 6391, 352), ("alibaba-gpu2023", 2852, 1213)])
def test_trace_names(name: str, jobs: int, nodes: int) -> None:
    (workload,) = load_workloads(name, seed=1)
    assert (workload.name, workload.num_jobs, workload.cluster.num_nodes) == (name, jobs, nodes)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_names(name: str) -> None:
    (workload,) = load_workloads(name, seed=2)
    assert (workload.name, workload.num_jobs) == (name, PRESETS[name].num_jobs)
    assert load_workloads(name, seed=2) == (workload,)


def test_seed_reaches_the_loader() -> None:
    (a,) = load_workloads("synthetic-small", seed=0)
    (b,) = load_workloads("synthetic-small", seed=1)
    assert a.jobs != b.jobs


def test_csv_path_uses_the_philly_cluster(tmp_path: Path) -> None:
    path = tmp_path / "mine.csv"
    path.write_text(JOB_ROWS)
    (workload,) = load_workloads(str(path))
    assert (workload.name, workload.num_jobs, workload.cluster.num_nodes) == ("mine", 2, 352)


def test_csv_next_to_a_node_file_uses_that_cluster(tmp_path: Path) -> None:
    (tmp_path / "jobs.csv").write_text(JOB_ROWS)
    (tmp_path / "nodes_gpu.csv").write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,32000,131072,4,T4\n")
    (workload,) = load_workloads(str(tmp_path / "jobs.csv"))
    assert workload.cluster.num_nodes == 1
    assert workload.cluster.nodes[0].kind == "T4"


def test_shipped_alibaba_csv_by_path_gets_its_nodes() -> None:
    (workload,) = load_workloads(str(traces_dir() / "alibaba_gpu2023" / "jobs.csv"))
    assert workload.cluster.num_nodes == 1213


def test_json_path_uses_the_reference_loader(tmp_path: Path) -> None:
    path = tmp_path / "copy.json"
    shutil.copy(reference_dir() / "traces-small-uniform.json", path)
    workloads = load_workloads(str(path))
    assert len(workloads) == 10
    assert workloads[0].name == "copy/0"


def test_unknown_name() -> None:
    with pytest.raises(InputError) as caught:
        load_workloads("philly-2019")
    assert caught.value.path == "philly-2019"
    assert "unknown workload; known names:" in str(caught.value)
    assert all(name in str(caught.value) for name in WORKLOAD_NAMES)


def test_unsupported_file_type(tmp_path: Path) -> None:
    path = tmp_path / "jobs.parquet"
    path.write_bytes(b"PAR1")
    with pytest.raises(InputError, match="unsupported file type"):
        load_workloads(str(path))


def test_bad_csv_by_path_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(JOB_ROWS.replace("b,60,2,50", "b,60,0,50"))
    with pytest.raises(InputError) as caught:
        load_workloads(str(path))
    assert (caught.value.row, caught.value.field) == (2, "num_gpus")


def test_describe_available() -> None:
    rows = {row["name"]: row for row in describe_available()}
    assert list(rows) == list(WORKLOAD_NAMES)
    assert all(set(row) == {"name", "kind", "workloads", "jobs", "nodes", "gpus", "source"} for row in rows.values())
    assert rows["philly"] | {"source": ""} == {
        "name": "philly",
        "kind": "trace",
        "workloads": 1,
        "jobs": 6391,
        "nodes": 352,
        "gpus": 2816.0,
        "source": "",
    }
    small = rows["dl2-official-small"]
    assert (small["workloads"], small["jobs"], small["nodes"], small["gpus"]) == (10, 600, 48, 96.0)  # 2 GPUs a node
    assert (rows["synthetic-alibaba"]["kind"], rows["synthetic-alibaba"]["gpus"]) == ("synthetic", 6065.0)
