"""Stage `validate`: Great Expectations 1.x suites for job traces and decision logs.

A trace (`jobs.csv`, common schema) must have the six common columns with no nulls, unique job ids,
non-negative submit times in order, GPU counts and durations in range and known job types and statuses. A
decision log must have exactly the `DecisionRecord` fields with no nulls, known modes and architectures,
non-negative numbers, time strictly increasing per job, progress never going backwards and within bounds, and
applied tasks within the job's limits.

The stage's only output is `reports/validation/<name>.json`; on a failed batch it prints which expectations
failed with sample rows (and where the Data Docs HTML is, under the ignored `work/gx/`) and exits 1, so DVC
stops before anything downstream is written. Downstream stages also refuse to start unless every report says
`success`.

    python -m pipelines.validate philly               # the ingested trace data/ingested/philly
    python -m pipelines.validate --log data/feedback/simulated/tiny-20000
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from dl2.core import DecisionRecord, InputError
from pipelines import tracking
from pipelines.code import code_version
from pipelines.params import Params, ValidateParams
from pipelines.stage import Layout, StageFailed, StageResult, main, sha256_file, write_json

TRACE_SUITE = "dl2_trace"
LOG_SUITE = "dl2_decision_log"
ROW = "csv_row"
"""Added to a trace frame: the 1-based data row (header excluded), as dl2's loaders number rows."""
RECORD = "log_record"
"""Added to a decision-log frame: the 1-based record number in log order (segment by segment)."""
LOG_DERIVED = ("type_problem", "time_step_s", "progress_step_epochs", "progress_ratio")
"""Columns computed per record before validation (a suite checks columns, not groups): the first field whose
JSON type or range is wrong (the record parser's check, `dl2.core.log_format.record_problem`), the step from
the job's previous record in time and in progress, and progress over declared epochs."""


# -- suites ----------------------------------------------------------------------------------------------------


def trace_expectations(config: ValidateParams) -> list[Any]:
    import great_expectations.expectations as gxe

    from dl2.workload.catalogue import MODEL_NAMES
    from dl2.workload.traces import COMMON_COLUMNS

    return [
        gxe.ExpectTableColumnsToMatchSet(column_set=[*COMMON_COLUMNS, ROW], exact_match=False),
        *(gxe.ExpectColumnValuesToNotBeNull(column=column) for column in COMMON_COLUMNS),
        gxe.ExpectColumnValuesToBeUnique(column="job_id"),
        gxe.ExpectColumnValuesToBeBetween(column="submit_time", min_value=0),
        gxe.ExpectColumnValuesToBeIncreasing(column="submit_time"),  # non-strict: ties keep file order
        gxe.ExpectColumnValuesToBeBetween(column="num_gpus", min_value=1, max_value=config.max_gpus),
        gxe.ExpectColumnValuesToBeBetween(
            column="duration", min_value=0, strict_min=True, max_value=config.max_duration_s
        ),
        gxe.ExpectColumnValuesToBeInSet(column="job_type", value_set=sorted({*config.job_types, *MODEL_NAMES})),
        gxe.ExpectColumnValuesToBeInSet(column="status", value_set=list(config.statuses)),
    ]


def log_expectations(config: ValidateParams) -> list[Any]:
    import great_expectations.expectations as gxe

    from dl2.core.log_format import MODES

    fields = DecisionRecord.field_names()
    numeric = [name for name, kind in DecisionRecord.field_kinds().items() if kind in _NUMERIC_KINDS]
    return [
        gxe.ExpectTableColumnsToMatchSet(column_set=[*fields, RECORD, *LOG_DERIVED], exact_match=True),
        # types first: a string "3" where a count belongs is refused, not coerced (the fine-tune reader refuses it)
        gxe.ExpectColumnValuesToBeNull(column="type_problem"),
        *(gxe.ExpectColumnValuesToNotBeNull(column=name) for name in fields),
        gxe.ExpectColumnValuesToBeInSet(column="mode", value_set=list(MODES)),
        gxe.ExpectColumnValuesToBeInSet(column="architecture", value_set=["ps", "allreduce"]),
        *(gxe.ExpectColumnValuesToBeBetween(column=name, min_value=0) for name in numeric),
        gxe.ExpectColumnValuesToBeBetween(column="slot_s", min_value=0, strict_min=True),
        gxe.ExpectColumnValuesToBeBetween(column="declared_epochs", min_value=0, strict_min=True),
        gxe.ExpectColumnValuesToBeBetween(column="applied_propensity", min_value=0, strict_min=True, max_value=1),
        # the first record of a job has no step (null), which column expectations skip
        gxe.ExpectColumnValuesToBeBetween(column="time_step_s", min_value=0, strict_min=True),
        gxe.ExpectColumnValuesToBeBetween(column="progress_step_epochs", min_value=0),
        gxe.ExpectColumnValuesToBeBetween(column="progress_ratio", min_value=0, max_value=config.max_progress_ratio),
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(column_A="max_workers", column_B="applied_workers", or_equal=True),
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(column_A="max_ps", column_B="applied_ps", or_equal=True),
    ]


_NUMERIC_KINDS = ("integer", "real", "probability")


# -- frames ----------------------------------------------------------------------------------------------------


def trace_frames(path: Path) -> tuple[Any, Any]:
    """(raw, typed) frames of a job file: raw keeps the cells as text (for sample rows), typed has numbers.

    Only an empty cell is null (not 'NA' or 'null', which could be ids); a cell that is not a number where one
    is expected becomes null in the typed frame, so the not-null expectation names it.
    """
    import pandas as pd

    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""], skipinitialspace=True)
    except FileNotFoundError:
        raise InputError(str(path), "file not found") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise InputError(str(path), f"cannot read as CSV ({error})") from None
    raw.columns = [str(c).strip() for c in raw.columns]
    raw.insert(0, ROW, range(1, len(raw) + 1))
    typed = raw.copy()
    for column in ("submit_time", "num_gpus", "duration"):
        if column in typed:
            typed[column] = pd.to_numeric(typed[column], errors="coerce")
    return raw, typed


def log_frames(location: Path) -> tuple[Any, Any]:
    """(raw, typed) frames of a decision log (a folder of segments or one .jsonl file), in log order."""
    import pandas as pd

    from dl2.core.inputs import parse_json, read_lines
    from dl2.core.log_format import OPTIONAL_FIELDS, record_problem, segments

    rows: list[dict[str, Any]] = []
    for path in segments(location):
        for number, line in enumerate(read_lines(path), start=1):
            if not line.strip():
                continue
            data = parse_json(line, str(path), number)
            if not isinstance(data, dict):
                raise InputError(str(path), "expected a JSON object", row=number)
            rows.append(data)
    if not rows:
        raise InputError(str(location), "the decision log has no records")
    raw = pd.DataFrame(rows)
    raw.insert(0, RECORD, range(1, len(raw) + 1))
    for name, default in OPTIONAL_FIELDS.items():  # optional in the format: no placement; deterministic
        if name not in raw:
            raw[name] = [default for _ in range(len(raw))]
    typed = raw.copy()
    kinds = DecisionRecord.field_kinds()
    problems: list[str | None] = [None] * len(rows)
    for name, kind in kinds.items():
        if name not in typed:
            continue
        # the parsed JSON values, not the frame's (pandas turns a column of ints into numpy integers)
        values = [row.get(name, OPTIONAL_FIELDS.get(name)) for row in rows]
        wrong = [record_problem(value, kind) if value is not None else None for value in values]
        for index, problem in enumerate(wrong):
            if problem is not None and problems[index] is None:
                problems[index] = f"{name}: {problem}"
        kept = [None if problem is not None else value for value, problem in zip(values, wrong, strict=True)]
        typed[name] = pd.Series(kept, index=typed.index, dtype=object)
        if kind in _NUMERIC_KINDS:  # only values of the right JSON type reach the numeric checks
            typed[name] = pd.to_numeric(typed[name], errors="coerce")
    for index, row in enumerate(rows):  # one type per worker node, or none (as the parser checks)
        types, workers = row.get("applied_worker_accelerators"), row.get("applied_worker_nodes", [])
        if not (isinstance(types, list) and types and isinstance(workers, list)):
            continue
        if problems[index] is None and len(types) != len(workers):
            problems[index] = f"applied_worker_accelerators: {len(types)} types for {len(workers)} worker nodes"
    typed["type_problem"] = pd.Series(problems, index=typed.index, dtype=object)
    if {"cluster", "job_id", "time_s", "progress_epochs", "declared_epochs"} <= set(typed.columns):
        by_job = typed.groupby(["cluster", "job_id"], sort=False)
        typed["time_step_s"] = by_job["time_s"].diff()
        typed["progress_step_epochs"] = by_job["progress_epochs"].diff()
        typed["progress_ratio"] = typed["progress_epochs"] / typed["declared_epochs"]
    return raw, typed


# -- running a suite -------------------------------------------------------------------------------------------


@cache
def _context(gx_dir: str) -> Any:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")  # no usage statistics (no internet here)
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="file", project_root_dir=gx_dir)
    context.variables.progress_bars = ProgressBarsConfig(globally=False)  # no tqdm bar per validation
    return context


def run_suite(
    suite_name: str,
    expectations: list[Any],
    asset: str,
    raw: Any,
    typed: Any,
    index_column: str,
    config: ValidateParams,
    layout: Layout,
) -> dict[str, Any]:
    """Validate `typed` (a checkpoint that also updates the Data Docs); failures carry sample rows of `raw`."""
    import great_expectations as gx

    context = _context(str(layout.gx_dir))
    source = context.data_sources.add_or_update_pandas(name="dl2")
    try:
        data_asset = source.get_asset(asset)
    except LookupError:
        data_asset = source.add_dataframe_asset(name=asset)
    try:
        batch = data_asset.get_batch_definition("whole")
    except (LookupError, KeyError):
        batch = data_asset.add_batch_definition_whole_dataframe("whole")
    suite = context.suites.add_or_update(gx.ExpectationSuite(name=suite_name, expectations=expectations))
    definition = context.validation_definitions.add_or_update(
        gx.ValidationDefinition(name=f"{suite_name}-{asset}", data=batch, suite=suite)
    )
    checkpoint = context.checkpoints.add_or_update(
        gx.Checkpoint(
            name=f"{suite_name}-{asset}",
            validation_definitions=[definition],
            actions=[gx.checkpoint.UpdateDataDocsAction(name="docs")],
            result_format={
                "result_format": "SUMMARY",
                "unexpected_index_column_names": [index_column],
                "partial_unexpected_count": config.sample_rows,
            },
        )
    )
    outcome = checkpoint.run(batch_parameters={"dataframe": typed})
    (result,) = outcome.run_results.values()
    checks = [_check(r, raw, index_column, config.sample_rows) for r in result.results]
    docs = layout.gx_dir / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html"
    return {
        "suite": suite_name,
        "success": bool(result.success),
        "evaluated": len(checks),
        "failed": sum(not c["success"] for c in checks),
        "expectations": checks,
        "data_docs": layout.relative(docs),
    }


def _check(result: Any, raw: Any, index_column: str, sample_rows: int) -> dict[str, Any]:
    config = result.expectation_config
    kwargs = {k: _plain(v) for k, v in config.kwargs.items() if k != "batch_id"}
    check: dict[str, Any] = {"expectation": config.type, "kwargs": kwargs, "success": bool(result.success)}
    if result.success:
        return check
    info = result.exception_info or {}
    if info.get("raised_exception"):
        check["error"] = str(info.get("exception_message"))
        return check
    details = result.result or {}
    check["unexpected_count"] = details.get("unexpected_count")
    check["sample_values"] = [_plain(v) for v in details.get("partial_unexpected_list", [])][:sample_rows]
    if "observed_value" in details:
        check["observed"] = _plain(details["observed_value"])
        check["details"] = _plain(details.get("details"))
    indices = [item.get(index_column) for item in details.get("partial_unexpected_index_list") or []]
    rows = raw[raw[index_column].isin([int(i) for i in indices if i is not None])].head(sample_rows)
    check["sample_rows"] = [{k: _plain(v) for k, v in row.items()} for row in rows.to_dict(orient="records")]
    return check


def _plain(value: Any) -> Any:
    """JSON-ready: numpy scalars to Python, NaN to None, tuples to lists."""
    import math

    if hasattr(value, "item") and not isinstance(value, str | bytes):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_plain(v) for v in value]
    return value


def failure_summary(report: dict[str, Any]) -> str:
    """A failed report in one line: what could not be read, or the failed expectations with a sample value."""
    if report.get("error"):
        return str(report["error"])
    failed = [check for check in report["expectations"] if not check["success"]]
    parts = []
    for check in failed[:3]:
        column = check["kwargs"].get("column", "")
        sample = check.get("sample_values") or check.get("observed")
        parts.append(
            f"{check['expectation']}({column}) e.g. {sample!r:.120}" if sample else f"{check['expectation']}({column})"
        )
    more = f" and {len(failed) - 3} more" if len(failed) > 3 else ""
    return f"{report['failed']} of {report['evaluated']} expectations failed: {'; '.join(parts)}{more}"


def failure_text(report: dict[str, Any], report_path: str) -> str:
    """The report a person reads when a batch fails: each failed expectation and sample rows."""
    lines = [
        f"validate: {report['name']} FAILED {report['failed']} of {report['evaluated']} expectations "
        f"({report['kind']} {report['path']})"
    ]
    for check in report["expectations"]:
        if check["success"]:
            continue
        arguments = ", ".join(f"{k}={v}" for k, v in check["kwargs"].items())
        head = f"  {check['expectation']}({arguments})"
        if "error" in check:
            lines.append(f"{head}: could not be evaluated: {check['error']}")
            continue
        if check.get("unexpected_count") is None:
            lines.append(f"{head}: observed {check.get('observed')} {check.get('details') or ''}".rstrip())
            continue
        lines.append(f"{head}: {check['unexpected_count']} unexpected, e.g. {check['sample_values']}")
        for row in check.get("sample_rows", []):
            lines.append("      " + ", ".join(f"{k}={v}" for k, v in row.items()))
    lines.append(f"report: {report_path}")
    lines.append(f"Data Docs: {report['data_docs']}")
    return "\n".join(lines)


# -- the stage -------------------------------------------------------------------------------------------------


def validate_trace(name: str, path: Path, params: Params, layout: Layout) -> dict[str, Any]:
    """Validate one job file; writes and returns `reports/validation/<name>.json` (a failed batch included)."""
    raw, typed = trace_frames(path)
    outcome = run_suite(
        TRACE_SUITE, trace_expectations(params.validate), name, raw, typed, ROW, params.validate, layout
    )
    report = {
        "name": name,
        "kind": "trace",
        "path": layout.relative(path),
        "sha256": sha256_file(path),
        "md5": tracking.md5_file(path),
        "rows": len(raw),
        "code_version": code_version("pipelines.validate"),
        **outcome,
    }
    write_json(layout.validation_report(name), report)
    return report


def validate_log(location: Path, params: Params, layout: Layout, output: Path | None = None) -> dict[str, Any]:
    """Validate one decision log; returns the report (also written to `output` when given), never raises on a
    failed batch (the caller decides)."""
    raw, typed = log_frames(location)
    asset = "log-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in location.name)
    outcome = run_suite(
        LOG_SUITE, log_expectations(params.validate), asset, raw, typed, RECORD, params.validate, layout
    )
    report = {"name": location.name, "kind": "decision log", "path": layout.relative(location), "rows": len(raw)}
    report.update(outcome)
    if output is not None:
        write_json(output, report)
    return report


def require_valid(layout: Layout, names: Sequence[str]) -> list[Path]:
    """The validation reports of `names`, each saying success (else StageFailed: nothing downstream runs)."""
    reports = [layout.validation_report(name) for name in names]
    for name, path in zip(names, reports, strict=True):
        if not _succeeded(path):
            raise StageFailed(
                f"trace {name!r} has not passed validation ({layout.relative(path)} missing or failed); "
                f"run: python -m pipelines.validate {name}"
            )
    return reports


def _succeeded(path: Path) -> bool:
    try:
        return json.loads(path.read_text()).get("success") is True
    except (OSError, ValueError, AttributeError):
        return False


def run(
    params: Params, layout: Layout | None = None, traces: Sequence[str] = (), logs: Sequence[Path] = ()
) -> StageResult:
    """Validate ingested traces (default: params.data.traces) and any decision logs given; every report is
    written first, then a failed batch raises StageFailed naming all of them. The traces' validation is an
    MLflow run whose inputs are the traces (with their sha256) and whose metrics count failed expectations."""
    import mlflow

    layout = layout or Layout()
    names = list(traces) if traces or logs else list(params.data.traces)
    reports, outputs = [], []
    for name in names:
        path = layout.ingested(name) / "jobs.csv"
        if not path.is_file():
            raise InputError(layout.relative(path), f"not ingested; run: python -m pipelines.ingest {name}")
        reports.append(validate_trace(name, path, params, layout))
        outputs.append(layout.relative(layout.validation_report(name)))
    for location in logs:
        output = layout.root / "work" / "validation" / f"log-{Path(location).name}.json"
        reports.append(validate_log(Path(location), params, layout, output))
        outputs.append(layout.relative(output))
    run_id = None
    if names:
        with tracking.stage_run("validate", {"validate": params.section("validate")}, root=layout.root) as active:
            tracking.log_inputs(
                [(tracking.dataset(r["name"], r["md5"], r["path"]), "validation") for r in reports if "md5" in r]
            )
            mlflow.log_metrics({f"{r['name']}.failed_expectations": float(r["failed"]) for r in reports})
            run_id = active.info.run_id
    failed = [failure_text(r, out) for r, out in zip(reports, outputs, strict=True) if not r["success"]]
    if failed:
        raise StageFailed("\n".join(failed))
    summary = {r["name"]: r["rows"] for r in reports}
    return StageResult("validate", tuple(outputs), code_version("pipelines.validate"), run_id, summary)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("traces", nargs="*", help="ingested trace names (default: data.traces)")
    parser.add_argument("--log", type=Path, action="append", default=[], help="also validate this decision log")


def _run(params: Params, args: argparse.Namespace) -> StageResult:
    return run(params, traces=args.traces, logs=args.log)


def cli(argv: Sequence[str] | None = None) -> int:
    return main("validate", "Validate traces and decision logs with Great Expectations.", _run, _arguments, argv)


if __name__ == "__main__":
    raise SystemExit(cli())
