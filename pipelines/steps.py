"""The lifecycle's steps that both the demo (`pipelines.lifecycle`) and the cluster loop (`pipelines.cluster_loop`)
take: `dvc` in the repository, registering the challenger, the gate with its table, what fine-tuning and the
`online` stage did, and `learn_from_cluster` (collect, `dvc repro`, `dvc push`, register, gate). Below both, so
neither imports the other for them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable

from pipelines import promote
from pipelines.environment import environment
from pipelines.params import Params
from pipelines.promotion.confirmation import Confirm
from pipelines.promotion.report import outcome_line, report_lines
from pipelines.stage import Layout, StageFailed
from pipelines.tracking import ROOT

TARGETS = ("report", "harmony")
"""What the demo reproduces, with everything upstream: the report, and Harmony's refit from the same cluster
records (`dvc repro philly` draws the heuristics on a Philly week)."""


def say(text: str) -> None:
    print(text, flush=True)


def dvc(*arguments: str, capture: bool = False) -> str:
    """Run `dvc` in the repository; its output streams to the terminal unless captured. Failure: StageFailed."""
    command = [sys.executable, "-m", "dvc", *arguments]
    done = subprocess.run(command, cwd=ROOT, env=environment(), text=True, capture_output=capture, check=False)
    if done.returncode != 0:
        detail = (done.stderr or done.stdout or "").strip().splitlines()[-1:] if capture else []
        raise StageFailed(f"lifecycle: `dvc {' '.join(arguments)}` failed (exit {done.returncode}) {' '.join(detail)}")
    return done.stdout if capture else ""


def _figure(value: object, scale: float, unit: str) -> str:
    """A validation JCT as the report shows it (None: a run that did not finish, recorded as JSON null)."""
    return f"{value / scale:.2f} {unit}" if isinstance(value, int | float) else "a run that did not finish"


def finetune_line(layout: Layout, mode: str) -> str:
    """What fine-tuning did to the warm-up: RL's chosen checkpoint and whether the logged feedback was kept."""
    from dl2.sim.metrics import report_unit

    metadata = json.loads((layout.model("finetune") / "config.json").read_text()).get("metadata", {})
    scale, unit = report_unit(mode)
    initial, best = metadata.get("initial_validation_avg_jct_s"), metadata.get("best_validation_avg_jct_s")
    if metadata.get("best_iteration", -1) < 0:
        rl = "RL kept the warm-up (no checkpoint validated better)"
    elif initial is not None or best is not None:
        now, before = _figure(best, scale, unit), _figure(initial, scale, unit)
        rl = f"RL improved the warm-up on validation: {now}, from {before}"
    else:
        rl = f"RL's checkpoint of iteration {metadata['best_iteration']} validated best"
    feedback = metadata.get("feedback") or {}
    if not feedback:
        return f"  fine-tune: {rl}; no logged feedback"
    after = _figure(feedback["validation_avg_jct_s_after"], scale, unit)
    verdict = f"kept (validation {after})" if feedback["kept"] else f"not kept (validation {after}: worse)"
    return f"  fine-tune: {rl}; steps on {len(feedback['logs'])} decision logs {verdict}"


def online_line(layout: Layout, mode: str) -> str:
    """What the `online` stage did with the records clusters logged."""
    from dl2.sim.metrics import report_unit
    from pipelines.online import RECORD

    record = json.loads((layout.reports / RECORD).read_text())
    online = record.get("online")
    if not online:
        return "  online: no cluster records collected yet: the candidate is the fine-tuned model"
    scale, unit = report_unit(mode)
    before = _figure(online["validation_avg_jct_s_before"], scale, unit)
    after = _figure(online["validation_avg_jct_s_after"], scale, unit)
    decisions = sum(log["decisions"] for log in online["logs"])
    verdict = "kept" if online["kept"] else "not kept: it validated worse"
    line = (
        f"  online: steps on {decisions} decisions from {len(online['logs'])} cluster logs; validation "
        f"{after} after, {before} before ({verdict})"
    )
    return "\n".join([line, *twin_lines(record.get("twin"))])


def harmony_line(layout: Layout) -> str:
    """What the `harmony` stage did with the records clusters logged."""
    from pipelines.harmony import RECORD

    record = json.loads((layout.reports / RECORD).read_text())
    lines = [f"  harmony: skipped {log}: {why}" for log, why in (record.get("skipped_logs") or {}).items()]
    for refit in record.get("logs", []):
        speed = "kept" if refit["speed_model_kept"] == "refit" else "not kept: it erred more"
        placer = "kept" if refit["placer_best_iteration"] >= 0 else "not kept: no iteration validated better"
        retrained, started = refit["placer_validation_h"], refit["placer_untrained_validation_h"]
        lines.append(
            f"  harmony, refit to {refit['log'].rsplit('/', 1)[-1]}: speed model's error on the last slots "
            f"{refit['speed_error_deployed']:.1%} deployed, {refit['speed_error_refit']:.1%} refit ({speed}); "
            f"placer retrained, {retrained:.2f} h against {started:.2f} h in the refit world ({placer})"
        )
    return "\n".join(lines) or "  harmony: no cluster records collected yet: the deployed models stand"


def placement_text(verdict: dict[str, object]) -> str:
    """How the challenger places, where the twin chose a placement other than the running policy's."""
    placer, running = verdict.get("placer"), verdict.get("running_placer")
    return f" placing with {placer} (the running policy: {running})" if placer and placer != running else ""


def twin_lines(twin: object) -> list[str]:
    """What re-warming in each cluster log's calibrated twin gave (`reports/online.json`'s `twin`), or why not."""
    if isinstance(twin, dict):
        return [f"  online, in the calibrated twin: skipped ({twin.get('skipped')})"] if twin.get("skipped") else []
    lines = []
    from dl2.sim.calibrated import calibration_text
    from dl2.sim.metrics import interval_text

    for verdict in twin if isinstance(twin, list) else []:
        name = verdict["log"].rsplit("/", 1)[-1]
        if calibration := verdict.get("calibration"):
            lines.append(f"  online, what the records of {name} show: {calibration_text(calibration)}")
        lines.append(
            f"  online, in the twin calibrated from {name}: re-warmed on "
            f"{verdict['teacher']}{placement_text(verdict)}, {interval_text(verdict['predicted_difference'])} "
            "average JCT against the "
            f"running policy on {len(verdict['running_in_twin_h'])} workloads "
            f"({'kept' if verdict['kept'] else 'not kept: the interval is not below zero'})"
        )
        if off_policy := verdict.get("off_policy"):
            lines.append(
                f"  online, off-policy from the same records: {off_policy_text(off_policy)} progress per slot "
                "against the running policy (evidence, not the gate)"
            )
    return lines


def off_policy_text(estimate: dict[str, float]) -> str:
    """`+2.1% [-3.0%, +7.2%]`: an off-policy estimate's relative difference and its interval."""
    return f"{estimate['difference']:+.1%} [{estimate['low']:+.1%}, {estimate['high']:+.1%}]"


def register_challenger(params: Params, layout: Layout) -> None:
    """Register the fine-tuned model as challenger (a new version only when the model changed)."""
    from pipelines import register

    result = register.run(params, layout)
    created = "new version" if result.summary["created"] else "already registered"
    say(f"  dl2-policy v{result.summary['version']} ({created}, {result.summary['metrics']} metrics)")


def gate(params: Params, layout: Layout, confirmation: Confirm | None = None) -> str:
    """The promotion gate, with its table when it judged (not for a challenger that is the champion already);
    returns its outcome line (also printed)."""
    try:
        outcome = promote.run(params, layout, confirmation=confirmation)
    except BaseException:
        show_decision(layout)  # what the gate had decided before it failed
        raise
    if outcome.summary.get("status") not in promote.NO_GATE:
        show_decision(layout)
    line = outcome_line(outcome)
    say(line)
    return line


def show_decision(layout: Layout) -> None:
    """The gate's table from reports/promotion.json, if it holds one."""
    decision = layout.reports / "promotion.json"
    if decision.is_file() and "scores" in (document := json.loads(decision.read_text())):
        say("\n".join(report_lines(document)))


def learn_from_cluster(params: Params, layout: Layout) -> Callable[[Confirm], str]:
    """What the cluster loop does between its passes: collect the controller's records, `dvc repro` (DVC reruns
    the fine-tune on the new feedback and what depends on it), `dvc push`, register, and the gate, whose
    confirmation (given) is the handshake with the controller. Returns the gate's outcome line."""
    from pipelines import collect

    def learn(confirmation: Confirm) -> str:
        collected = collect.run(params, layout).summary
        skipped = "".join(f"; quarantined {log}: {where}" for log, where in collected["quarantined"].items())
        say(f"    collect: {collected['records']} new records into data/feedback/clusters{skipped}")
        clock = time.perf_counter()
        dvc("repro", "-q", *TARGETS)
        say(f"    dvc repro done in {time.perf_counter() - clock:.0f} s; dvc push")
        say(textwrap.indent(online_line(layout, params.workloads.mode), "  "))
        say(textwrap.indent(harmony_line(layout), "  "))
        dvc("push", "-q")
        register_challenger(params, layout)
        return gate(params, layout, confirmation)

    return learn
