"""Stage `register`: a model folder becomes a version of `dl2-policy` and the `challenger`.

The folder (default `models/staging/finetune`) is logged as a pyfunc model (`pipelines.pyfunc`) with an input
example from the held-out workloads, unless a version already holds a model with the same digest, which is then
reused (and made `challenger` again only if the gate has never judged it). The evaluation metrics
(`reports/metrics.json`, if present) are set on the version: numbers as tags `dl2.metrics.<key>`, the whole file
in the description. `champion` never moves here (`pipelines.promote` does).

    python -m pipelines.register                          # models/staging/finetune
    python -m pipelines.register --model models/staging/warmup --metrics reports/warmup-metrics.json
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipelines import registry, tracking
from pipelines.params import Params
from pipelines.registry import CHALLENGER, CHAMPION
from pipelines.stage import Layout, StageResult, main

MAX_METRIC_TAGS = 64
"""Numbers of the metrics file set as tags (the description holds all of it)."""
MAX_DESCRIPTION = 5000


def metric_tags(metrics: Mapping[str, Any]) -> dict[str, str]:
    """Numeric leaves of the metrics document as `dl2.metrics.<dotted key>` tags."""
    tags = {}
    for key, value in tracking.flatten(metrics).items():
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            tags[f"dl2.metrics.{key}"] = f"{value:.6g}" if isinstance(value, float) else str(value)
        if len(tags) == MAX_METRIC_TAGS:
            break
    return tags


def description(model_dir: Path, metrics_path: Path | None, metrics: Mapping[str, Any] | None) -> str:
    text = f"dl2 policy from {model_dir}."
    if metrics is not None:
        document = json.dumps(metrics, indent=1, sort_keys=True)
        text += f"\n\nEvaluation ({metrics_path}):\n{document}"
    return text if len(text) <= MAX_DESCRIPTION else text[: MAX_DESCRIPTION - 4] + "\n..."


def run(
    params: Params,
    layout: Layout | None = None,
    model: Path | None = None,
    metrics: Path | None = None,
    force: bool = False,
    with_metrics: bool = True,
) -> StageResult:
    """Register `model` (default: the fine-tuned model) and point `challenger` at it.

    `with_metrics=False` registers without an evaluation (e.g. right after warm-up, when `reports/metrics.json`
    may describe another model). `force` is accepted for symmetry with the other stages; registration is decided
    by the model's digest."""
    from dl2.core import InputError
    from dl2.rl.model_io import is_model_dir, load_config
    from dl2.rl.workload_source import workload
    from pipelines.pyfunc import example_frame

    layout = layout or Layout()
    model_dir = Path(model) if model is not None else layout.model("finetune")
    if not is_model_dir(model_dir):
        raise InputError(layout.relative(model_dir), "not a model folder (needs config.json and policy.pt)")
    metrics_path = Path(metrics) if metrics is not None else layout.reports / "metrics.json"
    document = _read_metrics(metrics_path) if with_metrics else None
    config, metadata = load_config(model_dir)
    tags = {"dl2.mode": config.mode, "dl2.kind": str(metadata.get("kind", "")), **metric_tags(document or {})}
    example = example_frame(workload(params.workloads.test, params.workloads.test_seeds[0]))
    shown = layout.relative(metrics_path) if document is not None else None
    version, created = registry.register(
        model_dir, example, tags, description(Path(layout.relative(model_dir)), shown, document)
    )
    moved = should_offer(version, created)
    if moved:
        registry.set_alias(CHALLENGER, version.version)
    current = registry.get(version.version)
    alias = CHALLENGER if CHALLENGER in current.aliases else None
    summary = {"version": version.version, "digest": version.digest, "created": created, "alias": alias}
    return StageResult(
        "register",
        not (created or moved),
        (current.uri if alias is None else f"models:/{registry.NAME}@{CHALLENGER}",),
        version.digest[:16],
        version.run_id,
        summary,
    )


def should_offer(version: registry.Version, created: bool) -> bool:
    """Whether `challenger` moves to this version: a new one always; an existing one only if the gate has never
    judged it and it is neither challenger nor champion already. Re-running an older stage (say the warm-up DAG
    with unchanged data) must not put a model that was already rejected, or replaced, back in front of the gate."""
    if created:
        return True
    judged = "dl2.promotion" in version.tags
    return not judged and CHALLENGER not in version.aliases and CHAMPION not in version.aliases


def _read_metrics(path: Path) -> dict[str, Any] | None:
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
    parser.add_argument("--model", type=Path, default=None, help="model folder (default: models/staging/finetune)")
    parser.add_argument("--metrics", type=Path, default=None, help="metrics JSON (default: reports/metrics.json)")


def _run(params: Params, args: argparse.Namespace) -> StageResult:
    return run(params, model=args.model, metrics=args.metrics, force=args.force)


def cli(argv: Sequence[str] | None = None) -> int:
    return main("register", "Register a model folder as dl2-policy and make it the challenger.", _run, _arguments, argv)


if __name__ == "__main__":
    raise SystemExit(cli())
