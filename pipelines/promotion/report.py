"""What the gate reports: the decision document (`reports/promotion.json`), the terminal table, the outcome line,
the MLflow run of stage `promote` and the tags on the challenger's version.

Every heuristic is reported with the challenger's margin against the best of them, so that nobody mistakes
imitating a teacher for improving on it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

from dl2.sim.metrics import interval_text, report_unit
from pipelines import registry, tracking
from pipelines.promotion.gate import Score, Verdict, best_heuristic, finite, margin_against
from pipelines.promotion.ledger import now
from pipelines.promotion.scoring import ASKED_SIZES
from pipelines.registry import CHALLENGER, CHAMPION, NAME, Version
from pipelines.stage import Layout, StageResult

TWIN_FIGURES = {"mean": "", "low": "_low", "high": "_high"}
"""The gate's cluster evidence as metrics: the mean relative difference to the champion and its 95% interval."""


def decision_document(
    key: str,
    gate: Mapping[str, Any],
    challenger: Version,
    champion: Version | None,
    scores: Mapping[str, Score],
    verdict: Verdict,
    roles: Mapping[str, str],
) -> dict[str, Any]:
    """The gate's decision as `reports/promotion.json` keeps it: inputs, every score with its role (`roles`), the
    best of the gate's heuristics and the challenger's margin against it, the thresholds and the verdict."""
    best = best_heuristic(scores, gate["heuristics"])
    reference = min((scores[name].avg_jct_s for name in verdict.references), default=math.inf)
    return {
        "status": "accepted" if verdict.accepted else "rejected",
        "key": key,
        "gate": dict(gate),
        "challenger": {"version": challenger.version, "digest": challenger.digest},
        "champion": {"version": champion.version, "digest": champion.digest} if champion else None,
        "references": list(verdict.references),
        "reference_avg_jct_s": finite(reference),
        "scores": {name: s.to_json() for name, s in scores.items()},
        "roles": {name: roles[name] for name in scores},
        "best_heuristic": best,
        "margin_vs_best_heuristic": margin_against(scores["challenger"], scores[best] if best else None),
        "threshold_avg_jct_s": finite(verdict.threshold_avg_jct_s),
        "threshold_p99_jct_s": finite(verdict.threshold_p99_jct_s),
        "reason": verdict.reason,
        "decided_at": now(),
    }


def report_lines(decision: Mapping[str, Any]) -> list[str]:
    """The gate's table for the terminal: every contender's JCTs (in the report unit) and ratios to the
    reference and to the best heuristic, then the verdict."""
    from rich.console import Console
    from rich.table import Table

    scale, unit_name = report_unit(decision["gate"]["mode"])
    reference = decision["reference_avg_jct_s"]
    best = decision["scores"].get(decision["best_heuristic"] or "", {}).get("avg_jct_s")
    placer = decision.get("heuristic_placer")
    placed = f"; heuristics and asked sizes place with {placer}, as the challenger" if placer else ""
    title = f"promotion gate on {decision['gate']['test']} ({unit_name}{placed})"
    table = Table(box=None, pad_edge=False, title=title)
    for column in ("scheduler", "role", "avg JCT", "p99 JCT", "vs reference", "vs best heuristic", "safe"):
        table.add_column(column, justify="left" if column in ("scheduler", "role") else "right")
    for name, row in decision["scores"].items():
        avg, p99 = row["avg_jct_s"], row["p99_jct_s"]

        def ratio(base: float | None, value: float | None = avg) -> str:
            return "-" if value is None or not base else f"{value / base:.3f}"

        table.add_row(
            name,
            decision["roles"][name],
            "-" if avg is None else f"{avg / scale:.2f}",
            "-" if p99 is None else f"{p99 / scale:.2f}",
            ratio(reference),
            ratio(best),
            "yes" if row["finished"] else "NO",
        )
    console = Console(width=120, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(table)
    lines = console.export_text().rstrip().splitlines()
    margin = decision.get("margin_vs_best_heuristic")
    alike = " placed alike" if placer else ""
    if margin is not None:
        lines.append(
            f"challenger vs best heuristic{alike} ({decision['best_heuristic']}): {100 * margin:+.1f}% average JCT"
            " (negative: faster)"
        )
    asked = decision["scores"].get(ASKED_SIZES, {}).get("avg_jct_s")
    challenger = decision["scores"]["challenger"]["avg_jct_s"]
    if asked and challenger is not None:
        lines.append(f"challenger vs the jobs at their asked sizes{alike}: {100 * (challenger / asked - 1):+.1f}%")
    cluster = decision.get("cluster")
    if cluster:
        lines.append(
            f"challenger vs champion on the clusters ({', '.join(cluster['logs'])}): {interval_text(cluster)} "
            f"average JCT in their calibrated twin ({cluster['workloads']} paired workloads)"
        )
    lines.append(f"verdict: {decision['status']}: {decision['reason']}")
    return lines


def summary(decision: Mapping[str, Any]) -> dict[str, Any]:
    """The stage result's summary of a decision (what `outcome_line` reads)."""
    return {
        "status": decision["status"],
        "version": decision["challenger"]["version"],
        "champion": (decision.get("champion") or {}).get("version"),
        "reason": decision["reason"],
        "deployment": decision.get("deployment"),
    }


def outcome_line(result: StageResult) -> str:
    """What the gate decided and why, in one line (the command line and the Airflow task log print it)."""
    summary = result.summary
    status, version = summary.get("status"), summary.get("version")
    replayed = " (recorded earlier; nothing changed)" if summary.get("replayed") else ""
    if status == "no-challenger":
        return f"promote: no {NAME}@{CHALLENGER} to gate"
    if status == "already-champion":
        return f"promote: {NAME} v{version} is already {CHAMPION}"
    if status == "rejected":
        champion = summary.get("champion")
        kept = f"{CHAMPION} stays v{champion}" if champion is not None else f"no {CHAMPION} yet"
        return f"promote: rejected {NAME} v{version}: {summary.get('reason')}; {kept}{replayed}"
    return f"promote: {NAME} v{version} is {CHAMPION} ({summary.get('reason')}; {summary.get('deployment')}){replayed}"


def rolled_back_text(decision: Mapping[str, Any]) -> str:
    """Why the stage failed: the challenger was not confirmed and what is champion again."""
    before = decision.get("champion")
    restored = f"version {before['version']}" if before else "no champion"
    return (
        f"promote: {NAME} v{decision['challenger']['version']} was not confirmed "
        f"({decision['confirmation']['detail']}); rolled back to {restored} ({decision['rollback']})"
    )


def version_tags(decision: Mapping[str, Any]) -> dict[str, str]:
    """Identifiers and the verdict on the registered version (numbers are metrics of its logged model)."""
    margin = decision["margin_vs_best_heuristic"]
    return {
        "dl2.promotion": decision["status"],
        "dl2.promotion_reason": decision["reason"],
        "dl2.promotion_references": ", ".join(decision["references"]),
        "dl2.best_heuristic": str(decision["best_heuristic"]),
        "dl2.vs_best_heuristic": "-" if margin is None else f"{100 * margin:+.1f}%",
    }


def log_gate(decision: Mapping[str, Any], scores: Mapping[str, Score], test: Any, layout: Layout) -> str:
    """Log the gate's inputs and scores as an MLflow run of stage `promote` (the test set, an MLflow dataset, as
    its input; the challenger's figures also on its logged model); its id."""
    import mlflow

    tags = {"dl2.gate_key": decision["key"], "dl2.decision": decision["status"]}
    with tracking.stage_run("promote", params=decision["gate"], tags=tags, root=layout.root) as run:
        mlflow.set_tags(
            {
                "dl2.challenger_version": str(decision["challenger"]["version"]),
                "dl2.champion_version": str((decision["champion"] or {}).get("version", "")),
                "dl2.best_heuristic": str(decision["best_heuristic"]),
            }
        )
        tracking.log_inputs([(test, "test")])
        for name, value in scores.items():
            if value.finished:
                figures = {f"{name}.avg_jct_s": value.avg_jct_s, f"{name}.p99_jct_s": value.p99_jct_s}
                mlflow.log_metrics(figures, dataset=test)
        if decision["margin_vs_best_heuristic"] is not None:
            mlflow.log_metric("challenger.vs_best_heuristic", decision["margin_vs_best_heuristic"], dataset=test)
        cluster = decision.get("cluster")
        twin = {f"cluster_twin.vs_champion{end}": cluster[key] for key, end in TWIN_FIGURES.items()} if cluster else {}
        mlflow.log_metrics(twin)
        model_id = registry.logged_model_id(decision["challenger"]["version"])
        if model_id and scores["challenger"].finished:
            gate_figures = {
                "gate.avg_jct_s": scores["challenger"].avg_jct_s,
                "gate.p99_jct_s": scores["challenger"].p99_jct_s,
                **{f"gate.{name}": value for name, value in twin.items()},
            }
            mlflow.log_metrics(gate_figures, model_id=model_id, dataset=test)
    return str(run.info.run_id)
