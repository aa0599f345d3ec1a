"""What the Airflow tasks call (`dags/`): one function per task, each one call into a stage.

A task passes its DAG run's `params` (`smoke`, `root`, `params_file`, `set`: the same choices as a stage's command
line) and gets back a small JSON document of ids and paths for XCom. Everything else (which folders, which model
version) is decided here, so the DAG files stay configuration.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dl2.cli.common import strict_json
from pipelines.params import Params
from pipelines.stage import Layout, StageResult
from pipelines.tracking import ROOT

Conf = Mapping[str, Any] | None


def context(conf: Conf) -> tuple[Params, Layout]:
    """Parameters and layout of a DAG run: `root` (default: the repository) holds data/, models/, reports/, work/;
    `params_file` (default: the repository's params.yaml), `smoke` (the smoke profile) and `set` (overrides)."""
    from pipelines.params import load

    conf = conf or {}
    root = Path(conf.get("root") or ROOT)
    overrides = conf.get("set") or []
    return load(conf.get("params_file") or None, bool(conf.get("smoke")), list(overrides)), Layout(root)


def _xcom(result: StageResult) -> dict[str, Any]:
    """The stage's result as strict JSON: XCom refuses NaN and infinity (e.g. the validation JCT of a policy that
    finished nothing), which become None."""
    return strict_json(result.to_json())


# -- dl2_trace_ingest ----------------------------------------------------------------------------------------------


def ingest(conf: Conf) -> dict[str, Any]:
    from pipelines.ingest import run

    return _xcom(run(*context(conf)))


def validate_traces(conf: Conf) -> dict[str, Any]:
    from pipelines.validate import run

    return _xcom(run(*context(conf)))


# -- dl2_warmup ----------------------------------------------------------------------------------------------------


def workloads(conf: Conf) -> dict[str, Any]:
    from pipelines.workloads import run

    return _xcom(run(*context(conf)))


def warmup(conf: Conf) -> dict[str, Any]:
    from pipelines.warmup import run

    return _xcom(run(*context(conf)))


def register(conf: Conf, model: str, with_metrics: bool = True) -> dict[str, Any]:
    """Register `models/staging/<model>` as the challenger (with `reports/metrics.json` when `with_metrics`: the
    evaluation that has just run on it)."""
    from pipelines.register import run

    params, layout = context(conf)
    return _xcom(run(params, layout, model=layout.model(model), with_metrics=with_metrics))


# -- dl2_online_finetune -------------------------------------------------------------------------------------------


def collect_feedback(conf: Conf, window_id: str) -> dict[str, Any]:
    """The decision records logged since the last committed window (made once per window id)."""
    from pipelines.watermark import collect

    params, layout = context(conf)
    return collect(layout.feedback(params), layout, window_id)


def validate_feedback(conf: Conf, window: str) -> dict[str, Any]:
    from pipelines.feedback import find_logs
    from pipelines.validate import run

    params, layout = context(conf)
    logs = find_logs(layout.root / window)
    if not logs:
        return {"stage": "validate", "logs": 0}
    return _xcom(run(params, layout, logs=logs))


def finetune(conf: Conf, window: str) -> dict[str, Any]:
    """Fine-tune the champion (the warm-up if there is none yet) on the window's feedback plus simulated rollouts."""
    from pipelines.finetune import run

    params, layout = context(conf)
    champion = champion_folder(layout)
    params = _with(params, "data", feedback=str(layout.root / window))
    return _xcom(run(params, layout, init=champion))


def evaluate(conf: Conf) -> dict[str, Any]:
    """Evaluate the fine-tuned model against the heuristics and the champion (reports/metrics.json)."""
    from pipelines.evaluate import run

    params, layout = context(conf)
    return _xcom(run(params, layout, champion=champion_folder(layout)))


def commit_feedback(conf: Conf, window_id: str) -> dict[str, Any]:
    from pipelines.watermark import commit

    _, layout = context(conf)
    return commit(layout, window_id)


def champion_folder(layout: Layout) -> Path | None:
    """The champion's model folder, downloaded once per version under work/champion/ (None: no champion yet)."""
    from pipelines import registry

    champion = registry.alias(registry.CHAMPION)
    if champion is None:
        return None
    folder = layout.root / "work" / "champion" / f"v{champion.version}"
    if not (folder / "config.json").is_file() or registry.model_digest(folder) != champion.digest:
        registry.download(champion.version, folder)
    return folder


# -- dl2_promote ---------------------------------------------------------------------------------------------------


def promote(conf: Conf) -> dict[str, Any]:
    """The gate; its verdict goes to the task log. A rejection succeeds (the champion stays); a rollback fails."""
    from pipelines.promote import outcome_line, run

    result = run(*context(conf))
    print(outcome_line(result))
    return _xcom(result)


def _with(params: Params, section: str, **values: Any) -> Params:
    return dataclasses.replace(params, **{section: dataclasses.replace(getattr(params, section), **values)})
