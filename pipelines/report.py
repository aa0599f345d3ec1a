"""Stage `report`: one summary of the experiment, `reports/summary.md` (for people) and `reports/summary.json` (for
scripts and DVC metrics), from the evaluation, the ablation and the workloads stage.

The markdown table is the comparison the lifecycle driver prints: each scheduler's average and p99 JCT on the
held-out workloads and its ratio to the best heuristic, then each ablation variant's mean over seeds.

    python -m pipelines.report [--smoke]
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dl2.core import InputError
from dl2.io import write_text_atomic
from pipelines.code import code_version
from pipelines.params import Params
from pipelines.stage import Layout, StageResult, main_without_arguments, write_json


def inputs(layout: Layout) -> tuple[Path, Path, Path]:
    """(evaluation metrics, ablation table, workloads report)."""
    return layout.reports / "metrics.json", layout.reports / "ablation.json", layout.workloads_report


def read(path: Path, layout: Layout) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(layout.relative(path), "missing; run the stage that writes it first") from None
    except ValueError as error:
        raise InputError(layout.relative(path), f"not valid JSON ({error})") from None
    if not isinstance(document, dict):
        raise InputError(layout.relative(path), "expected a JSON object")
    return document


def _number(value: Any, scale: float, digits: int = 2) -> str:
    return "-" if value is None else f"{value / scale:.{digits}f}"


def _scale(unit_name: str) -> float:
    """Seconds per report unit (slots of 1200 s, or hours)."""
    return 1200.0 if unit_name == "slots" else 3600.0


def _ratio(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A markdown table's lines."""
    return [f"| {' | '.join(header)} |", "|" + "---|" * len(header), *(f"| {' | '.join(row)} |" for row in rows)]


def _ordered(document: Mapping[str, Any], key: str) -> list[tuple[str, Mapping[str, Any]]]:
    """The rows of `document[key]` in the document's `order` (JSON files are written with sorted keys)."""
    rows = document[key]
    return [(name, rows[name]) for name in document.get("order") or sorted(rows)]


def comparison_lines(metrics: Mapping[str, Any]) -> list[str]:
    """Markdown table of the evaluation (JCTs in the report unit)."""
    unit_name = metrics["unit"]
    scale = _scale(unit_name)
    header = [
        "scheduler", "runs", f"avg JCT ({unit_name})", "95% CI", f"p99 JCT ({unit_name})", "vs best heuristic", "safe"
    ]  # fmt: skip
    rows = [
        [
            name, str(row["runs"]), _number(row["avg_jct_s"], scale), f"±{_number(row['avg_jct_ci95_s'], scale)}",
            _number(row["p99_jct_s"], scale), _ratio(row.get("vs_best_heuristic")), "yes" if row["safe"] else "NO",
        ]
        for name, row in _ordered(metrics, "schedulers")
    ]  # fmt: skip
    return _table(header, rows)


def ablation_lines(ablation: Mapping[str, Any]) -> list[str]:
    """Markdown table of the ablation (mean over seeds)."""
    unit_name = ablation["unit"]
    scale = _scale(unit_name)
    header = ["variant", "safe runs", f"test avg JCT ({unit_name})", "95% CI", "vs full", "note"]
    rows = [
        [
            name, f"{row['safe_runs']}/{row['runs']}", _number(row["test_avg_jct_s"], scale),
            f"±{_number(row['test_avg_jct_ci95_s'], scale)}", _ratio(row.get("vs_full")), ablation_note(row),
        ]
        for name, row in _ordered(ablation, "variants")
    ]  # fmt: skip
    return _table(header, rows)


def ablation_note(row: Mapping[str, Any]) -> str:
    """Why a row may not show what its component is worth: the budget left it nothing to change."""
    if row.get("not_run"):
        return str(row["not_run"])
    if row.get("cannot_differ"):
        return "cannot differ at this budget: bit-identical to full on every seed"
    if row.get("moved_from_warmup") == 0:
        return "no policy update at this budget (the warm-up)"
    if row.get("identical_to_full"):
        return f"identical to full on {row['identical_to_full']} of {row['runs']} seeds"
    return ""


def markdown(metrics: Mapping[str, Any], ablation: Mapping[str, Any], workloads: Mapping[str, Any]) -> str:
    test = workloads["test"]
    return "\n".join(
        [
            "# dl2 lifecycle report",
            "",
            f"Held-out test: `{metrics['workload']}` seeds {metrics['test_seeds']} ({len(test['workloads'])} "
            f"workloads, {metrics['mode']} mode); best heuristic: {metrics['best_heuristic']}.",
            "",
            *comparison_lines(metrics),
            "",
            f"Ablations ({ablation['iterations']} RL iterations per seed from the warm-up, first "
            f"{ablation['test_workloads'] or 'all'} test workloads):",
            "",
            *ablation_lines(ablation),
            "",
            f"Train/validation/test disjoint: {'yes' if workloads['disjoint']['ok'] else 'NO'}.",
            "",
        ]
    )


def summary(metrics: Mapping[str, Any], ablation: Mapping[str, Any]) -> dict[str, Any]:
    """Flat numbers for `dvc metrics show`: each scheduler's and variant's average JCT in the report unit."""
    unit_name = metrics["unit"]
    schedulers = {name: row.get(f"avg_jct_{unit_name}") for name, row in metrics["schedulers"].items()}
    variants = {name: row.get(f"test_avg_jct_{unit_name}") for name, row in ablation["variants"].items()}
    return {"unit": unit_name, "best_heuristic": metrics["best_heuristic"], "avg_jct": schedulers, "ablation": variants}


def outputs(layout: Layout) -> tuple[Path, Path]:
    return layout.reports / "summary.json", layout.reports / "summary.md"


def run(params: Params, layout: Layout | None = None) -> StageResult:
    layout = layout or Layout()
    json_path, md_path = outputs(layout)
    written = (layout.relative(json_path), layout.relative(md_path))
    metrics, ablation, workloads = (read(path, layout) for path in inputs(layout))
    write_json(json_path, summary(metrics, ablation))  # every field is a column of `dvc metrics show`
    write_text_atomic(md_path, markdown(metrics, ablation, workloads))
    version = code_version("pipelines.report")
    return StageResult("report", written, version, summary={"markdown": layout.relative(md_path)})


def cli(argv: Sequence[str] | None = None) -> int:
    return main_without_arguments("report", "Summarise evaluation and ablations (markdown and JSON).", run, argv)


if __name__ == "__main__":
    raise SystemExit(cli())
