"""The closed loop on clusters unlike the catalogue: does learning from the cluster's records pay, round by round?

Per scenario (`dl2.truth`; `catalogue` is the no-shift control) and seed, on Philly-like workloads as in
`benchmarks/truth_scenarios.py` (`synthetic-philly`, the first `--jobs` jobs on the first `--nodes` servers), the
loop runs `--rounds` rounds. Round r:

1. the cluster's week r (the workload of seed + 500 + r under the truth) runs with the policy active then (the
   champion `models/dl2-philly` in round 0), and the decision records of its first seven days join the cluster's
   log (each week after the last);
2. the twin that log calibrates (`dl2.sim.calibrated`) trains a challenger from the active policy, as
   `--candidates` says (`rewarm`: re-warmed by DAgger on the best heuristic reading the calibrated speeds; `rl`:
   fine-tuned by RL; both as `benchmarks/calibrated_twin.py` does them);
3. the gate: the challenger replaces the active policy only if its average JCT on the twin's workloads, paired
   with the active policy's, is lower with a 95% interval of the mean relative difference below zero; the
   workloads come in batches of `--twin-workloads`, another while the interval straddles zero with the
   challenger ahead, at most `--twin-max-workloads` (`dl2.rl.in_twin.sequential_difference`: the interval is
   widened for the planned looks);
4. this week (the workload of the seed, never learned from) is played under the truth by the policy active
   after the round: the cluster's average JCT as its users see it.

With `--explore EPSILON` the weeks are logged with canary exploration (`dl2.schedulers.exploring`), and each
challenger is also estimated off-policy from the log before the gate (`dl2.rl.off_policy`, doubly robust over the
logged propensities), beside the twin's prediction; the gate itself stays the twin's.

Beside the rounds, on the same week: the champion placing with `isolate-strict` (the placement the catalogue's own
simulator finds best for it: what the loop adds beyond that placement), the jobs at their asked sizes
(`asked-sizes`: dl2 off, the shadow pass),
the heuristics a deployment has (DRF, Tiresias, Optimus and `speedup-hull` on the catalogue, `optimus-fitted`),
the best of Optimus and `speedup-hull` reading the speeds calibrated from the last round's log, and the heuristics
reading the truth (the best of them handed the truth's speeds and the jobs' true types, which no deployment has;
not a ceiling: a learned policy can beat them). The bars (issue: learning that pays): after the rounds, at least 10%
below the champion, below every heuristic a deployment has, within 10% of the heuristics reading the truth, faster
than the asked sizes; in the control, the gate keeps the champion.

    .venv/bin/python benchmarks/loop_scenarios.py [--truths speed-shift,catalogue --seeds 9100 --rounds 2]

Prints the scenario table (mean over seeds, 95% CIs) and the gate's prediction against the outcome, and writes
`benchmarks/results/loop_scenarios.json` (after each cell, so a long run keeps what it measured).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from calibrated_twin import (
    fine_tune_in_twin,
    play,
    play_calibrated,
    rewarm_in_twin,
    twin_jct_h,
)
from common import environment, print_table, write_json
from truth_scenarios import CHAMPION, SPEED_HEURISTICS, TRUTH_HEURISTICS_ROW, philly_like

from dl2.core import DecisionRecord
from dl2.core.log_format import CLUSTER_FILE, cluster_to_json, read_cluster, read_log
from dl2.placement.samples import record_run
from dl2.resolve import scheduler_builder
from dl2.rl.config import TwinLearningConfig
from dl2.rl.in_twin import sequential_difference
from dl2.rl.off_policy import off_policy_difference
from dl2.schedulers.exploring import ExplorationScope, ExploringScheduler
from dl2.schedulers.registry import PLACERS
from dl2.sim.calibrated import calibrated_world
from dl2.sim.config import Mode, SimConfig
from dl2.sim.decision_log import write_segment
from dl2.sim.metrics import mean_ci95
from dl2.sim.run import catalogue_speed
from dl2.truth import SCENARIOS, realise, truth_named

WEEK_S = 7 * 24 * 3600.0
BASELINES = ("asked-sizes", "drf", "tiresias", "optimus", "speedup-hull", "optimus-fitted")
"""What a deployment can run without dl2 (the asked sizes are dl2 off): each reads the catalogue or its own fit."""
ISOLATED = "isolate-strict"
"""The heuristic placement (jobs alone on their servers) that the twin's placement choice most often finds: each
baseline also runs with it, so that a loop that changes the placement is not compared with heuristics that cannot."""
ISOLATED_SUFFIX = f", {ISOLATED}"
CHAMPION_ROW = "champion before the loop"
CHAMPION_ISOLATED_ROW = CHAMPION_ROW + ISOLATED_SUFFIX
"""The champion placing with `isolate-strict` instead of its own `binpack`: what it would be had it shipped with the
placement the catalogue's own simulator finds best, so that what the loop adds beyond that placement shows."""
CALIBRATED_ROW = "best heuristic on the calibrated speeds"
TRUTH_HEURISTICS_ANY_PLACEMENT_ROW = f"{TRUTH_HEURISTICS_ROW}, any placement"
"""The heuristics reading the truth (placing with load balancing, their own placement: that row), each with every
registered placement: the best of them all."""
LEARNERS = {"rewarm": rewarm_in_twin, "rl": fine_tune_in_twin}
DEFAULT_TWIN_PLACERS = ",".join(TwinLearningConfig().placers)
"""`--twin-placers`' default: the library's, which runs that predate the flag tried too."""


def week_records(
    truth: str,
    seed: int,
    week: int,
    policy: str,
    num_jobs: int,
    num_nodes: int,
    start_s: float,
    scope: ExplorationScope | None = None,
) -> tuple[list[DecisionRecord], Any]:
    """The decision records of the cluster's week `week` with `policy` active (explored within `scope`, if
    given), shifted to begin at `start_s` and with the week in each job's name (jobs of different weeks are
    different jobs); and the week's cluster."""
    cluster = realise(truth_named(truth), philly_like(seed + 500 + week, num_jobs, num_nodes))
    config = cluster.config(SimConfig.realistic(seed=seed + 500 + week))
    scheduler = scheduler_builder(policy, None, Mode.REALISTIC)(catalogue_speed(), False)
    if scope is not None:
        scheduler = ExploringScheduler(scheduler, scope, seed=seed + week)
    records = record_run(cluster.workload, scheduler, config, cluster.speed, cluster.interference)
    shifted = [
        replace(r, job_id=f"w{week}-{r.job_id}", time_s=r.time_s + start_s, arrival_s=r.arrival_s + start_s)
        for r in records
        if r.time_s + r.slot_s <= WEEK_S  # what the controller logged in the week; later slots are next week's
    ]
    return shifted, cluster


def run_loop(truth: str, seed: int, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """The rounds of one (truth, seed): what each learned, the gate's call and prediction, and the week played by
    the policy active after each round."""
    log = folder / f"{truth}-{seed}"
    active, start_s, rounds = CHAMPION, 0.0, list[dict[str, Any]]()
    world = None
    scope = ExplorationScope(args.explore, args.explore_fraction) if args.explore > 0 else None
    for week in range(args.rounds):
        records, cluster = week_records(truth, seed, week, active, args.jobs, args.nodes, start_s, scope)
        span_s = max(r.time_s + r.slot_s for r in records) - start_s
        if week == 0:
            log.mkdir(parents=True, exist_ok=True)
            (log / CLUSTER_FILE).write_text(json.dumps(cluster_to_json(cluster.workload.cluster)))
        write_segment(log, records, int(start_s // records[0].slot_s))
        start_s += span_s
        world, calibration = calibrated_world(log)
        incumbent_in_twin: dict[int, float] = {}  # the active policy's hours per twin workload, run once
        learned: dict[str, Any] = {}
        predicted: dict[str, dict[str, float]] = {}
        off_policy: dict[str, dict[str, float]] = {}
        made: dict[str, str] = {}
        for candidate in args.candidates.split(","):
            out = folder / f"{candidate}-{truth}-{seed}-round{week + 1}"
            learned[candidate] = LEARNERS[candidate](log, world, calibration, args, out, active)
            predicted[candidate] = twin_call(log, world, str(out), active, incumbent_in_twin, args)
            if scope is not None:  # the re-warming estimates its challenger itself (`TwinVerdict.off_policy`)
                off_policy[candidate] = learned[candidate].get("off_policy") or off_policy_call(
                    log, world, str(out), active
                )
            made[candidate] = str(out)
        better = [name for name, difference in predicted.items() if difference["high"] < 0]
        choice = min(better, key=lambda name: predicted[name]["mean"], default=None)
        before = play(truth, seed, args.jobs, args.nodes, active)
        if choice is not None:
            active = made[choice]
        after = play(truth, seed, args.jobs, args.nodes, active) if choice is not None else before
        outcome = {name: play(truth, seed, args.jobs, args.nodes, path) / before - 1 for name, path in made.items()}
        rounds.append({
            "round": week + 1,
            "records": len(records),
            "records_span_days": span_s / 86400,
            "learned": learned,
            "twin_prediction": predicted,
            "off_policy": off_policy,
            "outcome_vs_active": outcome,
            "promoted": choice,
            "avg_jct_h": after,
        })  # fmt: skip
        print(f"{truth} seed {seed} round {week + 1}: {json.dumps(rounds[-1], default=str)}", flush=True)
    assert world is not None
    rows = {CHAMPION_ROW: play(truth, seed, args.jobs, args.nodes, CHAMPION)}
    rows[CHAMPION_ISOLATED_ROW] = play(truth, seed, args.jobs, args.nodes, CHAMPION, placer=ISOLATED)
    rows |= {f"after round {r['round']}": float(r["avg_jct_h"]) for r in rounds}
    rows |= {name: play(truth, seed, args.jobs, args.nodes, name) for name in BASELINES}
    rows |= {
        name + ISOLATED_SUFFIX: play(truth, seed, args.jobs, args.nodes, name, placer=ISOLATED) for name in BASELINES
    }
    rows[CALIBRATED_ROW] = min(
        play_calibrated(truth, seed, args.jobs, args.nodes, name, world) for name in SPEED_HEURISTICS
    )
    on_truth = {  # the heuristics' own placement is load balancing: TRUTH_HEURISTICS_ROW is that column
        placer: min(play(truth, seed, args.jobs, args.nodes, name, True, placer) for name in SPEED_HEURISTICS)
        for placer in PLACERS
    }
    rows[TRUTH_HEURISTICS_ROW] = on_truth["load-balance"]
    rows[TRUTH_HEURISTICS_ANY_PLACEMENT_ROW] = min(on_truth.values())
    return {"truth": truth, "seed": seed, "rounds": rounds, "avg_jct_h": rows}


def bars(truth: str, cells: list[dict[str, Any]], rounds: int) -> dict[str, bool]:
    """The issue's bars on a scenario's seeds (means over seeds of the per-seed ratios). In every scenario: no
    challenger the gate promoted was worse under the truth than the policy it replaced (beyond 1%: noise), and
    the cluster ends faster than with its jobs at their asked sizes. With a shift: 10% below the champion, below
    every heuristic a deployment has, within 10% of the heuristics reading the truth; and 10% below the champion
    placing with `isolate-strict` (what adapting adds beyond the placement). Without (the control): no worse than
    the champion, either way placed."""
    final = f"after round {rounds}"

    def ratio(row: str) -> float:
        return float(np.mean([c["avg_jct_h"][final] / c["avg_jct_h"][row] for c in cells]))

    refused = all(
        r["promoted"] is None or r["outcome_vs_active"][r["promoted"]] <= 0.01 for c in cells for r in c["rounds"]
    )
    common = {
        "no promoted challenger worse (1%)": refused,
        "faster than the asked sizes": all(c["avg_jct_h"][final] < c["avg_jct_h"]["asked-sizes"] for c in cells),
    }
    if truth == "catalogue":
        return {
            "no worse than the champion (1%)": ratio(CHAMPION_ROW) <= 1.01,
            "no worse than the champion placing with isolate-strict (1%)": ratio(CHAMPION_ISOLATED_ROW) <= 1.01,
            **common,
        }
    heuristics = [
        row for row in cells[0]["avg_jct_h"] if row.removesuffix(ISOLATED_SUFFIX) in BASELINES or row == CALIBRATED_ROW
    ]
    return {
        "10% below the champion": ratio(CHAMPION_ROW) <= 0.9,
        "10% below the champion placing with isolate-strict": ratio(CHAMPION_ISOLATED_ROW) <= 0.9,
        "below every heuristic a deployment has": all(ratio(row) < 1 for row in heuristics),
        f"within 10% of the {TRUTH_HEURISTICS_ROW}": ratio(TRUTH_HEURISTICS_ROW) <= 1.1,
        f"within 10% of the {TRUTH_HEURISTICS_ANY_PLACEMENT_ROW}": ratio(TRUTH_HEURISTICS_ANY_PLACEMENT_ROW) <= 1.1,
        **common,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--truths", default=",".join(SCENARIOS), help="scenarios or seed-N, comma-separated")
    parser.add_argument("--seeds", default="9100,9101,9102", help="workload and simulation seeds")
    parser.add_argument("--rounds", type=int, default=2, help="loop rounds (a week of records each)")
    parser.add_argument("--jobs", type=int, default=150, help="first N jobs of each week")
    parser.add_argument("--nodes", type=int, default=12, help="first N servers of the cluster")
    parser.add_argument("--candidates", default="rewarm", help="what learns in the twin: rewarm, rl (comma-separated)")
    parser.add_argument(
        "--twin-workloads", type=int, default=6, help="the twin's workloads the gate compares on, a batch"
    )
    parser.add_argument(
        "--twin-max-workloads",
        type=int,
        default=6,
        help="the most the gate compares on: batches are added while its interval straddles zero with the "
        "challenger ahead (at --twin-workloads, the default: a fixed-size gate)",
    )
    parser.add_argument(
        "--twin-placers",
        default=DEFAULT_TWIN_PLACERS,
        help="placements the twin tries beside the active policy's (comma-separated; '': its placement is held "
        "and only the allocation is re-learned)",
    )
    parser.add_argument(
        "--twin-lookahead",
        default="",
        help="heuristics each challenger looks ahead with (comma-separated, e.g. optimus,speedup-hull; "
        "dl2.rl.lookahead): the twin judges it, and the week is played, inside them ('': none)",
    )
    parser.add_argument("--rewarm-episodes", type=int, default=6, help="rewarm: workloads the teacher is recorded on")
    parser.add_argument("--rewarm-dagger-rounds", type=int, default=1)
    parser.add_argument("--rewarm-epochs", type=int, default=6)
    parser.add_argument("--iterations", type=int, default=10, help="rl: iterations in the twin")
    parser.add_argument("--episodes", type=int, default=2, help="rl: training episodes per iteration")
    parser.add_argument("--validation-episodes", type=int, default=2, help="rl: twin workloads validated on")
    parser.add_argument("--validate-every", type=int, default=2)
    parser.add_argument("--episode-slots", type=int, default=3_000)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--value-warmup", type=int, default=2)
    parser.add_argument(
        "--explore",
        type=float,
        default=0.0,
        help="canary exploration while a week is logged (dl2.schedulers.exploring: the probability a job of the "
        "scope has its worker count moved by one); above 0, each challenger is also estimated off-policy from the log",
    )
    parser.add_argument("--explore-fraction", type=float, default=0.5, help="share of the jobs in the scope")
    parser.add_argument("--workers", type=int, default=2, help="rollout processes")
    parser.add_argument(
        "--out", help="file name under benchmarks/results/ (default: loop_scenarios.json; with --tables-of: none)"
    )
    parser.add_argument(
        "--tables-of",
        metavar="JSON",
        nargs="+",
        help="print the tables of earlier runs' files (their seeds pooled), run no loop (rows later versions add, the "
        "champion placing with isolate-strict, are simulated for files that lack them); --out writes them as one",
    )
    args = parser.parse_args()
    if args.tables_of:
        earlier, arguments = pooled([Path(name) for name in args.tables_of])
        add_champion_isolated(earlier["cells"], arguments)
        report(earlier, argparse.Namespace(**{**arguments, "out": args.out}))
        return
    args.out = args.out or "loop_scenarios.json"
    truths, seeds = args.truths.split(","), [int(seed) for seed in args.seeds.split(",")]
    results: dict[str, Any] = {"environment": environment(), "arguments": vars(args), "cells": [], "scenarios": {}}
    with tempfile.TemporaryDirectory(prefix="dl2-loop-") as scratch:
        for truth in truths:
            for seed in seeds:
                results["cells"].append(run_loop(truth, seed, args, Path(scratch)))
                write_json(args.out, results)
    report(results, args)


def pooled(files: list[Path]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The cells of earlier runs as one result, and their arguments (the seeds joined). Runs made with different
    settings besides their seeds cannot be pooled: SystemExit naming the file and the setting."""
    documents = [json.loads(path.read_text()) for path in files]
    for document in documents:  # runs that predate --twin-placers tried the library's default placements
        if document["arguments"].get("twin_placers") is None:
            document["arguments"]["twin_placers"] = DEFAULT_TWIN_PLACERS
    first = documents[0]["arguments"]
    for path, document in zip(files[1:], documents[1:], strict=True):
        for key, value in document["arguments"].items():
            if key not in ("seeds", "truths", "out", "tables_of", "workers") and first.get(key) != value:
                raise SystemExit(f"{path}: arguments.{key} is {value!r}, {files[0]} ran with {first.get(key)!r}")
    cells = [cell for document in documents for cell in document["cells"]]
    seeds = ",".join(dict.fromkeys(str(cell["seed"]) for cell in cells))
    return {**documents[0], "cells": cells}, {**first, "seeds": seeds}


def add_champion_isolated(cells: list[dict[str, Any]], arguments: dict[str, Any]) -> None:
    """The champion placing with `isolate-strict`, for the cells of runs that predate that row (one simulation
    each, as `run_loop` makes it)."""
    for cell in cells:
        if CHAMPION_ISOLATED_ROW not in cell["avg_jct_h"]:
            cell["avg_jct_h"][CHAMPION_ISOLATED_ROW] = play(cell["truth"], cell["seed"], arguments["jobs"],
                                                            arguments["nodes"], CHAMPION, placer=ISOLATED)  # fmt: skip


def twin_call(
    log: Path, world: Any, challenger: str, active: str, active_h: dict[int, float], args: argparse.Namespace
) -> dict[str, float]:
    """The gate's paired call in the twin: `challenger` against `active` on the twin's workloads, batches added
    while undecided; `active_h` keeps the active policy's hours per workload across its challengers."""
    challenger_builder = scheduler_builder(challenger, None, Mode.REALISTIC)
    active_builder = scheduler_builder(active, None, Mode.REALISTIC)

    def pair(index: int) -> tuple[float, float]:
        if index not in active_h:
            active_h[index] = twin_jct_h(log, world, active_builder, world.speed, index)
        return twin_jct_h(log, world, challenger_builder, world.speed, index), active_h[index]

    return sequential_difference(pair, args.twin_workloads, args.twin_max_workloads)


def off_policy_call(log: Path, world: Any, challenger: str, active: str) -> dict[str, float]:
    """`challenger` against `active` off-policy on the whole log (`dl2.rl.off_policy`: doubly robust over the
    propensities the exploration logged; the reward model's speeds are the twin's)."""
    build = scheduler_builder(challenger, None, Mode.REALISTIC), scheduler_builder(active, None, Mode.REALISTIC)
    records = read_log(log)
    estimate = off_policy_difference(
        records, read_cluster(log / CLUSTER_FILE), build[0](catalogue_speed(), False),
        build[1](catalogue_speed(), False), world.speed,
    )  # fmt: skip
    return {"difference": estimate.difference, "low": estimate.low, "high": estimate.high,
            "direct_difference": estimate.direct_difference, "matched": estimate.matched}  # fmt: skip


def gate_summary(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """How the gate's calls (the twin's paired interval) fared against the outcomes under the truth: counts of
    promoted and refused challengers that turned out better or worse than the active policy (beyond 1%), how often
    the predicted and the real difference had the same sign, and the prediction's mean absolute and signed error."""
    calls = [
        (r["twin_prediction"][name]["mean"], r["outcome_vs_active"][name], r["promoted"] == name)
        for c in cells
        for r in c["rounds"]
        for name in r["twin_prediction"]
    ]
    errors = np.array([predicted - outcome for predicted, outcome, _ in calls])
    return {
        "challengers": len(calls),
        "promoted": sum(promoted for _, _, promoted in calls),
        "promoted_better": sum(promoted and outcome < -0.01 for _, outcome, promoted in calls),
        "promoted_worse": sum(promoted and outcome > 0.01 for _, outcome, promoted in calls),
        "refused_better": sum(not promoted and outcome < -0.01 for _, outcome, promoted in calls),
        "refused_not_better": sum(not promoted and outcome >= -0.01 for _, outcome, promoted in calls),
        "sign_agreement": float(np.mean([np.sign(p) == np.sign(o) for p, o, _ in calls])),
        "mean_abs_error": float(np.abs(errors).mean()),
        "mean_error": float(errors.mean()),
    }


def _row_order(row: str) -> tuple[int, str]:
    """The champion, the rounds, the heuristics as BASELINES lists them, the calibrated row, the truth's rows."""
    if row in (CHAMPION_ROW, CHAMPION_ISOLATED_ROW):
        return 0, row
    if row.startswith("after round"):
        return 1, row
    if row in BASELINES:
        return 2, f"{BASELINES.index(row):02d}"
    if row.removesuffix(ISOLATED_SUFFIX) in BASELINES:
        return 3, f"{BASELINES.index(row.removesuffix(ISOLATED_SUFFIX)):02d}"
    return (4, "") if row == CALIBRATED_ROW else (5, row)


def report(results: dict[str, Any], args: argparse.Namespace) -> None:
    """The scenario, gate and bars tables of `results`, the scenarios' summaries added, and the file rewritten."""
    truths = list(dict.fromkeys(c["truth"] for c in results["cells"]))
    results["scenarios"] = {}
    table, gate = [], []
    for truth in truths:
        cells = [c for c in results["cells"] if c["truth"] == truth]
        rows: dict[str, Any] = {}
        for row in sorted(cells[0]["avg_jct_h"], key=_row_order):
            values = [c["avg_jct_h"][row] for c in cells]
            mean, half = mean_ci95(values)
            # Seeds are different weeks: the absolute JCTs vary far more between them than the ratios within one.
            vs_truth, vs_truth_half = mean_ci95(
                [c["avg_jct_h"][row] / c["avg_jct_h"][TRUTH_HEURISTICS_ROW] - 1 for c in cells]
            )
            vs_champion, vs_champion_half = mean_ci95(
                [c["avg_jct_h"][row] / c["avg_jct_h"][CHAMPION_ROW] - 1 for c in cells]
            )
            rows[row] = {
                "per_seed_h": values,
                "mean_h": mean,
                "ci95_h": half,
                "vs_truth_heuristics": vs_truth,
                "vs_truth_heuristics_ci95": vs_truth_half,
                "vs_champion": vs_champion,
                "vs_champion_ci95": vs_champion_half,
            }
            table.append([truth, row, f"{mean:.3f} ± {half:.3f}", f"{vs_champion:+.1%} ± {vs_champion_half:.1%}",
                          f"{vs_truth:+.1%} ± {vs_truth_half:.1%}"])  # fmt: skip
        results["scenarios"][truth] = {"rows": rows, "bars": bars(truth, cells, args.rounds)}
        for cell in cells:
            for r in cell["rounds"]:
                for name, difference in r["twin_prediction"].items():
                    # a run of the fixed-size gate did not record its workloads: they were --twin-workloads
                    workloads = int(difference.get("workloads", args.twin_workloads))
                    off = r.get("off_policy", {}).get(name)  # runs without --explore have none
                    off_text = f"{off['difference']:+.1%} [{off['low']:+.1%}, {off['high']:+.1%}]" if off else ""
                    gate.append([truth, str(cell["seed"]), str(r["round"]), name, str(workloads),
                                 f"{difference['mean']:+.1%}", f"[{difference['low']:+.1%}, {difference['high']:+.1%}]",
                                 off_text,
                                 f"{r['outcome_vs_active'][name]:+.1%}",
                                 "yes" if r["promoted"] == name else "no"])  # fmt: skip
    print_table(
        f"average JCT (h) under the truth, synthetic-philly's first {args.jobs} jobs on {args.nodes} servers, "
        f"seeds {args.seeds}",
        ["truth", "scheduler", "avg JCT (h), 95% CI", "vs champion, 95% CI", f"vs {TRUTH_HEURISTICS_ROW}, 95% CI"],
        table,
    )
    print_table(
        "the gate: the twin's prediction (paired workloads, added while undecided) against the outcome under the truth",
        [
            "truth",
            "seed",
            "round",
            "challenger",
            "workloads",
            "twin: vs active",
            "interval",
            "off-policy: progress vs active",
            "truth: vs active",
            "promoted",
        ],
        gate,
    )
    results["gate"] = gate_summary(results["cells"])
    print_table(
        "the gate's calls against the outcomes (better or worse: beyond 1% under the truth)",
        ["challengers", "promoted", "promoted, better", "promoted, worse", "refused, better", "refused, not better",
         "sign agreed", "mean |prediction - outcome|", "prediction - outcome"],
        [[str(v) if isinstance(v, int) else f"{v:+.1%}" if k == "mean_error" else f"{v:.1%}"
          for k, v in results["gate"].items()]],
    )  # fmt: skip
    print_table(
        f"the bars after {args.rounds} rounds (means over seeds)",
        ["truth", "bar", "met"],
        [[t, bar, "yes" if ok else "no"] for t, s in results["scenarios"].items() for bar, ok in s["bars"].items()],
    )
    if args.out:
        print(f"wrote {write_json(args.out, results)}")


if __name__ == "__main__":
    main()
