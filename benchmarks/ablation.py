"""Ablations of DL2's RL components (DL2 §6.5, Table 2) in the authors' contended setting, over several seeds.

Each variant (full; without job-aware exploration; without experience replay; without the value network, i.e. the
batch mean as baseline) is fine-tuned with `dl2 train-rl` from the shipped warm-up `models/dl2-compat-small` for
the same budget and seed set, and its policy after the last iteration (`--keep last`: the best-validated
checkpoint would often be the warm-up itself and hide what each component does) runs greedily on the authors'
10 small test workloads, which no training or selection touched. Per variant: the mean over seeds of each run's
average JCT with a 95% confidence interval (Student t over seeds), its ratio to `full` and to the warm-up. A
policy that leaves jobs without tasks for 500 slots is unsafe: its seed is reported as stalled and left out of
the mean. The other RL settings are `dl2 train-rl`'s defaults, except a smaller learning rate and entropy weight
(1e-4 and 0.001, `--learning-rate`, `--entropy-weight`): the CLI's 3e-4 and 0.01 move a sharp warm-up too far.

    .venv/bin/python benchmarks/ablation.py [--seeds 0,1,2,3,4] [--iterations 10] [--episodes 4] [--jobs 2]

Prints a table and writes `benchmarks/results/ablation.json` (and keeps every trained model under `--keep-dir`
when given). With the defaults: 20 trainings of 40 episodes each, about 30 minutes on two cores.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

from common import dl2, environment, print_table, project_path, write_json
from tqdm import tqdm

from dl2.sim.metrics import mean_ci95

ROOT = Path(__file__).resolve().parent.parent
WARM_UP = ROOT / "models" / "dl2-compat-small"
VARIANTS = {
    "full": [],
    "no-exploration": ["--no-exploration"],
    "no-replay": ["--no-replay"],
    "no-value-baseline": ["--no-value-baseline"],
}
TEST_WORKLOADS = "dl2-official-small"
SLOT_S = 1200.0
"""The authors' slot (compat mode reports JCTs in slots)."""
STALL_SLOTS = 500
BASELINES = ("drf", "optimus")


def train(out: Path, variant: str, seed: int, args: argparse.Namespace) -> Path:
    dl2(
        *("train-rl", "--init", str(args.model), "--mode", "compat", "--source", "authors-small"),
        *("--iterations", str(args.iterations), "--episodes-per-iteration", str(args.episodes)),
        *("--workers", "0", "--seed", str(seed), "--keep", "last"),
        *("--learning-rate", str(args.learning_rate), "--entropy-weight", str(args.entropy_weight)),
        # one validation workload: the saved policy is the last one, validation only draws the learning curve
        *("--validation-seeds", "5000", "--validate-every", str(args.iterations)),
        *VARIANTS[variant],
        *("--out", str(out)),
    )
    return out


def evaluate(model: Path) -> float | None:
    """Average JCT (slots) of the model's greedy policy over the test workloads; None if a run stalls (a policy
    that leaves jobs without tasks for `STALL_SLOTS` slots is unsafe, as in the pipeline's evaluation)."""
    from dataclasses import replace

    from dl2.rl.learned import LearnedScheduler
    from dl2.sim.config import SimConfig
    from dl2.sim.metrics import summarize
    from dl2.sim.run import run_one
    from dl2.sim.simulator import SimulationError
    from dl2.workload.registry import load_workloads

    config = replace(SimConfig.compat(), stall_slots=STALL_SLOTS)
    averages = []
    for workload in load_workloads(TEST_WORKLOADS):
        try:
            result = run_one(workload, lambda speed, compat: LearnedScheduler.from_dir(model, compat=compat), config)
        except SimulationError:
            return None
        averages.append(summarize(result).avg_jct_s / SLOT_S)
    return sum(averages) / len(averages)


def heuristic(name: str) -> float:
    from dl2.schedulers.registry import make_scheduler
    from dl2.sim.config import SimConfig
    from dl2.sim.metrics import summarize
    from dl2.sim.run import run_one
    from dl2.workload.registry import load_workloads

    runs = [
        summarize(run_one(w, lambda speed, compat: make_scheduler(name, speed, compat), SimConfig.compat()))
        for w in load_workloads(TEST_WORKLOADS)
    ]
    return sum(r.avg_jct_s for r in runs) / len(runs) / SLOT_S


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=WARM_UP, help="the warm-up every variant starts from")
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--episodes", type=int, default=4, help="episodes per iteration")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--entropy-weight", type=float, default=0.001)
    parser.add_argument("--jobs", type=int, default=2, help="trainings run at once (one core each)")
    parser.add_argument("--keep-dir", type=Path, default=None, help="keep the trained models here")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    variants = args.variants.split(",")
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variant(s) {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep_dir or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        runs = [(variant, seed, folder / f"{variant}-seed{seed}") for variant in variants for seed in seeds]
        with ThreadPoolExecutor(args.jobs) as pool:
            futures = [pool.submit(train, out, variant, seed, args) for variant, seed, out in runs]
            for future in tqdm(futures, desc="trainings", unit="run", file=sys.stderr):
                future.result()
        with ProcessPoolExecutor(args.jobs) as pool:
            scores = dict(
                zip([out.name for _, _, out in runs], pool.map(evaluate, [o for _, _, o in runs]), strict=True)
            )
            scores[args.model.name] = evaluate(args.model)
            scores.update(zip(BASELINES, pool.map(heuristic, BASELINES), strict=True))
    warm = scores[args.model.name]
    if warm is None:
        raise SystemExit(f"{args.model}: the warm-up itself stalls on the test workloads")
    rows, table = {}, []
    for variant in variants:
        values = [scores[f"{variant}-seed{seed}"] for seed in seeds]
        safe = [v for v in values if v is not None]
        mean, half = mean_ci95(safe) if safe else (None, None)
        rows[variant] = {
            "seeds": dict(zip(map(str, seeds), values, strict=True)),
            "safe_runs": len(safe),
            "mean": mean,
            "ci95": half,
        }
    full = rows.get("full", {}).get("mean")
    for variant, row in rows.items():
        mean = row["mean"]
        row["vs_full"] = mean / full if mean is not None and full else None
        row["vs_warm_up"] = mean / warm if mean is not None else None
        table.append(
            [
                variant,
                f"{row['safe_runs']}/{len(seeds)}",
                "" if mean is None else f"{mean:.2f}",
                "" if mean is None else f"±{row['ci95']:.2f}",
                f"{row['vs_full']:.3f}" if row["vs_full"] else "",
                f"{row['vs_warm_up']:.3f}" if row["vs_warm_up"] else "",
                " ".join("stalled" if v is None else f"{v:.2f}" for v in row["seeds"].values()),
            ]
        )
    table.append(["warm-up (start)", "", f"{warm:.2f}", "", "", "1.000", ""])
    for name in BASELINES:
        table.append([name, "", f"{scores[name]:.2f}", "", "", f"{scores[name] / warm:.3f}", ""])
    print_table(
        f"RL ablations from {args.model.name}: {args.iterations} iterations x {args.episodes} episodes per seed; "
        "avg JCT (slots), authors' 10 small test workloads (compat)",
        ["variant", "safe seeds", "avg JCT", "95% CI", "vs full", "vs warm-up", "per seed"],
        table,
    )
    payload = {
        "environment": environment(),
        "warm_up": project_path(args.model),
        "iterations": args.iterations,
        "episodes_per_iteration": args.episodes,
        "seeds": seeds,
        "unit": "slots",
        "variants": rows,
        "warm_up_avg_jct": warm,
        "rl": {"learning_rate": args.learning_rate, "entropy_weight": args.entropy_weight},
        "stall_slots": STALL_SLOTS,
        "baselines": {name: scores[name] for name in BASELINES},
    }
    print(f"wrote {write_json('ablation.json', payload)}")


if __name__ == "__main__":
    main()
