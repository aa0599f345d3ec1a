"""Stage `promote`: the gate between `challenger` and `champion`, then publish, confirm, or roll back.

The challenger is compared with what it would replace: the current champion or, when there is none, the
incumbent scheduler(s) the cluster runs today (`promote.incumbent`, default DRF; a list, so a team can also
require, say, the best heuristic), on the held-out workloads the `evaluate` stage uses (every workload of each
test seed's set, its stall guard). It is accepted iff

- it is safe: every run finishes (no allocation the simulator refuses, no stall: a policy that starves a job is
  stopped by the stall guard) and its p99 JCT is at most `promote.max_slowdown_p99` x each reference's, and
- its average JCT <= (1 - `promote.margin`) x each reference's, or, against the champion of a realistic-mode
  lifecycle that collected cluster decision logs (`online.learn_in_twin`): it is faster than the champion in
  those clusters' calibrated twins (`online.twin`'s workloads, paired; the 95% interval below zero) and its
  held-out average JCT <= (1 + `promote.margin`) x the champion's. The held-out workloads are the catalogue; the
  clusters are not, and where they differ what they recorded decides (`pipelines.promotion.gate`).

Every heuristic (`evaluate.baselines`, the policy's teacher and the incumbents) runs too and is reported with the
challenger's margin against the best of them, so that nobody mistakes imitating a teacher for improving on it.
The report is a terminal table, `reports/promotion.json` and tags on the challenger's version.

A rejected challenger leaves the aliases alone. An accepted one is published: a deployment record
`data/deployments/<n>-dl2-policy-v<version>.json` (numbered, written atomically, never overwritten; the latest
record says which version should run), then the `champion` alias moves. Then the deployment is confirmed: a
separate process loads `models:/dl2-policy@champion` exactly as a scheduler would (download, then
`dl2.rl.lookahead.load_policy`) and runs a short simulation, within a timeout (`run(confirmation=...)` replaces the
check, e.g. with one that fails in tests). If that fails, the previous champion is restored (alias and a rollback
record) and the stage exits 1.

Every outcome is written to `reports/promotion.json` under a key of the inputs (challenger and champion digests,
gate parameters): a re-run with the same inputs replays it and changes nothing; an interrupted promotion resumes
where it stopped.

This module is the stage (inputs, the sequence, outputs); the library is `pipelines.promotion`: `gate` (the
decision), `scoring`, `ledger` (deployment records), `confirmation` and `report`.

    python -m pipelines.promote                 # the gate on the current challenger
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dl2.sim.metrics import report_unit
from pipelines import registry
from pipelines.params import Params
from pipelines.promotion import ledger
from pipelines.promotion.confirmation import CONFIRM_TIMEOUT_S, Confirm, confirm
from pipelines.promotion.confirmation import cli as confirm_cli
from pipelines.promotion.gate import ClusterEvidence, decide
from pipelines.promotion.report import (
    decision_document,
    log_gate,
    outcome_line,
    report_lines,
    rolled_back_text,
    summary,
    version_tags,
)
from pipelines.promotion.scoring import ASKED_SIZES, challenger_placer, evaluate
from pipelines.registry import CHALLENGER, CHAMPION, Version
from pipelines.stage import Layout, StageFailed, StageResult, main, read_json_object, write_json
from pipelines.workloads import test_dataset

FINAL = ("rejected", "promoted", "rolled_back")
NO_GATE = ("no-challenger", "already-champion")
"""Outcomes without a gate run (nothing to report)."""


class RolledBack(StageFailed):
    """The deployed challenger was not confirmed; the previous champion is back."""


def run(
    params: Params,
    layout: Layout | None = None,
    confirm_timeout_s: float = CONFIRM_TIMEOUT_S,
    confirmation: Confirm | None = None,
) -> StageResult:
    """Gate the challenger; if accepted, publish it, confirm it (`confirmation`, default `confirm`: tests inject a
    failing one) and promote it or roll back (`RolledBack`). A rejection is a result, not an error."""
    layout = layout or Layout()
    check = confirmation or confirm
    decision_path = layout.reports / "promotion.json"
    challenger, champion = registry.alias(CHALLENGER), registry.alias(CHAMPION)
    if challenger is None:
        return StageResult("promote", (), summary={"status": "no-challenger"})
    gate = gate_settings(params, layout)
    key = decision_key(challenger, champion, gate)
    previous = read_json_object(decision_path)
    if previous is not None and previous.get("key") == key:
        status = previous.get("status")
        if status == "accepted":  # interrupted after the gate: resume
            return _deploy(layout, previous, challenger, check, confirm_timeout_s)
        if status in FINAL:
            return _replay(layout, previous)
    if champion is not None and champion.version == challenger.version:
        return StageResult("promote", (), summary={"status": "already-champion", "version": champion.version})

    with tempfile.TemporaryDirectory(prefix="dl2-gate-") as scratch:
        challenger_dir = registry.download(challenger.version, Path(scratch) / "challenger")
        champion_dir = registry.download(champion.version, Path(scratch) / "champion") if champion else None
        placer = challenger_placer(challenger_dir)
        scores = evaluate(params, challenger_dir, champion_dir, layout, placer)
        cluster = cluster_evidence(gate, layout, challenger_dir, champion_dir)
    incumbents = {name: scores[name] for name in gate["incumbent"]}

    verdict = decide(
        scores["challenger"], scores.get("champion"), incumbents, gate["margin"], gate["max_slowdown_p99"],
        report_unit(gate["mode"]), cluster,
    )  # fmt: skip
    decision = decision_document(key, gate, challenger, champion, scores, verdict, score_roles(params, scores))
    decision["cluster"] = cluster.to_json() if cluster is not None else None
    decision["heuristic_placer"] = placer
    decision["mlflow_run_id"] = run_id = log_gate(decision, scores, test_dataset(params), layout)
    write_json(decision_path, decision)
    registry.annotate(challenger.version, version_tags(decision))
    if not verdict.accepted:
        return StageResult("promote", (layout.relative(decision_path),), run_id=run_id,
                           summary=summary(decision))  # fmt: skip
    return _deploy(layout, decision, challenger, check, confirm_timeout_s)


def twin_logs(params: Params, layout: Layout) -> list[Path]:
    """The collected cluster logs whose calibrated twins the gate consults: those with their cluster's description,
    for a realistic-mode lifecycle that learns in the twin (a compat-mode policy does not play the twin's mode)."""
    from pipelines.feedback_logs import cluster_file
    from pipelines.online import cluster_logs

    if params.workloads.mode != "realistic" or not params.online.learn_in_twin:
        return []
    return [log for log in cluster_logs(layout) if cluster_file(log).is_file()]


def cluster_evidence(
    gate: Mapping[str, Any], layout: Layout, challenger_dir: Path, champion_dir: Path | None
) -> ClusterEvidence | None:
    """The challenger against the champion in the calibrated twin of each cluster log the gate's settings name, on
    the same twin workloads (paired across all the logs); None without a champion or such logs. It reads the
    decision's recorded settings, so that what the decision key covers is what the evidence comes from."""
    from dl2.rl.config import TwinLearningConfig
    from dl2.rl.in_twin import sequential_difference, twin_jct_h
    from dl2.rl.lookahead import load_policy
    from dl2.sim.calibrated import calibrated_world
    from pipelines.collect import clusters_dir

    if champion_dir is None or not gate["cluster_logs"]:
        return None
    config = TwinLearningConfig(**gate["cluster_twin"])
    logs = [clusters_dir(layout) / name for name in gate["cluster_logs"]]
    worlds = [calibrated_world(log)[0] for log in logs]
    challenger = load_policy(challenger_dir, compat=False)
    champion = load_policy(champion_dir, compat=False)

    def pair(index: int) -> tuple[float, float]:
        # workload i of every log, then workload i + 1 of every log: each batch covers every cluster alike
        which, seed = index % len(logs), config.seed + index // len(logs)
        log, world = logs[which], worlds[which]
        return twin_jct_h(log, world, challenger, seed), twin_jct_h(log, world, champion, seed)

    difference = sequential_difference(pair, config.workloads * len(logs), config.max_workloads * len(logs))
    return ClusterEvidence(
        tuple(gate["cluster_logs"]), int(difference["workloads"]), difference["mean"], difference["low"],
        difference["high"],
    )  # fmt: skip


def gate_settings(params: Params, layout: Layout | None = None) -> dict[str, Any]:
    """The parameters a decision depends on (recorded with it, and logged as the MLflow run's parameters), the
    cluster logs the gate's twins calibrate from among them."""
    from pipelines.collect import clusters_dir
    from pipelines.evaluate import heuristics

    layout = layout or Layout()
    logs = twin_logs(params, layout)
    return {
        "cluster_logs": {str(log.relative_to(clusters_dir(layout))): _fingerprint(log) for log in logs},
        "cluster_twin": (
            {
                "workloads": params.online.twin.workloads,
                "max_workloads": params.online.twin.max_workloads,
                "seed": params.online.twin.seed,
            }
            if logs
            else None
        ),
        "margin": params.promote.margin,
        "max_slowdown_p99": params.promote.max_slowdown_p99,
        "incumbent": list(params.promote.incumbent),
        "heuristics": list(heuristics(params)),
        "stall_slots": params.evaluate.stall_slots,
        "test": params.workloads.test,
        "test_seeds": list(params.workloads.test_seeds),
        "mode": params.workloads.mode,
    }


def _fingerprint(log: Path) -> str:
    """A log's contents as far as a decision goes (its files' names and sizes: records are only appended)."""
    files = sorted((str(path.relative_to(log)), path.stat().st_size) for path in log.rglob("*") if path.is_file())
    return hashlib.sha256(json.dumps(files).encode()).hexdigest()[:12]


def score_roles(params: Params, names: Iterable[str]) -> dict[str, str]:
    """What each row of the report is: challenger, champion, incumbent, teacher, heuristic or asked sizes."""
    incumbents, teacher = set(params.promote.incumbent), params.warmup.teacher
    roles = {}
    for name in names:
        if name == ASKED_SIZES:
            roles[name] = "asked sizes"
            continue
        labels = [label for label, yes in (("incumbent", name in incumbents), ("teacher", name == teacher)) if yes]
        roles[name] = name if name in ("challenger", "champion") else ", ".join(labels) or "heuristic"
    return roles


def decision_key(challenger: Version, champion: Version | None, gate: Mapping[str, Any]) -> str:
    """What a decision depends on: the two models, the gate's parameters and the gate's code."""
    from pipelines.code import code_version

    document = {
        "challenger": challenger.digest,
        "champion": champion.digest if champion else None,
        "gate": gate,
        "code": code_version("pipelines.promote"),
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:16]


def _deploy(
    layout: Layout,
    decision: dict[str, Any],
    challenger: Version,
    check: Confirm,
    timeout_s: float,
) -> StageResult:
    """Publish (unless the latest record already deploys this version), confirm, then promote or roll back."""
    decision_path = layout.reports / "promotion.json"
    before = decision.get("champion")
    previous = registry.get(before["version"]) if before else None
    directory = ledger.deployments_dir(layout)
    latest = ledger.latest_record(directory)
    if latest is not None and latest.get("action") == "deploy" and latest.get("version") == challenger.version:
        registry.set_alias(CHAMPION, challenger.version)  # resuming: the record is there, the alias may not be
        deployment = layout.relative(ledger.records(directory)[-1][1])
    else:
        deployment = layout.relative(ledger.publish(layout, challenger, previous, decision["scores"]))
    decision = {**decision, "deployment": deployment}
    write_json(decision_path, decision)
    confirmed, detail = check(challenger.version, decision["gate"], timeout_s)
    decision["confirmation"] = {"confirmed": confirmed, "detail": detail, "at": ledger.now()}
    outputs = (layout.relative(decision_path), deployment)
    if confirmed:
        decision["status"] = "promoted"
        write_json(decision_path, decision)
        registry.annotate(challenger.version, {"dl2.promotion": "promoted"})
        return StageResult("promote", outputs, run_id=decision.get("mlflow_run_id"), summary=summary(decision))
    back = ledger.rollback(layout, challenger, previous, detail)
    decision.update(status="rolled_back", rollback=layout.relative(back))
    write_json(decision_path, decision)
    registry.annotate(challenger.version, {"dl2.promotion": "rolled_back", "dl2.promotion_reason": detail})
    raise RolledBack(rolled_back_text(decision))


def _replay(layout: Layout, decision: dict[str, Any]) -> StageResult:
    if decision["status"] == "rolled_back":
        raise RolledBack(rolled_back_text(decision) + " (recorded earlier; nothing changed)")
    outputs = (layout.relative(layout.reports / "promotion.json"),)
    replayed = {**summary(decision), "replayed": True}
    return StageResult("promote", outputs, run_id=decision.get("mlflow_run_id"), summary=replayed)


# -- the command line ------------------------------------------------------------------------------------------


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--confirm-timeout-s", type=float, default=CONFIRM_TIMEOUT_S, help="limit of the confirmation check"
    )


def _run(params: Params, args: argparse.Namespace) -> StageResult:
    result = run(params, confirm_timeout_s=args.confirm_timeout_s)
    decision = read_json_object(Layout().reports / "promotion.json")
    if decision is not None and "scores" in decision and result.summary.get("status") not in NO_GATE:
        print("\n".join(report_lines(decision)))
    print(outcome_line(result))
    return result


def cli(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["confirm"]:  # `python -m pipelines.promote confirm ...`: the confirmation's own command line
        return confirm_cli(argv[1:])
    return main("promote", "Promote the challenger to champion if it passes the gate.", _run, _arguments, argv)


if __name__ == "__main__":
    raise SystemExit(cli())
