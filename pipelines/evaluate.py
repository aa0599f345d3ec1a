"""Stage `evaluate`: the learned policies against the heuristics (and the current champion) on the held-out test
workloads; writes `reports/metrics.json` (the JCT table DVC shows as metrics) and the JCT distribution
(`reports/plots/jct_cdf.csv` for `dvc plots show`, `reports/plots/jct_cdf.png`).

Every scheduler runs on every test workload (`workloads.test`, seeds `workloads.test_seeds`, as the `workloads`
stage lists them) in `workloads.mode`; policies decide greedily. A policy that starves jobs is stopped by the
simulator's stall guard after `evaluate.stall_slots` idle slots and reported as unsafe (no JCT) instead of failing
the stage: a bad challenger is a result, not an error. The MLflow run logs every row as metrics
(`<scheduler>.avg_jct_s`), the table and the plots.

    python -m pipelines.evaluate [--smoke] [--champion models/champion]
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dl2.io import write_text_atomic
from dl2.sim.metrics import report_unit
from pipelines import tracking
from pipelines.code import code_version
from pipelines.params import Params
from pipelines.stage import Layout, StageResult, main, write_json
from pipelines.workloads import test_dataset

PLACER = "load-balance"
"""Placer of the heuristics in realistic mode (the `dl2 evaluate` default); policies bring their own."""
POLICIES = ("online", "finetune", "warmup")
"""Pipeline models evaluated, by their folder under models/staging (`online` is the candidate `register` takes)."""
PERCENTILES = tuple(range(0, 101, 2))
"""Rows of the JCT distribution plot."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """One scheduler on the test set: per-run average and p99 JCTs and every job's JCT (seconds); `failure` names
    the first run that could not finish."""

    avg_jct_s: tuple[float, ...]
    p99_jct_s: tuple[float, ...]
    job_jct_s: tuple[float, ...]
    failure: str | None = None

    @property
    def safe(self) -> bool:
        return self.failure is None


def heuristics(params: Params) -> tuple[str, ...]:
    """Every heuristic the policy is shown against: the baselines, the policy's teacher (so that imitation is
    not mistaken for improvement) and the incumbents the gate compares with, without repeats."""
    teacher = params.warmup.teacher
    return tuple(dict.fromkeys([*params.evaluate.baselines, teacher, *params.promote.incumbent]))


def test_set(params: Params) -> dict[str, Any]:
    """What decides a run's outcome besides the scheduler and the code: the test workloads, mode and stall guard
    (recorded in `reports/metrics.json`, so a reader can tell whether its figures are for its own settings)."""
    return {
        "workload": params.workloads.test,
        "test_seeds": list(params.workloads.test_seeds),
        "mode": params.workloads.mode,
        "stall_slots": params.evaluate.stall_slots,
    }


def contenders(params: Params, layout: Layout, champion: Path | None) -> dict[str, str]:
    """Name -> heuristic name or model folder: the pipeline's policies, the champion, then the heuristics."""
    entries = {name: str(layout.model(name)) for name in POLICIES}
    if champion is not None:
        entries["champion"] = str(champion)
    entries.update({name: name for name in heuristics(params)})
    return entries


def simulate_each(entries: dict[str, str], digests: dict[str, str], params: Params) -> dict[str, Outcome]:
    """Every contender on the test workloads; a model under two names (the same digest, e.g. `online` when no
    cluster feedback changed `finetune`) is simulated once."""
    outcomes: dict[str, Outcome] = {}
    by_digest: dict[str, Outcome] = {}
    for name, scheduler in entries.items():
        digest = digests.get(name)
        if digest is not None and digest in by_digest:
            outcomes[name] = by_digest[digest]
            continue
        outcomes[name] = simulate(scheduler, params)
        if digest is not None:
            by_digest[digest] = outcomes[name]
    return outcomes


def simulate(scheduler: str, params: Params, limit: int | None = None, placer: str = PLACER) -> Outcome:
    """Run `scheduler` (a heuristic name or a model folder) on the test workloads (the first `limit` of them); a
    heuristic places with `placer`, a policy as its model says (as on the cluster)."""
    from dl2.resolve import scheduler_builder
    from dl2.schedulers.registry import SCHEDULERS
    from dl2.sim.config import Mode

    placed = placer if scheduler in SCHEDULERS else None
    return simulate_builder(scheduler_builder(scheduler, placed, Mode(params.workloads.mode)), params, limit)


def simulate_builder(build: Any, params: Params, limit: int | None = None) -> Outcome:
    """Run the scheduler that `build` makes (`dl2.sim.run.SchedulerBuilder`) on the test workloads, in
    `evaluate.workers` processes (the runs are independent and each is deterministic for its seed, so the
    outcome does not depend on the number of processes)."""
    import multiprocessing

    from pipelines.workloads import test_workloads

    global _CASE_BUILD, _CASE_PARAMS
    cases = [(seed, w) for seed, workloads in test_workloads(params) for w in workloads][:limit]
    _CASE_BUILD, _CASE_PARAMS = build, params  # inherited by forked workers: a builder need not pickle
    workers = min(params.evaluate.workers, len(cases))
    if workers <= 1:
        runs = [_run_case(case) for case in cases]
    else:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            runs = pool.map(_run_case, cases, chunksize=1)
    averages: list[float] = []
    p99s: list[float] = []
    jobs: list[float] = []
    for (seed, workload), (metrics, failure) in zip(cases, runs, strict=True):
        if metrics is None:  # `_run_case` gives either metrics or why there are none
            return Outcome(tuple(averages), tuple(p99s), tuple(jobs), f"{workload.name} (seed {seed}): {failure}")
        average, p99, job_jct = metrics
        averages.append(average)
        p99s.append(p99)
        jobs.extend(job_jct)
    return Outcome(tuple(averages), tuple(p99s), tuple(jobs))


_CASE_BUILD: Any = None
_CASE_PARAMS: Any = None


def _run_case(case: tuple[int, Any]) -> tuple[tuple[float, float, tuple[float, ...]] | None, str | None]:
    """One test run: (average JCT, p99 JCT, every job's JCT), or why it could not finish."""
    from dl2.core import InvalidAllocationError
    from dl2.sim.config import Mode, SimConfig
    from dl2.sim.metrics import summarize
    from dl2.sim.run import run_one
    from dl2.sim.simulator import SimulationError

    seed, workload = case
    mode = Mode(_CASE_PARAMS.workloads.mode)
    config = replace(SimConfig.for_mode(mode, seed), stall_slots=_CASE_PARAMS.evaluate.stall_slots)
    try:
        result = run_one(workload, _CASE_BUILD, config)
    except (SimulationError, InvalidAllocationError) as error:
        return None, str(error)
    metrics = summarize(result)
    return (metrics.avg_jct_s, metrics.p99_jct_s, tuple(job.jct_s for job in result.jobs)), None


def table(outcomes: Mapping[str, Outcome], params: Params) -> dict[str, Any]:
    """The metrics document: one row per scheduler, ratios to the best heuristic (JSON-ready, no NaN)."""
    from dl2.sim.metrics import mean_ci95

    scale, unit_name = report_unit(params.workloads.mode)
    rows: dict[str, dict[str, Any]] = {}
    for name, outcome in outcomes.items():
        row: dict[str, Any] = {"runs": len(outcome.avg_jct_s), "safe": outcome.safe}
        if outcome.safe and outcome.avg_jct_s:
            mean, half = mean_ci95(list(outcome.avg_jct_s))
            row.update(avg_jct_s=mean, avg_jct_ci95_s=half, p99_jct_s=sum(outcome.p99_jct_s) / len(outcome.p99_jct_s))
            row[f"avg_jct_{unit_name}"] = mean / scale
        else:
            row.update(avg_jct_s=None, avg_jct_ci95_s=None, p99_jct_s=None, failure=outcome.failure)
        rows[name] = row
    finished = [b for b in heuristics(params) if b in rows and rows[b]["avg_jct_s"] is not None]
    best = min(finished, key=lambda b: rows[b]["avg_jct_s"]) if finished else None
    best_jct_s = rows[best]["avg_jct_s"] if best is not None else None
    for row in rows.values():
        ok = best_jct_s is not None and row["avg_jct_s"] is not None
        row["vs_best_heuristic"] = row["avg_jct_s"] / best_jct_s if ok else None
    return {
        "workload": params.workloads.test,
        "test_seeds": list(params.workloads.test_seeds),
        "mode": params.workloads.mode,
        "unit": unit_name,
        "best_heuristic": best,
        "heuristics": [name for name in heuristics(params) if name in rows],
        "teacher": params.warmup.teacher,
        "order": list(outcomes),
        "schedulers": rows,
    }


def distribution(outcomes: Mapping[str, Outcome], params: Params) -> list[dict[str, Any]]:
    """Per percentile, each safe scheduler's JCT (in the report unit): the JCT CDF with its axes swapped, so that
    DVC can draw every scheduler against one shared x field."""
    import numpy as np

    scale, _ = report_unit(params.workloads.mode)
    safe = {name: np.asarray(o.job_jct_s) / scale for name, o in outcomes.items() if o.safe and o.job_jct_s}
    return [
        {"percentile": p, **{name: round(float(np.percentile(jct, p)), 4) for name, jct in safe.items()}}
        for p in PERCENTILES
    ]


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """A CSV written next to `path` and renamed into place."""
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]) if rows else ["percentile"], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_text_atomic(path, buffer.getvalue())


def plot_cdf(outcomes: Mapping[str, Outcome], params: Params, path: Path) -> None:
    """The JCT CDF of every safe scheduler (PNG, for MLflow and `dvc plots show`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    scale, unit_name = report_unit(params.workloads.mode)
    figure, axis = plt.subplots(figsize=(6, 4))
    for name, outcome in outcomes.items():
        if outcome.safe and outcome.job_jct_s:
            jct = np.sort(np.asarray(outcome.job_jct_s) / scale)
            axis.step(jct, np.arange(1, len(jct) + 1) / len(jct), where="post", label=name)
    axis.set_xscale("log")
    axis.set_xlabel(f"JCT ({unit_name})")
    axis.set_ylabel("fraction of jobs")
    axis.set_title(f"JCT CDF on {params.workloads.test} ({params.workloads.mode})")
    axis.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.stem}.tmp.png")
    figure.savefig(temporary, dpi=100, bbox_inches="tight")
    plt.close(figure)
    temporary.replace(path)


def outputs(layout: Layout) -> tuple[Path, Path, Path]:
    """(metrics JSON, distribution CSV, CDF PNG)."""
    return layout.reports / "metrics.json", layout.plots / "jct_cdf.csv", layout.plots / "jct_cdf.png"


def run(params: Params, layout: Layout | None = None, champion: Path | None = None) -> StageResult:
    """Evaluate the staged models, the champion (`champion`, else `evaluate.champion`) and the heuristics."""
    import mlflow

    from pipelines.registry import model_digest

    layout = layout or Layout()
    if champion is None and params.evaluate.champion:
        champion = layout.root / params.evaluate.champion
    entries = contenders(params, layout, champion)
    models = {name: model_digest(Path(entries[name])) for name in entries if name in (*POLICIES, "champion")}
    settings = {"evaluate": params.section("evaluate"), "workloads": params.section("workloads")}
    version = code_version("pipelines.evaluate")
    written = outputs(layout)
    with tracking.stage_run("evaluate", settings, tags={"dl2.code_version": version}, root=layout.root) as active:
        test = test_dataset(params)
        tracking.log_inputs([(test, "test")])
        outcomes = simulate_each(entries, models, params)
        document = {"code_version": version, "test_set": test_set(params), "model_digests": models,
                    **table(outcomes, params)}  # fmt: skip
        write_json(written[0], document)
        write_csv(written[1], distribution(outcomes, params))
        plot_cdf(outcomes, params, written[2])
        for name, row in document["schedulers"].items():
            values = {f"{name}.{k}": float(v) for k, v in row.items() if _number(v)}
            mlflow.log_metrics(values, dataset=test)
        mlflow.log_artifact(str(written[2]), artifact_path="plots")
        summary = {name: row["avg_jct_s"] for name, row in document["schedulers"].items()}
        return StageResult("evaluate", tuple(layout.relative(p) for p in written), version, active.info.run_id, summary)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--champion", type=Path, default=None, help="model folder of the current champion")


def _run(params: Params, args: argparse.Namespace) -> StageResult:
    return run(params, champion=args.champion)


def cli(argv: Sequence[str] | None = None) -> int:
    return main(
        "evaluate", "Evaluate the learned policies against heuristics on held-out workloads.", _run, _arguments, argv
    )


if __name__ == "__main__":
    raise SystemExit(cli())
