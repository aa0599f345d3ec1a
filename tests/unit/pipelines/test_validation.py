"""Great Expectations suites of the pipeline (pipelines/validate.py), on hand-made batches.

A corrupted trace must stop the pipeline with a report that names the failed expectations and the offending rows,
and nothing downstream may be written; a decision log whose time goes backwards for a job must fail its suite.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipelines import params as params_module
from pipelines import validate, workloads
from pipelines.stage import Layout, StageFailed

HEADER = "job_id,submit_time,num_gpus,duration,job_type,status"
GOOD_ROWS = [
    "a1,0,1,100,unknown,succeeded",
    "a2,10,2,3600,unknown,failed",
    "a3,10,8,7200,LS,killed",
    "a4,50,4,60,BE,succeeded",
]


@pytest.fixture(scope="module")
def params() -> params_module.Params:
    return params_module.load(smoke=True)


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Layout]:
    """One root for the module: a Great Expectations project costs seconds to create, batches have own names.
    Validating traces is an MLflow run: its store is in the root too."""
    root = tmp_path_factory.mktemp("validation")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DL2_MLRUNS", str(root / "mlruns"))
        patch.delenv("MLFLOW_TRACKING_URI", raising=False)
        yield Layout(root)


def ingested(layout: Layout, name: str, rows: list[str]) -> Path:
    """A batch as ingest would leave it (written directly: dl2's loaders would refuse the corrupted ones)."""
    folder = layout.ingested(name)
    folder.mkdir(parents=True)
    path = folder / "jobs.csv"
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    return path


def test_a_clean_trace_passes(layout: Layout, params: params_module.Params) -> None:
    ingested(layout, "clean", GOOD_ROWS)
    result = validate.run(params, layout, traces=["clean"])
    report = json.loads(layout.validation_report("clean").read_text())
    assert report["success"] is True
    assert report["rows"] == 4
    assert report["failed"] == 0
    assert result.outputs == ("reports/validation/clean.json",) and result.run_id is not None


def test_a_corrupted_trace_fails_naming_expectations_and_rows(layout: Layout, params: params_module.Params) -> None:
    rows = [
        "a1,0,1,100,unknown,succeeded",
        "a1,5,1,100,unknown,succeeded",  # row 2: duplicate id
        "a3,10,2,-5,unknown,succeeded",  # row 3: negative duration
        "a4,20,1,100,cooking,succeeded",  # row 4: unknown job type
        "a5,30,,100,unknown,succeeded",  # row 5: null GPU count
        "a6,25,1,100,unknown,succeeded",  # row 6: submit time goes back
    ]
    ingested(layout, "broken", rows)
    with pytest.raises(StageFailed) as failure:
        validate.run(params, layout, traces=["broken"])
    text = str(failure.value)
    assert "broken FAILED" in text
    for expectation in (
        "expect_column_values_to_be_unique",
        "expect_column_values_to_be_between(column=duration",
        "expect_column_values_to_be_in_set(column=job_type",
        "expect_column_values_to_not_be_null(column=num_gpus",
        "expect_column_values_to_be_increasing(column=submit_time",
    ):
        assert expectation in text, expectation
    assert "csv_row=3, job_id=a3, submit_time=10, num_gpus=2, duration=-5" in text  # the offending row, as read
    assert "job_type=cooking" in text
    report = json.loads(layout.validation_report("broken").read_text())
    assert report["success"] is False
    failed = {c["expectation"] for c in report["expectations"] if not c["success"]}
    assert "expect_column_values_to_be_unique" in failed
    unique = next(c for c in report["expectations"] if c["expectation"] == "expect_column_values_to_be_unique")
    assert [r["csv_row"] for r in unique["sample_rows"]] == [1, 2]
    assert (layout.root / report["data_docs"]).is_file() and report["data_docs"].endswith(".html")
    # downstream refuses to start and writes nothing
    broken = params_module.from_mapping({"data": {"traces": ["broken"]}}, smoke=True)
    with pytest.raises(StageFailed, match="has not passed validation"):
        workloads.run(broken, layout)
    assert not layout.workloads_report.exists()
    assert not layout.training_manifest.exists()


def record(job_id: str, time_s: float, progress: float) -> dict[str, object]:
    """One decision record in dl2.sim.decision_log's format."""
    return {
        "applied_ps": 1, "applied_workers": 1, "architecture": "ps", "arrival_s": 0.0, "cluster": "tiny",
        "declared_epochs": 100.0, "held_ps": 0, "held_workers": 0, "incumbent": "drf", "incumbent_ps": 1,
        "incumbent_workers": 1, "job_id": job_id, "max_ps": 8, "max_workers": 8, "mode": "shadow", "model": "dssm",
        "model_version": "staging/warmup", "observed_epochs": 100.0, "progress_epochs": progress, "proposed_ps": 1,
        "proposed_workers": 1, "ps_cpu": 2.0, "ps_mem_gb": 0.0, "samples_per_epoch": 349.0, "slot_s": 1200.0,
        "time_s": time_s, "worker_cpu": 2.0, "worker_gpu": 0.0, "worker_mem_gb": 0.0,
    }  # fmt: skip


def write_log(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_monotone_decision_log_passes(layout: Layout, params: params_module.Params) -> None:
    log = write_log(layout.root / "good.jsonl", [record("1", 0, 0), record("2", 0, 0), record("1", 1200, 10)])
    report = validate.validate_log(log, params, layout)
    assert report["success"] is True, validate.failure_text(report, "-")


def test_decision_log_with_time_going_back_fails(layout: Layout, params: params_module.Params) -> None:
    records = [record("1", 0, 0), record("1", 2400, 20), record("1", 1200, 30), record("2", 0, 0)]
    log = write_log(layout.root / "bad.jsonl", records)
    with pytest.raises(StageFailed) as failure:
        validate.run(params, layout, logs=[log])
    text = str(failure.value)
    assert "expect_column_values_to_be_between(column=time_step_s" in text
    assert "log_record=3" in text and "time_s=1200" in text


def test_decision_log_progress_out_of_bounds_and_bad_schema_fail(layout: Layout, params: params_module.Params) -> None:
    beyond = record("1", 1200, 500)  # 5x the declared epochs (bound: 2x)
    missing = record("2", 0, 0)
    del missing["model"]
    log = write_log(layout.root / "schema.jsonl", [record("1", 0, 0), beyond, missing])
    report = validate.validate_log(log, params, layout)
    failed = {(c["expectation"], c["kwargs"].get("column")) for c in report["expectations"] if not c["success"]}
    assert ("expect_column_values_to_be_between", "progress_ratio") in failed
    assert ("expect_column_values_to_not_be_null", "model") in failed
