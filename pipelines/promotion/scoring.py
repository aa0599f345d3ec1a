"""The scores the gate decides on: the challenger's, the champion's and every heuristic's on the held-out workloads.

Runs are deterministic, so a contender's score is the `evaluate` stage's (its DVC output `reports/metrics.json`)
when that output is for this gate's test set and was made by the code the gate would run (for a model: on the
same bytes, by digest). The check is not a second cache: the gate is no DVC stage, and a challenger can reach it
without `evaluate` having run since (`dl2_warmup` registers the warm-up after `dvc repro warmup` alone), so the
output must say it holds the gate's runs. Anything else (the registry's copy of a model `evaluate` did not see)
runs here.
"""

from __future__ import annotations

from pathlib import Path

from pipelines.params import Params
from pipelines.promotion.gate import Score
from pipelines.stage import Layout, read_json_object


def score(scheduler: str, params: Params, placer: str | None = None) -> Score:
    """Run `scheduler` (a heuristic name placing with `placer`, the `evaluate` stage's by default, or a model
    folder) on every held-out workload.

    The same runs as the `evaluate` stage (its test set, its stall guard), so the gate and the metrics table
    agree. A run that cannot finish (an invalid allocation, a capacity breach, a stall) is a score that fails
    the safety check, not an error: a bad challenger is a result."""
    from pipelines.evaluate import PLACER, simulate

    outcome = simulate(scheduler, params, placer=placer or PLACER)
    if not outcome.safe or not outcome.avg_jct_s:
        return Score.failed(len(outcome.avg_jct_s), outcome.failure or "no test workload")
    runs = len(outcome.avg_jct_s)
    return Score(sum(outcome.avg_jct_s) / runs, sum(outcome.p99_jct_s) / runs, True, runs)


ASKED_SIZES = "asked-sizes"
"""The row of the same jobs at the sizes they asked for (no scheduler resizing them), placed alike."""


def challenger_placer(challenger: Path) -> str:
    """The placement the challenger's model names: every heuristic row of the gate places the same way, so that
    each row differs from the challenger in its allocations only."""
    from dl2.rl.model_io import load_config

    config, _ = load_config(challenger)
    return config.placer


def evaluate(
    params: Params, challenger: Path, champion: Path | None, layout: Layout, placer: str | None = None
) -> dict[str, Score]:
    """Scores of the challenger, the champion (if any), every heuristic (`pipelines.evaluate.heuristics`) and the
    jobs at their asked sizes (realistic mode), the heuristics and the asked sizes placing with `placer` (the
    challenger's, by default). The `evaluate` stage's scores are reused where they are the gate's runs
    (`evaluated_scores`: its heuristics place with its own placer), the others run here, models from the
    registry's copies."""
    from pipelines.evaluate import PLACER, heuristics
    from pipelines.registry import model_digest

    placer = placer or challenger_placer(challenger)
    entries = {"challenger": str(challenger), **({"champion": str(champion)} if champion is not None else {})}
    asked = (ASKED_SIZES,) if params.workloads.mode == "realistic" else ()  # compat mode has no asked sizes
    entries.update({name: name for name in (*heuristics(params), *asked)})
    evaluated = evaluated_scores(params, layout)
    scores = {}
    for name, scheduler in entries.items():
        if name in ("challenger", "champion"):
            found = evaluated.get(model_digest(Path(scheduler)))
        else:
            found = evaluated.get(name) if placer == PLACER else None
        scores[name] = found if found is not None else score(scheduler, params, placer)
    return scores


def evaluated_scores(params: Params, layout: Layout) -> dict[str, Score]:
    """The scores in the `evaluate` stage's output `reports/metrics.json`, by heuristic name and by model digest,
    when that output records this gate's test set and the code the gate would run; {} otherwise."""
    from pipelines.code import code_version
    from pipelines.evaluate import test_set

    document = read_json_object(layout.reports / "metrics.json")
    if (
        document is None
        or document.get("code_version") != code_version("pipelines.evaluate")
        or document.get("test_set") != test_set(params)
    ):
        return {}
    rows = document.get("schedulers") or {}
    digests = document.get("model_digests") or {}
    scores = {}
    for name, row in rows.items():
        if not isinstance(row, dict):
            continue
        if row.get("safe") and row.get("avg_jct_s") is not None:
            found = Score(float(row["avg_jct_s"]), float(row["p99_jct_s"]), True, int(row["runs"]))
        else:
            found = Score.failed(int(row["runs"]), str(row.get("failure") or ""))
        scores[str(digests.get(name, name))] = found
    return scores
