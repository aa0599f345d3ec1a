"""CSV trace loaders: validation of every row, mapping with one seeded generator, the shipped slices."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dl2.core import ClusterSpec, InputError, Resources, Workload
from dl2.paths import traces_dir
from dl2.workload.catalogue import MODEL_NAMES
from dl2.workload.describe import describe
from dl2.workload.mapping import TraceMapping
from dl2.workload.traces import (
    COMMON_COLUMNS,
    alibaba_cluster,
    load_alibaba,
    load_philly,
    load_trace_csv,
    philly_cluster,
)

HEADER = ",".join(COMMON_COLUMNS)
CLUSTER = ClusterSpec.homogeneous(4, Resources(gpu=8, cpu=64, mem_gb=512))


def write(folder: Path, text: str, name: str = "jobs.csv") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def csv_text(*rows: str, header: str = HEADER) -> str:
    return "\n".join([header, *rows]) + "\n"


def expect_error(path: Path, row: int | None, field: str | None) -> InputError:
    with pytest.raises(InputError) as caught:
        load_trace_csv(path, CLUSTER)
    error = caught.value
    assert (error.path, error.row, error.field) == (str(path), row, field)
    message = str(error)
    assert message.startswith(str(path))
    if row is not None:
        assert f"row {row}" in message
    if field is not None:
        assert f"field '{field}'" in message
    return error


# --- valid files -------------------------------------------------------------------------------------------------


def test_small_file_keeps_arrivals_sizes_and_durations(tmp_path: Path) -> None:
    path = write(tmp_path, csv_text("a,0,1,100,unknown,unknown", "b,30,4,7200,failed,unknown"), name="mini.csv")
    workload = load_trace_csv(path, CLUSTER, slot_s=300.0)
    assert workload.name == "mini"
    assert workload.slot_s == 300.0
    assert workload.source == str(path)
    assert [job.spec.job_id for job in workload.jobs] == ["a", "b"]
    assert [job.spec.arrival_s for job in workload.jobs] == [0.0, 30.0]
    assert [job.spec.requested_workers for job in workload.jobs] == [1, 4]
    assert [job.trace_duration_s for job in workload.jobs] == [100.0, 7200.0]
    assert all(job.spec.declared_epochs > 0 and job.true_epochs == job.spec.declared_epochs for job in workload.jobs)


def test_name_of_common_layout_is_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "mytrace"
    folder.mkdir()
    path = write(folder, csv_text("a,0,1,100,unknown,unknown"))
    assert load_trace_csv(path, CLUSTER).name == "mytrace"
    assert load_trace_csv(path, CLUSTER, name="given").name == "given"


def test_unsorted_rows_are_sorted_stably(tmp_path: Path) -> None:
    rows = ("late,50,1,10,unknown,unknown", "tie1,20,1,10,unknown,unknown", "tie2,20,1,10,unknown,unknown")
    workload = load_trace_csv(write(tmp_path, csv_text(*rows)), CLUSTER)
    assert [job.spec.job_id for job in workload.jobs] == ["tie1", "tie2", "late"]


def test_extra_columns_spaces_blank_lines_and_integral_floats_are_accepted(tmp_path: Path) -> None:
    text = csv_text(" a , 0 , 8.0 , 60 ,unknown,unknown,x", "", "b,1,2,60,unknown,unknown,y", header=HEADER + ",vc")
    workload = load_trace_csv(write(tmp_path, text), CLUSTER)
    assert [(job.spec.job_id, job.spec.requested_workers) for job in workload.jobs] == [("a", 8), ("b", 2)]


def test_seed_fixes_the_models_and_different_seeds_differ(tmp_path: Path) -> None:
    path = write(tmp_path, csv_text(*(f"j{k},{k},1,100,unknown,unknown" for k in range(40))))
    first = load_trace_csv(path, CLUSTER, seed=3)
    assert load_trace_csv(path, CLUSTER, seed=3).jobs == first.jobs
    other = load_trace_csv(path, CLUSTER, seed=4)
    assert [job.spec.model for job in other.jobs] != [job.spec.model for job in first.jobs]


def test_catalogue_job_type_pins_the_model_without_shifting_other_draws(tmp_path: Path) -> None:
    rows = [f"j{k},{k},2,500,unknown,unknown" for k in range(30)]
    drawn = load_trace_csv(write(tmp_path, csv_text(*rows), "drawn.csv"), CLUSTER, seed=7)
    rows[5] = "j5,5,2,500,unknown,dssm"
    pinned = load_trace_csv(write(tmp_path, csv_text(*rows), "pinned.csv"), CLUSTER, seed=7)
    assert pinned.jobs[5].spec.model == "dssm"  # a CPU-only model: not in the default mix, pinned anyway
    assert pinned.jobs[:5] == drawn.jobs[:5]
    assert pinned.jobs[6:] == drawn.jobs[6:]


@pytest.mark.parametrize("job_type", ["unknown", "LS", "BE", "Burstable", "Guaranteed", "ResNet-50"])
def test_non_catalogue_job_types_draw_as_usual(tmp_path: Path, job_type: str) -> None:
    rows = [f"j{k},{k},1,500,unknown,{job_type}" for k in range(10)]
    reference = [f"j{k},{k},1,500,unknown,unknown" for k in range(10)]
    loaded = load_trace_csv(write(tmp_path, csv_text(*rows), "a.csv"), CLUSTER)
    expected = load_trace_csv(write(tmp_path, csv_text(*reference), "b.csv"), CLUSTER)
    assert loaded.jobs == expected.jobs


def test_model_column_names_every_model(tmp_path: Path) -> None:
    text = csv_text("a,0,1,100,unknown,LS,vgg-16", "b,5,1,100,unknown,unknown,wlm", header=HEADER + ",model")
    workload = load_trace_csv(write(tmp_path, text), CLUSTER)
    assert [job.spec.model for job in workload.jobs] == ["vgg-16", "wlm"]


def test_unknown_model_in_model_column_is_an_error(tmp_path: Path) -> None:
    text = csv_text("a,0,1,100,unknown,unknown,vgg-16", "b,5,1,100,unknown,unknown,bert", header=HEADER + ",model")
    path = write(tmp_path, text)
    assert "unknown model 'bert'" in str(expect_error(path, 2, "model"))


def test_mapping_is_applied(tmp_path: Path) -> None:
    path = write(tmp_path, csv_text(*(f"j{k},{k},4,100,unknown,unknown" for k in range(20))))
    mapping = TraceMapping(models=("resnet-50",), allreduce_fraction=1.0)
    workload = load_trace_csv(path, CLUSTER, mapping=mapping)
    assert {job.spec.model for job in workload.jobs} == {"resnet-50"}
    assert {job.spec.architecture.value for job in workload.jobs} == {"allreduce"}


# --- time windows ------------------------------------------------------------------------------------------------


def test_time_window_keeps_and_shifts_jobs_with_unchanged_models(tmp_path: Path) -> None:
    path = write(tmp_path, csv_text(*(f"j{k},{100 * k},1,100,unknown,unknown" for k in range(10))))
    full = load_trace_csv(path, CLUSTER, seed=1)
    window = load_trace_csv(path, CLUSTER, seed=1, time_window_s=(300.0, 600.0))
    assert [job.spec.job_id for job in window.jobs] == ["j3", "j4", "j5"]
    assert [job.spec.arrival_s for job in window.jobs] == [0.0, 100.0, 200.0]
    assert [job.spec.model for job in window.jobs] == [job.spec.model for job in full.jobs[3:6]]


def test_empty_time_window_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, csv_text("a,0,1,100,unknown,unknown"))
    with pytest.raises(InputError, match="no job submitted in the time window"):
        load_trace_csv(path, CLUSTER, time_window_s=(10.0, 20.0))


@pytest.mark.parametrize("window", [(20.0, 10.0), (5.0, 5.0), (float("nan"), 10.0)])
def test_bad_time_window_is_a_value_error(tmp_path: Path, window: tuple[float, float]) -> None:
    path = write(tmp_path, csv_text("a,0,1,100,unknown,unknown"))
    with pytest.raises(ValueError, match="time_window_s"):
        load_trace_csv(path, CLUSTER, time_window_s=window)


# --- validation errors -------------------------------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    assert "file not found" in str(expect_error(tmp_path / "nope.csv", None, None))


def test_empty_file(tmp_path: Path) -> None:
    assert "no header" in str(expect_error(write(tmp_path, ""), None, None))


def test_header_without_rows(tmp_path: Path) -> None:
    assert "no data rows" in str(expect_error(write(tmp_path, HEADER + "\n"), None, None))


@pytest.mark.parametrize("column", COMMON_COLUMNS)
def test_missing_required_column(tmp_path: Path, column: str) -> None:
    header = ",".join(name for name in COMMON_COLUMNS if name != column)
    values = dict(zip(COMMON_COLUMNS, ["a", "0", "1", "10", "unknown", "unknown"], strict=True))
    row = ",".join(value for name, value in values.items() if name != column)
    error = expect_error(write(tmp_path, csv_text(row, header=header)), None, column)
    assert "missing required column" in str(error)


def test_duplicate_column(tmp_path: Path) -> None:
    text = csv_text("a,0,1,10,unknown,unknown,1", header=HEADER + ",num_gpus")
    expect_error(write(tmp_path, text), None, "num_gpus")


GOOD_ROW = {"job_id": "b", "submit_time": "10", "num_gpus": "2", "duration": "50", "status": "ok", "job_type": "LS"}
BAD_VALUES = [
    ("job_id", "", "must not be empty"),
    ("submit_time", "", "expected a number"),
    ("submit_time", "soon", "expected a number"),
    ("submit_time", "-1", "must not be negative"),
    ("submit_time", "nan", "finite"),
    ("submit_time", "inf", "finite"),
    ("num_gpus", "0", "positive integer"),
    ("num_gpus", "-2", "positive integer"),
    ("num_gpus", "1.5", "positive integer"),
    ("num_gpus", "two", "expected a number"),
    ("num_gpus", "inf", "finite"),
    ("duration", "0", "must be positive"),
    ("duration", "-3", "must be positive"),
    ("duration", "long", "expected a number"),
    ("duration", "nan", "finite"),
    ("duration", "inf", "finite"),
]


@pytest.mark.parametrize(("column", "value", "fragment"), BAD_VALUES)
def test_bad_cell_names_row_and_field(tmp_path: Path, column: str, value: str, fragment: str) -> None:
    bad = ",".join(value if name == column else GOOD_ROW[name] for name in COMMON_COLUMNS)
    path = write(tmp_path, csv_text("a,0,1,10,unknown,unknown", bad, "c,20,1,10,unknown,unknown"))
    assert fragment in str(expect_error(path, 2, column))


def test_duplicate_job_id_names_both_rows(tmp_path: Path) -> None:
    rows = ("a,0,1,10,unknown,unknown", "b,1,1,10,unknown,unknown", "a,2,1,10,unknown,unknown")
    error = expect_error(write(tmp_path, csv_text(*rows)), 3, "job_id")
    assert "rows 1 and 3" in str(error)


def test_short_and_long_rows(tmp_path: Path) -> None:
    expect_error(write(tmp_path, csv_text("a,0,1,10,unknown,unknown", "b,1,1"), "short.csv"), 2, "duration")
    expect_error(write(tmp_path, csv_text("a,0,1,10,unknown,unknown,extra"), "long.csv"), 1, None)


def test_blank_line_still_counts_in_row_numbers(tmp_path: Path) -> None:
    expect_error(write(tmp_path, csv_text("a,0,1,10,unknown,unknown", "", "b,1,0,10,unknown,unknown")), 3, "num_gpus")


def test_undecodable_file(tmp_path: Path) -> None:
    path = tmp_path / "binary.csv"
    path.write_bytes(b"\xff\xfe\x00garbage")
    assert "not UTF-8 text" in str(expect_error(path, None, None))


# --- property tests ----------------------------------------------------------------------------------------------

ROWS = st.lists(
    st.tuples(
        st.integers(0, 10**6) | st.floats(0, 1e6, allow_nan=False),
        st.integers(1, 32),  # at most CLUSTER's GPUs: a job asking for more is refused
        st.integers(1, 10**6) | st.floats(0.5, 1e6),
        st.sampled_from(["unknown", "failed", "succeeded"]),
        st.sampled_from(["unknown", "LS", "BE", "Burstable", "Guaranteed", *MODEL_NAMES]),
    ),
    min_size=1,
    max_size=25,
)
CORRUPTIONS: dict[str, list[str]] = {
    "job_id": [""],
    "submit_time": ["-1", "x", "nan", "inf", ""],
    "num_gpus": ["0", "-1", "2.5", "x", "nan", ""],
    "duration": ["0", "-5", "x", "nan", "-inf", ""],
}


def render(rows: list[tuple[float, int, float, str, str]]) -> str:
    return csv_text(*(f"job-{k},{s},{g},{d},{st_},{t}" for k, (s, g, d, st_, t) in enumerate(rows)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=ROWS, seed=st.integers(0, 2**32 - 1))
def test_any_valid_csv_loads(rows: list[tuple[float, int, float, str, str]], seed: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = write(Path(folder), render(rows))
        workload = load_trace_csv(path, CLUSTER, seed=seed)
        again = load_trace_csv(path, CLUSTER, seed=seed)
    assert workload.num_jobs == len(rows)
    arrivals = [job.spec.arrival_s for job in workload.jobs]
    assert arrivals == sorted(arrivals)
    assert sorted(arrivals) == sorted(float(row[0]) for row in rows)
    assert all(job.spec.declared_epochs > 0 for job in workload.jobs)
    assert workload.jobs == again.jobs


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=ROWS, data=st.data())
def test_one_corrupted_cell_is_reported_at_its_row(
    rows: list[tuple[float, int, float, str, str]], data: st.DataObject
) -> None:
    index = data.draw(st.integers(0, len(rows) - 1), label="row index")
    column = data.draw(st.sampled_from(sorted(CORRUPTIONS)), label="column")
    value = data.draw(st.sampled_from(CORRUPTIONS[column]), label="bad value")
    lines = render(rows).splitlines()
    cells = lines[index + 1].split(",")
    cells[COMMON_COLUMNS.index(column)] = value
    lines[index + 1] = ",".join(cells)
    with tempfile.TemporaryDirectory() as folder:
        path = write(Path(folder), "\n".join(lines) + "\n")
        with pytest.raises(InputError) as caught:
            load_trace_csv(path, CLUSTER)
    assert (caught.value.path, caught.value.row, caught.value.field) == (str(path), index + 1, column)


# --- cluster files -----------------------------------------------------------------------------------------------


def test_philly_cluster() -> None:
    cluster = philly_cluster()
    assert cluster.num_nodes == 352
    assert {node.capacity for node in cluster.nodes} == {Resources(gpu=8, cpu=64, mem_gb=512)}
    assert {node.kind for node in cluster.nodes} == {"philly-8gpu"}
    assert cluster.total_capacity.gpu == 2816


def test_alibaba_cluster() -> None:
    cluster = alibaba_cluster()
    assert cluster.num_nodes == 1213
    assert cluster.total_capacity.gpu == 6212
    first = cluster.nodes[0]
    assert (first.capacity, first.kind) == (Resources(gpu=2, cpu=64, mem_gb=256), "P100")
    kinds = {node.kind for node in cluster.nodes}
    assert kinds == {"G2", "T4", "P100", "V100M16", "G3", "V100M32", "A10"}


@pytest.mark.parametrize(
    ("text", "row", "field"),
    [
        ("vc,node num\na,4\nb,0\n", 2, "node num"),
        ("vc,node num\na,4\nb,2.5\n", 2, "node num"),
        ("vc,node num\na,4\na,2\n", 2, "vc"),
        ("vc,nodes\na,4\n", None, "node num"),
    ],
)
def test_bad_philly_node_file(tmp_path: Path, text: str, row: int | None, field: str) -> None:
    with pytest.raises(InputError) as caught:
        philly_cluster(write(tmp_path, text, "vc_nodes.csv"))
    assert (caught.value.row, caught.value.field) == (row, field)


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ("n1,8000,32768,0,T4", "gpu"),
        ("n1,8000,32768,x,T4", "gpu"),
        ("n1,-8000,32768,1,T4", "cpu_milli"),
        ("n1,8000,nan,1,T4", "memory_mib"),
        ("n1,8000,32768,1,", "model"),
        ("n0,8000,32768,1,T4", "sn"),
    ],
)
def test_bad_alibaba_node_file(tmp_path: Path, row: str, field: str) -> None:
    path = write(tmp_path, f"sn,cpu_milli,memory_mib,gpu,model\nn0,8000,32768,1,T4\n{row}\n", "nodes_gpu.csv")
    with pytest.raises(InputError) as caught:
        alibaba_cluster(path)
    assert (caught.value.path, caught.value.row, caught.value.field) == (str(path), 2, field)


# --- the shipped slices ------------------------------------------------------------------------------------------


def test_philly_slice_loads_and_matches_its_stats() -> None:
    # how long a load takes is benchmarks/bench_realistic_speed.py's to measure ("load"), not a test's
    workload = load_philly()
    assert (workload.name, workload.num_jobs, workload.cluster.num_nodes) == ("philly", 6391, 352)
    assert_matches_stats(workload, traces_dir() / "philly" / "stats.json")


def test_alibaba_slice_loads_and_matches_its_stats() -> None:
    workload = load_alibaba()
    assert (workload.name, workload.num_jobs, workload.cluster.num_nodes) == ("alibaba-gpu2023", 2852, 1213)
    assert_matches_stats(workload, traces_dir() / "alibaba_gpu2023" / "stats.json")


def test_held_out_day_of_philly() -> None:
    day = load_philly(time_window_s=(4 * 86400.0, 5 * 86400.0))
    assert day.num_jobs == 2027  # stats.json: the slice starts on a Monday; Friday 2017-11-10 had 2,027 arrivals
    assert day.jobs[0].spec.arrival_s >= 0.0
    assert day.jobs[-1].spec.arrival_s < 86400.0


def assert_matches_stats(workload: Workload, stats_path: Path) -> None:
    """describe() reproduces stats.json (which rounds to 1-2 decimals)."""
    stats = json.loads(stats_path.read_text())
    ours = describe(workload)
    assert ours["n_jobs"] == stats["n_jobs"]
    assert ours["span_hours"] == stats["span_hours"]
    assert {str(k): v for k, v in ours["num_gpus_count"].items()} == stats["num_gpus_count"]
    for key in ("mean", "median", "p90", "p99", "min", "max"):
        assert ours["duration_s"][key] == pytest.approx(stats["duration_s"][key], abs=0.06)
    for key in ("mean", "median", "p95", "max", "frac_hours_zero"):
        assert ours["arrivals_per_hour"][key] == pytest.approx(stats["arrivals_per_hour"][key], abs=0.06)
    for key in ("mean", "median", "cv"):
        assert ours["interarrival_s"][key] == pytest.approx(stats["interarrival_s"][key], abs=0.06)
    assert [round(v, 2) for v in ours["diurnal_mean_arrivals_by_hour"]] == stats["diurnal_mean_arrivals_by_hour"]
    assert ours["gpu_hours_total"] == pytest.approx(stats["gpu_hours_total"], abs=0.06)
