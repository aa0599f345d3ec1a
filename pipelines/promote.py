"""Stage `promote`: the gate between `challenger` and `champion`, then publish, confirm, or roll back.

The challenger is compared with what it would replace: the current champion or, when there is none, the
incumbent scheduler(s) the cluster runs today (`promote.incumbent`, default DRF; a list, so a team can also
require, say, the best heuristic), on the held-out workloads the `evaluate` stage uses (every workload of each
test seed's set, its stall guard). It is accepted iff

- it is safe: every run finishes (no allocation the simulator refuses, no stall: a policy that starves a job is
  stopped by the stall guard) and its p99 JCT is at most `promote.max_slowdown_p99` x each reference's, and
- its average JCT <= (1 - `promote.margin`) x each reference's.

Every heuristic (`evaluate.baselines`, the policy's teacher and the incumbents) runs too and is reported with the
challenger's margin against the best of them, so that nobody mistakes imitating a teacher for improving on it.
The report is a terminal table (`report_lines`), `reports/promotion.json` and tags on the challenger's version.

A rejected challenger leaves the aliases alone. An accepted one is published: a deployment record
`data/deployments/<n>-dl2-policy-v<version>.json` (numbered, written atomically, never overwritten; the latest
record says which version should run), then the `champion` alias moves. Then the deployment is confirmed: a
separate process loads `models:/dl2-policy@champion` exactly as a scheduler would (download, then
`LearnedScheduler.from_dir`) and runs a short simulation, within a timeout (`run(confirmation=...)` replaces the
check, e.g. with one that fails in tests). If that fails, the previous champion is restored (alias and a rollback
record) and the stage exits 1.

Every outcome is written to `reports/promotion.json` under a key of the inputs (challenger and champion digests,
gate parameters): a re-run with the same inputs replays it and changes nothing; an interrupted promotion resumes
where it stopped.

    python -m pipelines.promote                 # the gate on the current challenger
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dl2.paths import git_commit
from dl2.sim.metrics import report_unit
from pipelines import registry, tracking
from pipelines.params import Params
from pipelines.registry import CHALLENGER, CHAMPION, NAME, Version
from pipelines.stage import Layout, StageFailed, StageResult, main, read_json_object, write_json

CONFIRM_TIMEOUT_S = 300.0
"""How long the confirmation check may take (it loads MLflow and the model, then simulates a few jobs)."""
CONFIRM_JOBS = 10
"""Jobs of the first test workload that the confirmation check simulates."""
RECORD = re.compile(r"^(?P<n>\d+)-dl2-policy-(?:v(?P<version>\d+)|none)\.json$")
FINAL = ("rejected", "promoted", "rolled_back")
NO_GATE = ("no-challenger", "already-champion")
"""Outcomes without a gate run (nothing to report)."""


Confirm = Callable[[int, Params, float], tuple[bool, str]]
"""(version, params, timeout_s) -> (confirmed, detail): does the scheduler run the deployed version?"""


class RolledBack(StageFailed):
    """The deployed challenger was not confirmed; the previous champion is back."""


@dataclass(frozen=True, slots=True)
class Score:
    """A scheduler's results on the held-out workloads (means over the workloads)."""

    avg_jct_s: float
    """Mean of the runs' average JCTs (inf when a run did not finish)."""
    p99_jct_s: float
    """Mean of the runs' p99 JCTs (inf when a run did not finish)."""
    finished: bool
    """Every job of every run finished."""
    runs: int
    error: str = ""
    """Why a run did not finish."""

    @classmethod
    def failed(cls, runs: int, error: str) -> Score:
        """A scheduler whose runs did not all finish: infinite JCTs, so it can never win a comparison."""
        return cls(math.inf, math.inf, False, runs, error)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("avg_jct_s", "p99_jct_s"):
            data[key] = data[key] if math.isfinite(data[key]) else None
        return data


@dataclass(frozen=True, slots=True)
class Verdict:
    accepted: bool
    reason: str
    references: tuple[str, ...]
    """What the challenger was compared with: ('champion',) or the incumbents' names."""
    threshold_avg_jct_s: float
    """The average JCT the challenger had to reach (the strictest reference's, less the margin)."""
    threshold_p99_jct_s: float
    """The p99 JCT it had to stay under."""


def references(champion: Score | None, incumbents: Mapping[str, Score]) -> dict[str, Score]:
    """What the challenger would replace: the champion, or when there is none (or it cannot finish any more)
    the incumbents."""
    if champion is not None and champion.finished:
        return {"champion": champion}
    return dict(incumbents)


def decide(
    challenger: Score,
    champion: Score | None,
    incumbents: Mapping[str, Score],
    margin: float,
    max_slowdown_p99: float,
    unit: tuple[float, str] = (1.0, "s"),
) -> Verdict:
    """The gate, on numbers only: safe, and better than every reference by the margin. `unit` (seconds per unit,
    its name) is how the reason states the figures, as the report table does."""
    scale, name_of_unit = unit

    def f(seconds: float) -> str:
        return f"{seconds / scale:.2f} {name_of_unit}"

    compared = references(champion, incumbents)
    unfinished = [name for name, s in compared.items() if not s.finished]
    names = tuple(compared)
    if unfinished:  # the cluster's own scheduler cannot run the test set: nothing to compare with
        return Verdict(False, f"reference {', '.join(unfinished)} did not finish the test workloads", names, 0, 0)
    strictest = min(compared, key=lambda name: compared[name].avg_jct_s)
    tightest = min(compared, key=lambda name: compared[name].p99_jct_s)
    threshold = (1.0 - margin) * compared[strictest].avg_jct_s
    p99_limit = max_slowdown_p99 * compared[tightest].p99_jct_s

    def verdict(accepted: bool, reason: str) -> Verdict:
        return Verdict(accepted, reason, names, threshold, p99_limit)

    if not challenger.finished:
        return verdict(False, f"safety: not every job finished ({challenger.error})")
    if challenger.p99_jct_s > p99_limit:
        return verdict(
            False,
            f"safety: p99 JCT {f(challenger.p99_jct_s)} > {f(p99_limit)} "
            f"({max_slowdown_p99:g} x {tightest}'s {f(compared[tightest].p99_jct_s)})",
        )
    if challenger.avg_jct_s > threshold:
        return verdict(
            False,
            f"average JCT {f(challenger.avg_jct_s)} > {f(threshold)} "
            f"((1 - {margin:g}) x {strictest}'s {f(compared[strictest].avg_jct_s)})",
        )
    return verdict(
        True,
        f"average JCT {f(challenger.avg_jct_s)} <= {f(threshold)} ((1 - {margin:g}) x {strictest}'s "
        f"{f(compared[strictest].avg_jct_s)}), p99 {f(challenger.p99_jct_s)} <= {f(p99_limit)}",
    )


def best_heuristic(scores: Mapping[str, Score], heuristics: Sequence[str]) -> str | None:
    """The heuristic with the lowest average JCT among those that finished (None: none did)."""
    finished = [name for name in heuristics if scores[name].finished]
    return min(finished, key=lambda name: scores[name].avg_jct_s) if finished else None


# -- evaluation ------------------------------------------------------------------------------------------------


def score(scheduler: str, params: Params) -> Score:
    """Run `scheduler` (a heuristic name or a model folder) on every held-out workload.

    The same runs as the `evaluate` stage (its test set, its stall guard), so the gate and the metrics table
    agree. A run that cannot finish (an invalid allocation, a capacity breach, a stall) is a score that fails
    the safety check, not an error: a bad challenger is a result."""
    from pipelines.evaluate import simulate

    outcome = simulate(scheduler, params)
    if not outcome.safe or not outcome.avg_jct_s:
        return Score.failed(len(outcome.avg_jct_s), outcome.failure or "no test workload")
    runs = len(outcome.avg_jct_s)
    return Score(sum(outcome.avg_jct_s) / runs, sum(outcome.p99_jct_s) / runs, True, runs)


def evaluate(params: Params, challenger: Path, champion: Path | None, layout: Layout) -> dict[str, Score]:
    """Scores of the challenger, the champion (if any) and every heuristic (`pipelines.evaluate.heuristics`).
    A contender's score is the `evaluate` stage's when that stage ran this code on this test set and, for a model,
    on the same bytes (`evaluated_scores`): the runs are deterministic, so they are the runs the gate would make.
    Anything else runs here, models from the registry's copies."""
    from pipelines.evaluate import heuristics
    from pipelines.registry import model_digest

    entries = {"challenger": str(challenger), **({"champion": str(champion)} if champion is not None else {})}
    entries.update({name: name for name in heuristics(params)})
    evaluated = evaluated_scores(params, layout)
    scores = {}
    for name, scheduler in entries.items():
        key = model_digest(Path(scheduler)) if name in ("challenger", "champion") else name
        found = evaluated.get(key)
        scores[name] = found if found is not None else score(scheduler, params)
    return scores


def evaluated_scores(params: Params, layout: Layout) -> dict[str, Score]:
    """The scores in `reports/metrics.json`, by heuristic name and by model digest, when the `evaluate` stage's
    code and test set are this gate's; {} otherwise. DVC keeps that file current: the lifecycle reproduces it
    before the gate."""
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


def roles(params: Params, name: str) -> str:
    """What a row of the report is: challenger, champion, incumbent, teacher or heuristic."""
    if name in ("challenger", "champion"):
        return name
    labels = [
        label
        for label, members in (("incumbent", params.promote.incumbent), ("teacher", (params.warmup.teacher,)))
        if name in members
    ]
    return ", ".join(labels) or "heuristic"


def report_lines(decision: Mapping[str, Any]) -> list[str]:
    """The gate's table for the terminal: every contender's JCTs (in the report unit) and ratios to the
    reference and to the best heuristic, then the verdict."""
    from rich.console import Console
    from rich.table import Table

    scale, unit_name = report_unit(decision["gate"]["mode"])
    reference = decision["reference_avg_jct_s"]
    best = decision["scores"].get(decision["best_heuristic"] or "", {}).get("avg_jct_s")
    table = Table(box=None, pad_edge=False, title=f"promotion gate on {decision['gate']['test']} ({unit_name})")
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
    if margin is not None:
        lines.append(
            f"challenger vs best heuristic ({decision['best_heuristic']}): {100 * margin:+.1f}% average JCT"
            " (negative: faster)"
        )
    lines.append(f"verdict: {decision['status']}: {decision['reason']}")
    return lines


# -- deployment records ----------------------------------------------------------------------------------------


def deployments_dir(layout: Layout) -> Path:
    return layout.root / "data" / "deployments"


def records(directory: Path) -> list[tuple[int, Path]]:
    """Deployment records in order."""
    if not directory.is_dir():
        return []
    found = [(int(m["n"]), path) for path in directory.iterdir() if (m := RECORD.match(path.name))]
    return sorted(found)


def latest_record(directory: Path) -> dict[str, Any] | None:
    found = records(directory)
    return json.loads(found[-1][1].read_text()) if found else None


def write_record(directory: Path, document: Mapping[str, Any]) -> Path:
    """Write the next numbered record; an existing record is never replaced (a racing writer takes the next n)."""
    directory.mkdir(parents=True, exist_ok=True)
    version = document.get("version")
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".record-", suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as stream:
            json.dump({**document}, stream, indent=2, sort_keys=True)
            stream.write("\n")
        os.chmod(temporary, 0o644)
        while True:
            n = (records(directory)[-1][0] + 1) if records(directory) else 1
            path = directory / f"{n:04d}-{NAME}-{f'v{version}' if version is not None else 'none'}.json"
            try:
                os.link(temporary, path)  # atomic, and fails instead of overwriting
            except FileExistsError:
                continue
            return path
    finally:
        Path(temporary).unlink(missing_ok=True)


def publish(layout: Layout, challenger: Version, previous: Version | None, scores: Mapping[str, Any]) -> Path:
    """Record the deployment, then move `champion` (the record first: the latest record is the desired state)."""
    path = write_record(
        deployments_dir(layout),
        {
            "action": "deploy",
            "model": NAME,
            "version": challenger.version,
            "uri": challenger.uri,
            "digest": challenger.digest,
            "previous_version": previous.version if previous else None,
            "metrics": dict(scores),
            "created_at": _now(),
            "git_commit": git_commit(),
        },
    )
    registry.set_alias(CHAMPION, challenger.version)
    return path


def rollback(layout: Layout, failed: Version, previous: Version | None, reason: str) -> Path:
    """Put the previous champion back (or no champion, if there was none) and record it."""
    if previous is not None:
        registry.set_alias(CHAMPION, previous.version)
    else:
        registry.delete_alias(CHAMPION)
    return write_record(
        deployments_dir(layout),
        {
            "action": "rollback",
            "model": NAME,
            "version": previous.version if previous else None,
            "uri": previous.uri if previous else None,
            "digest": previous.digest if previous else None,
            "rolled_back_version": failed.version,
            "reason": reason,
            "created_at": _now(),
            "git_commit": git_commit(),
        },
    )


# -- confirmation ----------------------------------------------------------------------------------------------


def confirm(version: int, params: Params, timeout_s: float = CONFIRM_TIMEOUT_S) -> tuple[bool, str]:
    """Does a scheduler run the deployed version? (Until the controller exists: a separate process loads
    `models:/dl2-policy@champion` as a scheduler would and simulates a few jobs.) Returns (confirmed, detail)."""
    seed = params.workloads.test_seeds[0]
    command = [sys.executable, "-m", "pipelines.promote", "confirm", str(version), params.workloads.test, str(seed)]
    command.append(params.workloads.mode)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tracking.ROOT), os.environ.get("PYTHONPATH")])),
    }
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, cwd=tracking.ROOT, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return False, f"no confirmation within {timeout_s:g} s"
    seconds = time.monotonic() - started
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return False, f"check failed (exit {done.returncode}): {lines[-1] if lines else 'no output'}"
    return True, f"{done.stdout.strip().splitlines()[-1]} ({seconds:.1f} s)"


def check_deployed(version: int, source: str, seed: int, mode: str, jobs: int = CONFIRM_JOBS) -> str:
    """What the confirmation process runs: resolve `champion`, download it, load it and simulate `jobs` jobs."""
    from dl2.core import Workload
    from dl2.rl.learned import LearnedScheduler
    from dl2.rl.workload_source import workload
    from dl2.sim.config import Mode, SimConfig
    from dl2.sim.run import run_one

    deployed = registry.alias(CHAMPION)
    if deployed is None or deployed.version != version:
        found = "unset" if deployed is None else f"version {deployed.version}"
        raise StageFailed(f"{NAME}@{CHAMPION} is {found}, expected version {version}")
    with tempfile.TemporaryDirectory(prefix="dl2-confirm-") as scratch:
        folder = registry.download(deployed.version, Path(scratch) / f"{NAME}-v{deployed.version}")
        LearnedScheduler.from_dir(folder)  # fails on a broken model before any simulation
        test = workload(source, seed)
        short = Workload(f"{test.name}/first-{jobs}", test.cluster, test.jobs[:jobs], test.slot_s, test.source)
        result = run_one(
            short,
            lambda speed, compat: LearnedScheduler.from_dir(folder, compat=compat),
            SimConfig.for_mode(Mode(mode), seed),
        )
    finished = sum(1 for _ in result.jobs)
    return f"confirmed {NAME} v{version}: {finished}/{short.num_jobs} jobs of {short.name} finished"


# -- the stage -------------------------------------------------------------------------------------------------


def run(
    params: Params,
    layout: Layout | None = None,
    confirm_timeout_s: float = CONFIRM_TIMEOUT_S,
    confirmation: Confirm | None = None,
) -> StageResult:
    """Gate the challenger; if accepted, publish it, confirm it (`confirmation`, default `confirm`: tests inject a
    failing one) and promote it or roll back (`RolledBack`). A rejection is a result, not an error."""
    layout = layout or Layout()
    check = confirmation or (lambda version, p, timeout_s: confirm(version, p, timeout_s))
    decision_path = layout.reports / "promotion.json"
    challenger, champion = registry.alias(CHALLENGER), registry.alias(CHAMPION)
    if challenger is None:
        return StageResult("promote", (), summary={"status": "no-challenger"})
    gate = _gate(params)
    key = _key(challenger, champion, gate)
    previous = read_json_object(decision_path)
    if previous is not None and previous.get("key") == key:
        status = previous.get("status")
        if status == "accepted":  # interrupted after the gate: resume
            return _deploy(params, layout, previous, challenger, check, confirm_timeout_s)
        if status in FINAL:
            return _replay(layout, previous)
    if champion is not None and champion.version == challenger.version:
        return StageResult("promote", (), summary={"status": "already-champion", "version": champion.version})

    with tempfile.TemporaryDirectory(prefix="dl2-gate-") as scratch:
        challenger_dir = registry.download(challenger.version, Path(scratch) / "challenger")
        champion_dir = registry.download(champion.version, Path(scratch) / "champion") if champion else None
        scores = evaluate(params, challenger_dir, champion_dir, layout)
    incumbents = {name: scores[name] for name in params.promote.incumbent}

    verdict = decide(
        scores["challenger"], scores.get("champion"), incumbents, params.promote.margin,
        params.promote.max_slowdown_p99, report_unit(params.workloads.mode),
    )  # fmt: skip
    from pipelines.evaluate import heuristics

    best = best_heuristic(scores, heuristics(params))
    reference = min((scores[name].avg_jct_s for name in verdict.references), default=math.inf)
    decision = {
        "status": "accepted" if verdict.accepted else "rejected",
        "key": key,
        "gate": gate,
        "challenger": {"version": challenger.version, "digest": challenger.digest},
        "champion": {"version": champion.version, "digest": champion.digest} if champion else None,
        "references": list(verdict.references),
        "reference_avg_jct_s": _finite(reference),
        "scores": {name: s.to_json() for name, s in scores.items()},
        "roles": {name: roles(params, name) for name in scores},
        "best_heuristic": best,
        "margin_vs_best_heuristic": _margin(scores["challenger"], scores[best] if best else None),
        "threshold_avg_jct_s": _finite(verdict.threshold_avg_jct_s),
        "threshold_p99_jct_s": _finite(verdict.threshold_p99_jct_s),
        "reason": verdict.reason,
        "decided_at": _now(),
    }
    decision["mlflow_run_id"] = run_id = _log_gate(decision, scores, params, layout)
    write_json(decision_path, decision)
    registry.annotate(challenger.version, _version_tags(decision))
    if not verdict.accepted:
        return StageResult("promote", (layout.relative(decision_path),), run_id=run_id,
                           summary=_summary(decision))  # fmt: skip
    return _deploy(params, layout, decision, challenger, check, confirm_timeout_s)


def _key(challenger: Version, champion: Version | None, gate: Mapping[str, Any]) -> str:
    """What a decision depends on: the two models, the gate's parameters and the gate's code."""
    import hashlib

    from pipelines.code import code_version

    document = {
        "challenger": challenger.digest,
        "champion": champion.digest if champion else None,
        "gate": gate,
        "code": code_version("pipelines.promote"),
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:16]


def _margin(challenger: Score, best: Score | None) -> float | None:
    """The challenger's average JCT relative to the best heuristic's, minus one (negative: faster)."""
    if best is None or not challenger.finished:
        return None
    return challenger.avg_jct_s / best.avg_jct_s - 1.0


def _version_tags(decision: Mapping[str, Any]) -> dict[str, str]:
    """Identifiers and the verdict on the registered version (numbers are metrics of its logged model)."""
    margin = decision["margin_vs_best_heuristic"]
    return {
        "dl2.promotion": decision["status"],
        "dl2.promotion_reason": decision["reason"],
        "dl2.promotion_references": ", ".join(decision["references"]),
        "dl2.best_heuristic": str(decision["best_heuristic"]),
        "dl2.vs_best_heuristic": "-" if margin is None else f"{100 * margin:+.1f}%",
    }


def _deploy(
    params: Params,
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
    directory = deployments_dir(layout)
    latest = latest_record(directory)
    if latest is not None and latest.get("action") == "deploy" and latest.get("version") == challenger.version:
        registry.set_alias(CHAMPION, challenger.version)  # resuming: the record is there, the alias may not be
        deployment = layout.relative(records(directory)[-1][1])
    else:
        deployment = layout.relative(publish(layout, challenger, previous, decision["scores"]))
    decision = {**decision, "deployment": deployment}
    write_json(decision_path, decision)
    confirmed, detail = check(challenger.version, params, timeout_s)
    decision["confirmation"] = {"confirmed": confirmed, "detail": detail, "at": _now()}
    outputs = (layout.relative(decision_path), deployment)
    if confirmed:
        decision["status"] = "promoted"
        write_json(decision_path, decision)
        registry.annotate(challenger.version, {"dl2.promotion": "promoted"})
        return StageResult("promote", outputs, run_id=decision.get("mlflow_run_id"), summary=_summary(decision))
    back = rollback(layout, challenger, previous, detail)
    decision.update(status="rolled_back", rollback=layout.relative(back))
    write_json(decision_path, decision)
    registry.annotate(challenger.version, {"dl2.promotion": "rolled_back", "dl2.promotion_reason": detail})
    raise RolledBack(_rolled_back_text(decision))


def _replay(layout: Layout, decision: dict[str, Any]) -> StageResult:
    if decision["status"] == "rolled_back":
        raise RolledBack(_rolled_back_text(decision) + " (recorded earlier; nothing changed)")
    outputs = (layout.relative(layout.reports / "promotion.json"),)
    summary = {**_summary(decision), "replayed": True}
    return StageResult("promote", outputs, run_id=decision.get("mlflow_run_id"), summary=summary)


def _rolled_back_text(decision: Mapping[str, Any]) -> str:
    before = decision.get("champion")
    restored = f"version {before['version']}" if before else "no champion"
    return (
        f"promote: {NAME} v{decision['challenger']['version']} was not confirmed "
        f"({decision['confirmation']['detail']}); rolled back to {restored} ({decision['rollback']})"
    )


def _summary(decision: Mapping[str, Any]) -> dict[str, Any]:
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


def _gate(params: Params) -> dict[str, Any]:
    from pipelines.evaluate import heuristics

    return {
        "margin": params.promote.margin,
        "max_slowdown_p99": params.promote.max_slowdown_p99,
        "incumbent": list(params.promote.incumbent),
        "heuristics": list(heuristics(params)),
        "stall_slots": params.evaluate.stall_slots,
        "test": params.workloads.test,
        "test_seeds": list(params.workloads.test_seeds),
        "mode": params.workloads.mode,
    }


def _log_gate(decision: Mapping[str, Any], scores: Mapping[str, Score], params: Params, layout: Layout) -> str:
    """Log the gate's inputs and scores as an MLflow run of stage `promote` (the test set as its input, the
    challenger's figures also on its logged model); its id."""
    import mlflow

    from pipelines.workloads import test_dataset

    tags = {"dl2.gate_key": decision["key"], "dl2.decision": decision["status"]}
    with tracking.stage_run("promote", params=decision["gate"], tags=tags, root=layout.root) as run:
        mlflow.set_tags(
            {
                "dl2.challenger_version": str(decision["challenger"]["version"]),
                "dl2.champion_version": str((decision["champion"] or {}).get("version", "")),
                "dl2.best_heuristic": str(decision["best_heuristic"]),
            }
        )
        test = test_dataset(params)
        tracking.log_inputs([(test, "test")])
        for name, value in scores.items():
            if value.finished:
                figures = {f"{name}.avg_jct_s": value.avg_jct_s, f"{name}.p99_jct_s": value.p99_jct_s}
                mlflow.log_metrics(figures, dataset=test)
        if decision["margin_vs_best_heuristic"] is not None:
            mlflow.log_metric("challenger.vs_best_heuristic", decision["margin_vs_best_heuristic"], dataset=test)
        model_id = registry.logged_model_id(decision["challenger"]["version"])
        if model_id and scores["challenger"].finished:
            gate_figures = {
                "gate.avg_jct_s": scores["challenger"].avg_jct_s,
                "gate.p99_jct_s": scores["challenger"].p99_jct_s,
            }
            mlflow.log_metrics(gate_figures, model_id=model_id, dataset=test)
    return str(run.info.run_id)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


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


def confirm_cli(argv: Sequence[str]) -> int:
    """`python -m pipelines.promote confirm VERSION WORKLOAD SEED MODE`: the check `confirm` runs in its own
    process; prints one line, exits 0 when the version is confirmed."""
    from dl2.core import Dl2Error

    version, source, seed, mode = argv
    try:
        print(check_deployed(int(version), source, int(seed), mode))
    except (Dl2Error, ValueError) as error:
        print(f"confirm: {error}", file=sys.stderr)
        return 1
    return 0


def cli(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["confirm"]:
        return confirm_cli(argv[1:])
    return main("promote", "Promote the challenger to champion if it passes the gate.", _run, _arguments, argv)


if __name__ == "__main__":
    raise SystemExit(cli())
