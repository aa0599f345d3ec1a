"""Ablations of DL2's RL components (DL2 §6.5, Table 2) in the authors' contended setting, over several seeds.

Each variant (full; without job-aware exploration; without experience replay; without the value network, i.e. the
batch mean as baseline) is fine-tuned with `dl2 train-rl` from the shipped warm-up `models/dl2-compat-small` for
the same budget and seed set, and its policy after the last iteration (`--keep last`: the best-validated
checkpoint would often be the warm-up itself and hide what each component does) runs greedily on the authors'
10 small test workloads, which no training or selection touched. Per variant: the mean over seeds of each run's
average JCT with a 95% confidence interval (Student t over seeds), its ratio to `full` and to the warm-up.

    .venv/bin/python benchmarks/ablation.py [--seeds 0,1,2,3,4] [--iterations 10] [--episodes 4] [--jobs 2]

Prints a table and writes `benchmarks/results/ablation.json` (and keeps every trained model under `--keep-dir`
when given). With the defaults: 20 trainings of 40 episodes each, about 30 minutes on two cores.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import environment, print_table, write_json
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
TEST = ["--workload", "dl2-official-small", "--mode", "compat"]


def dl2(*arguments: str) -> str:
    command = [sys.executable, "-m", "dl2.cli.main", *arguments]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"dl2 {' '.join(arguments)} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def train(out: Path, variant: str, seed: int, args: argparse.Namespace) -> Path:
    dl2(
        *("train-rl", "--init", str(args.model), "--mode", "compat", "--source", "authors-small"),
        *("--iterations", str(args.iterations), "--episodes-per-iteration", str(args.episodes)),
        *("--workers", "0", "--seed", str(seed), "--keep", "last"),
        # one validation workload: the saved policy is the last one, validation only draws the learning curve
        *("--validation-seeds", "5000", "--validate-every", str(args.iterations)),
        *VARIANTS[variant],
        *("--out", str(out)),
    )
    return out


def evaluate(models: list[Path], baselines: str) -> dict[str, float]:
    """Average JCT (slots) over the test workloads per model folder name (and per baseline)."""
    flags = [flag for model in models for flag in ("--model", str(model))]
    report = json.loads(dl2("evaluate", *flags, *TEST, "--baselines", baselines, "--json"))
    return {name.removesuffix(" (greedy)"): row["avg_jct_slots"] for name, row in report["schedulers"].items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=WARM_UP, help="the warm-up every variant starts from")
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--episodes", type=int, default=4, help="episodes per iteration")
    parser.add_argument("--variants", default=",".join(VARIANTS))
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
        # evaluation split over the same number of processes (each model runs the 10 test workloads)
        groups = [[out for _, _, out in runs[k :: args.jobs]] for k in range(args.jobs)]
        groups[0].append(args.model)
        with ThreadPoolExecutor(args.jobs) as pool:
            parts = list(pool.map(evaluate, groups, ["drf,optimus", *[""] * (args.jobs - 1)]))
        scores = {name: value for part in parts for name, value in part.items()}
    warm = scores[args.model.name]
    rows, table = {}, []
    for variant in variants:
        values = [scores[f"{variant}-seed{seed}"] for seed in seeds]
        mean, half = mean_ci95(values)
        rows[variant] = {"seeds": dict(zip(map(str, seeds), values, strict=True)), "mean": mean, "ci95": half}
    full = rows.get("full", {}).get("mean")
    for variant, row in rows.items():
        row["vs_full"] = row["mean"] / full if full else None
        row["vs_warm_up"] = row["mean"] / warm
        table.append(
            [
                variant,
                str(len(seeds)),
                f"{row['mean']:.2f}",
                f"±{row['ci95']:.2f}",
                f"{row['vs_full']:.3f}" if row["vs_full"] else "",
                f"{row['vs_warm_up']:.3f}",
                " ".join(f"{v:.2f}" for v in row["seeds"].values()),
            ]
        )
    table.append(["warm-up (start)", "", f"{warm:.2f}", "", "", "1.000", ""])
    for name in ("drf", "optimus"):
        table.append([name, "", f"{scores[name]:.2f}", "", "", f"{scores[name] / warm:.3f}", ""])
    print_table(
        f"RL ablations from {args.model.name}: {args.iterations} iterations x {args.episodes} episodes per seed; "
        "avg JCT (slots), authors' 10 small test workloads (compat)",
        ["variant", "seeds", "avg JCT", "95% CI", "vs full", "vs warm-up", "per seed"],
        table,
    )
    payload = {
        "environment": environment(),
        "warm_up": str(args.model.relative_to(ROOT) if args.model.is_relative_to(ROOT) else args.model),
        "iterations": args.iterations,
        "episodes_per_iteration": args.episodes,
        "seeds": seeds,
        "unit": "slots",
        "variants": rows,
        "warm_up_avg_jct": warm,
        "baselines": {name: scores[name] for name in ("drf", "optimus")},
    }
    print(f"wrote {write_json('ablation.json', payload)}")


if __name__ == "__main__":
    main()
