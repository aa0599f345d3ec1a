"""Stage `register`: a model folder becomes a version of `dl2-policy` and the `challenger`.

The folder (default `models/staging/online`) is logged as a pyfunc model (`pipelines.pyfunc`) with an input
example from the held-out workloads, unless a version already holds a model with the same digest, which is then
reused (and made `challenger` again only if the gate has never judged it). Its evaluation becomes MLflow metrics
of the logged model, linked to the test dataset: the row of `reports/metrics.json` whose model digest is this
model's (`test.avg_jct_s`, `test.p99_jct_s`, `test.vs_best_heuristic`, ...) and the recipe's ablation
(`reports/ablation.json`: `ablation.<variant>.test_avg_jct_s`), so the registry's Compare view puts versions side
by side. Tags keep identifiers only (mode, kind, code version, commit). `champion` never moves here
(`pipelines.promote` does).

    python -m pipelines.register                          # models/staging/online
    python -m pipelines.register --model models/staging/warmup
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipelines import registry
from pipelines.params import Params
from pipelines.registry import CHALLENGER, CHAMPION
from pipelines.stage import Layout, StageResult, main

ROW_METRICS = ("avg_jct_s", "avg_jct_ci95_s", "p99_jct_s", "avg_jct_slots", "avg_jct_h", "vs_best_heuristic")
"""Figures of a scheduler's row in `reports/metrics.json` that become `test.<name>` metrics of the model."""


def evaluation_metrics(
    digest: str, metrics: Mapping[str, Any] | None, ablation: Mapping[str, Any] | None
) -> dict[str, float]:
    """The model's own figures: its row of the evaluation (found by its digest, so an evaluation of another
    model is never attached to this one) and the ablation of its recipe."""
    found: dict[str, float] = {}
    if metrics is not None:
        names = [name for name, value in (metrics.get("model_digests") or {}).items() if value == digest]
        row = metrics.get("schedulers", {}).get(names[0], {}) if names else {}
        found.update({f"test.{key}": row[key] for key in ROW_METRICS if _number(row.get(key))})
    if ablation is not None and found:
        for variant, row in (ablation.get("variants") or {}).items():
            if _number(row.get("test_avg_jct_s")):
                found[f"ablation.{variant}.test_avg_jct_s"] = row["test_avg_jct_s"]
    return {key: float(value) for key, value in found.items()}


def description(model_dir: str, metrics: Mapping[str, Any] | None, figures: Mapping[str, float]) -> str:
    """One paragraph for the registry page: where the model comes from and its headline figure."""
    text = f"dl2 policy from {model_dir}."
    if metrics is not None and "test.avg_jct_s" in figures:
        text += (
            f" Average JCT {figures['test.avg_jct_s']:.0f} s on {metrics.get('workload')} seeds "
            f"{metrics.get('test_seeds')} ({metrics.get('mode')} mode); best heuristic {metrics.get('best_heuristic')}"
        )
        if "test.vs_best_heuristic" in figures:
            text += f" (ratio {figures['test.vs_best_heuristic']:.3f})"
        text += ". Every figure is a metric of this version's logged model."
    return text


def run(
    params: Params,
    layout: Layout | None = None,
    model: Path | None = None,
    metrics: Path | None = None,
    with_metrics: bool = True,
) -> StageResult:
    """Register `model` (default: the fine-tuned model) and point `challenger` at it.

    `with_metrics=False` registers without an evaluation (e.g. right after warm-up, when `reports/metrics.json`
    may describe another model)."""
    from dl2.core import InputError
    from dl2.rl.model_io import is_model_dir, load_config
    from dl2.workload.source import workload
    from pipelines.pyfunc import example_frame
    from pipelines.workloads import test_dataset, training_dataset

    layout = layout or Layout()
    model_dir = Path(model) if model is not None else layout.model("online")
    if not is_model_dir(model_dir):
        raise InputError(layout.relative(model_dir), "not a model folder (needs config.json and policy.pt)")
    metrics_path = Path(metrics) if metrics is not None else layout.reports / "metrics.json"
    document = _read_json(metrics_path) if with_metrics else None
    ablation = _read_json(layout.reports / "ablation.json") if with_metrics else None
    figures = evaluation_metrics(registry.model_digest(model_dir), document, ablation)
    config, metadata = load_config(model_dir)
    tags = {
        "dl2.mode": config.mode,
        "dl2.kind": str(metadata.get("kind", "")),
        "dl2.code_version": str(metadata.get("code_version", "")),
        "dl2.git_commit": str(metadata.get("git_commit", "")),
    }
    inputs = [(test_dataset(params), "test")]
    if layout.training_manifest.is_file():
        inputs.append((training_dataset(layout), "training"))
    example = example_frame(workload(params.workloads.test, params.workloads.test_seeds[0]))
    text = description(layout.relative(model_dir), document, figures)
    version, created = registry.register(model_dir, example, tags, text, figures, inputs)
    moved = should_offer(version, created)
    if moved:
        registry.set_alias(CHALLENGER, version.version)
    current = registry.get(version.version)
    alias = CHALLENGER if CHALLENGER in current.aliases else None
    summary = {"version": version.version, "digest": version.digest, "created": created, "alias": alias}
    summary["metrics"] = len(figures)
    output = current.uri if alias is None else f"models:/{registry.NAME}@{CHALLENGER}"
    return StageResult("register", (output,), run_id=version.run_id, summary=summary)


def should_offer(version: registry.Version, created: bool) -> bool:
    """Whether `challenger` moves to this version: a new one always; an existing one only if the gate has never
    judged it and it is neither challenger nor champion already. Re-running an older stage (say the warm-up DAG
    with unchanged data) must not put a model that was already rejected, or replaced, back in front of the gate."""
    if created:
        return True
    judged = "dl2.promotion" in version.tags
    return not judged and CHALLENGER not in version.aliases and CHAMPION not in version.aliases


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _read_json(path: Path) -> dict[str, Any] | None:
    from dl2.core import InputError

    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except ValueError as error:
        raise InputError(str(path), f"not valid JSON ({error})") from None
    if not isinstance(data, dict):
        raise InputError(str(path), "expected a JSON object")
    return data


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", type=Path, default=None, help="model folder (default: models/staging/online)")
    parser.add_argument("--metrics", type=Path, default=None, help="metrics JSON (default: reports/metrics.json)")
    parser.add_argument(
        "--no-metrics", action="store_true", help="register without an evaluation (e.g. right after the warm-up)"
    )


def _run(params: Params, args: argparse.Namespace) -> StageResult:
    return run(params, model=args.model, metrics=args.metrics, with_metrics=not args.no_metrics)


def cli(argv: Sequence[str] | None = None) -> int:
    return main("register", "Register a model folder as dl2-policy and make it the challenger.", _run, _arguments, argv)


if __name__ == "__main__":
    raise SystemExit(cli())
