"""A contended Philly-like cluster of three GPU generations under a truth whose per-type speeds the
catalogue gets wrong: the type-agnostic heuristics, `gavel` reading the catalogue's profile on each type, and
`gavel` reading the truth.

The workloads are Philly-like (`synthetic-philly`, seeds 9100-9102, the first `--jobs` jobs on the first `--nodes`
servers, as `benchmarks/truth_scenarios.py` takes them), their servers made K80, P100 and V100 a third each
(`dl2.workload.accelerators.with_generations`, interleaved so the first servers mix as the whole would), played in
realistic mode under `--truth` (default `accelerator-affinity`: the language models gain far more from a V100 than
the catalogue says, the CNNs less; `dl2.truth.scenarios`), the simulation seeded like the workload. Rows: DRF,
Tiresias and Optimus handed the catalogue's speeds (placed by load-balance, which reads the nodes' types through
the catalogue's profile); `gavel (catalogue)`, Gavel's heterogeneity-aware max-min fairness reading the
catalogue's per-type throughputs (what a deployment knows on day one); `gavel (reading the truth)`, the same policy
handed the truth's speed model (`dl2.truth.run.run_on`'s `oracle`): a ceiling for what gavel gains from knowing
the per-type speeds, which no deployment has. Then the same allocation policies placed alike, with
`isolate-strict` (type-aware as every placer is: `dl2.schedulers.placement._Typed`): Optimus, and the search dl2
ships (`lookahead:optimus+speedup-hull`, two slots then sparse x8) looking ahead in four worlds: the catalogue's;
the one calibrated per (model, accelerator type) from the decision records of the cluster's previous week (the
workload of seed + 500 on the same mixed cluster under the same truth, DRF deciding, as a shadow-mode controller
records it; `dl2.workload.calibration`, as `benchmarks/accelerator_calibration.py` checks it), also corrected per
job and per server as the jobs progress (`lookahead-fitted:`, `dl2.rl.fitted_lookahead`); the loop's second round,
that fitted search in the world calibrated from the shadow week's records and those of a week it decided itself
(the workload of seed + 1000, active); and the truth's own
(speeds, interference and the jobs' true types), which no deployment has. Reported: mean average JCT over the
seeds with a 95% confidence interval (Student t); each row against `gavel (catalogue)` on the same seed (the mean of
the per-seed ratios, less 1, with its 95% interval: the seeds' loads differ more than the rows do); and the share
of the V100 worker-slots that went to the language models (wlm, seq2seq).

    .venv/bin/python benchmarks/heterogeneous_generations.py [--jobs 300 --nodes 24 --seeds 9100,9101,9102]

Prints a table and writes `benchmarks/results/heterogeneous_generations.json` (`--out`). With `--truth catalogue`
(the control: no per-type departure) the two gavel rows are the same run.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from collections import Counter
from typing import Any

from common import report
from truth_scenarios import calibrated_speed, mixed_philly, previous_week, week_records

from dl2.core import Allocation, ClusterView, Scheduler
from dl2.rl.fitted_lookahead import make_fitted_lookahead
from dl2.rl.lookahead import SPARSE_GROWTH, make_lookahead
from dl2.schedulers.registry import PLACERS, make_scheduler
from dl2.sim.config import SimConfig
from dl2.sim.metrics import mean_ci95
from dl2.sim.run import World, catalogue_speed, interference_model
from dl2.truth import realise, truth_named
from dl2.truth.run import run_on
from dl2.workload.calibration import CalibratedSpeedModel, calibrate
from dl2.workload.interference import InterferenceModel
from dl2.workload.speed import SpeedModel

SEARCH_CATALOGUE = "search, catalogue, isolate-strict"
SEARCH_CALIBRATED = "search, calibrated from the previous week, isolate-strict"
SEARCH_FITTED = "search, calibrated and fitted per job and server, isolate-strict"
SEARCH_TWO_WEEKS = "search, calibrated from two weeks (the second its own), fitted, isolate-strict"
"""The loop's second round: the world calibrated from the shadow week's records and those of a week the fitted
search of the first round decided (active), fitted per job and server as the jobs progress."""
SEARCH_TRUTH = "search reading the truth, isolate-strict"
READS_THE_TRUTH = ("gavel (reading the truth)", SEARCH_TRUTH)
ROWS = (
    "drf", "tiresias", "optimus", "gavel (catalogue)", "gavel (reading the truth)", "optimus, isolate-strict",
    SEARCH_CATALOGUE, SEARCH_CALIBRATED, SEARCH_FITTED, SEARCH_TWO_WEEKS, SEARCH_TRUTH,
)  # fmt: skip
BASELINE = "gavel (catalogue)"
LANGUAGE_MODELS = frozenset({"wlm", "seq2seq"})


class V100Share:
    """Wraps a scheduler; counts the worker-slots on V100 servers, and those of language-model jobs."""

    def __init__(self, inner: Scheduler, v100_nodes: frozenset[int], models: dict[str, str]) -> None:
        self.inner, self.name = inner, inner.name
        self.v100_nodes, self.models = v100_nodes, models
        self.slots = 0
        self.language = 0

    def reset(self) -> None:
        self.inner.reset()

    def schedule(self, view: ClusterView) -> Allocation:
        allocation = self.inner.schedule(view)
        for job_id, held in allocation.jobs.items():
            on_v100 = sum(node in self.v100_nodes for node in held.worker_nodes)
            self.slots += on_v100
            self.language += on_v100 if self.models[job_id] in LANGUAGE_MODELS else 0
        return allocation


def scheduler_of(row: str, speed: SpeedModel, compat: bool, interference: InterferenceModel) -> Scheduler:
    """The row's scheduler reading `speed` (a search looks ahead in `speed`'s world with `interference`)."""
    if not row.startswith("search"):
        placer = PLACERS["isolate-strict"]() if row.endswith("isolate-strict") else "load-balance"
        return make_scheduler(row.split(" ")[0].rstrip(","), speed, compat, placer)
    world = World(speed, interference)
    if row in (SEARCH_FITTED, SEARCH_TWO_WEEKS):
        return make_fitted_lookahead(
            "lookahead-fitted:optimus+speedup-hull", world, SimConfig.realistic(), "isolate-strict", 2, "sparse",
            SPARSE_GROWTH,
        )  # fmt: skip
    build = lambda name: make_scheduler(name, speed, False, PLACERS["isolate-strict"]())  # noqa: E731
    return make_lookahead(
        "lookahead:optimus+speedup-hull", build, world, SimConfig.realistic(), 2, "sparse", SPARSE_GROWTH
    )


def two_weeks_speed(truth_name: str, seed: int, num_jobs: int, num_nodes: int) -> SpeedModel:
    """The loop's second round: the previous week's shadow records (DRF deciding) and those of the week before the
    test one (the workload of seed + 1000) decided by the first round's fitted search in the world the shadow
    week calibrated, calibrated together."""
    first = calibrated_speed(truth_name, seed, num_jobs, num_nodes, mixed_philly)
    _, shadow = previous_week(truth_name, seed, num_jobs, num_nodes, mixed_philly)
    search = scheduler_of(SEARCH_FITTED, first, False, interference_model())
    _, active = week_records(truth_name, seed + 1000, num_jobs, num_nodes, mixed_philly, search)
    return CalibratedSpeedModel(
        catalogue_speed(), calibrate(shadow + active, catalogue_speed(), InterferenceModel(), True)
    )


def run_cell(task: tuple[str, int, int, int, str]) -> tuple[str, int, dict[str, float]]:
    truth_name, seed, num_jobs, num_nodes, row = task
    cluster = realise(truth_named(truth_name), mixed_philly(seed, num_jobs, num_nodes))
    calibrated: SpeedModel | None = None
    if row in (SEARCH_CALIBRATED, SEARCH_FITTED):
        calibrated = calibrated_speed(truth_name, seed, num_jobs, num_nodes, mixed_philly)
    elif row == SEARCH_TWO_WEEKS:
        calibrated = two_weeks_speed(truth_name, seed, num_jobs, num_nodes)
    interference = cluster.interference if row == SEARCH_TRUTH else interference_model()
    v100 = frozenset(
        node.node_id
        for node in cluster.workload.cluster.nodes
        if node.accelerator is not None and node.accelerator.name == "V100"
    )
    models = {job.spec.job_id: cluster.type_of(job.spec) for job in cluster.workload.jobs}
    wrappers: list[V100Share] = []

    def build(speed: SpeedModel, compat: bool) -> Scheduler:
        wrappers.append(V100Share(scheduler_of(row, calibrated or speed, compat, interference), v100, models))
        return wrappers[-1]

    started = time.perf_counter()
    result = run_on(cluster, build, SimConfig.realistic(seed=seed), oracle=row in READS_THE_TRUTH)
    jcts = [job.jct_s for job in result.jobs]
    share = wrappers[-1].language / max(wrappers[-1].slots, 1)
    cell = {"average_jct_h": sum(jcts) / len(jcts) / 3600, "v100_language_share": share, "seed": seed}
    return row, seed, cell | {"wall_s": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--truth", default="accelerator-affinity", help="a truth's name (dl2.truth)")
    parser.add_argument("--jobs", type=int, default=300, help="first N jobs of each workload")
    parser.add_argument("--nodes", type=int, default=24, help="first N servers (8 GPUs each)")
    parser.add_argument("--seeds", default="9100,9101,9102", help="workload and simulation seeds")
    parser.add_argument("--workers", type=int, default=1, help="processes")
    parser.add_argument("--out", default="heterogeneous_generations.json", help="file name under benchmarks/results/")
    args = parser.parse_args()
    seeds = [int(seed) for seed in args.seeds.split(",")]
    tasks = [(args.truth, seed, args.jobs, args.nodes, row) for seed in seeds for row in ROWS]
    runs: dict[str, list[dict[str, float]]] = {row: [] for row in ROWS}
    with multiprocessing.Pool(args.workers) as pool:
        for row, seed, cell in pool.imap(run_cell, tasks):
            runs[row].append(cell)
            print(f"seed {seed} {row}: {cell}", flush=True)
    mix = Counter(node.kind for node in mixed_philly(seeds[0], args.jobs, args.nodes).cluster.nodes)
    summary: dict[str, Any] = {}
    table = []
    by_seed = {row: sorted(runs[row], key=lambda r: r["seed"]) for row in ROWS}
    for row in ROWS:
        mean, half = mean_ci95([r["average_jct_h"] for r in runs[row]])
        ratios = [
            r["average_jct_h"] / base["average_jct_h"] - 1
            for r, base in zip(by_seed[row], by_seed[BASELINE], strict=True)
        ]
        paired, paired_half = mean_ci95(ratios)
        share = sum(r["v100_language_share"] for r in runs[row]) / len(runs[row])
        summary[row] = {
            "average_jct_h": mean,
            "ci95_h": half,
            "against_gavel_catalogue": paired,
            "against_gavel_catalogue_ci95": paired_half,
            "v100_language_share": share,
            "runs": runs[row],
        }
        table.append(
            [row, f"{mean:.2f} ± {half:.2f}", f"{100 * paired:+.1f}% ± {100 * paired_half:.1f}", f"{100 * share:.0f}%"]
        )
    title = (
        f"synthetic-philly, first {args.jobs} jobs on the first {args.nodes} servers ({dict(mix)}), "
        f"truth {args.truth}, seeds {seeds}"
    )
    columns = ["scheduler", "average JCT (h)", "vs gavel (catalogue), paired", "V100 worker-slots to language models"]
    settings = {"truth": args.truth, "jobs": args.jobs, "nodes": args.nodes, "seeds": seeds, "node_types": dict(mix)}
    report(args.out, title, columns, table, summary, **settings)


if __name__ == "__main__":
    main()
