"""Unseen job types (DL2 §6.4): a policy warmed up without two job types, then fine-tuned online on the full mix.

1. Warm-up: `dl2 train-sl` imitating `srpt-knee-fill` on the authors' small setting with the held-out types left
   out of every training workload (`authors-small:without=...`), with the shipped `dl2-compat-small`'s parameters
   otherwise (skipped when `--warm-up` already holds a model).
2. Online RL: `dl2 train-rl` from that warm-up on the full mix (all eight types), one run per seed; the policy
   kept is the best on the validation workloads (authors' generator, seeds 5000-5004, full mix), as a deployment
   would keep it.
3. Test: every policy greedily on the authors' 10 small test workloads (never used for training or selection):
   average JCT of all jobs, of the held-out types' jobs and of the others (pooled over the 10 workloads), next to
   the shipped warm-up that saw every type and to the teacher.

    .venv/bin/python benchmarks/unseen_types.py [--without seq2seq+dssm] [--seeds 0,1,2] [--iterations 10] [--jobs 2]

Prints a table and writes `benchmarks/results/unseen_types.json`; models are kept under `work/unseen/`. The same
experiment with `dl2-compat-hull`'s recipe (teacher `speedup-hull-marginal`, packed requests) and perturbation
credit:

    .venv/bin/python benchmarks/unseen_types.py --teacher speedup-hull-marginal --packed \
        --full-warm-up models/dl2-compat-hull --warm-up work/unseen-hull/warm-up-6types --credit perturbation \
        --seeds 0,1,2 --iterations 6 --validate-every 2 --rl-workers 1 --jobs 2 --learning-rate 3e-4 \
        --reference speedup-hull --json unseen_types_hull.json

(`--credit returns --seeds 0 --json unseen_types_hull_returns.json` gives DL2's own credit beside it; `--reuse`
evaluates RL runs already trained instead of training them again.)
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common import dl2, environment, print_table, project_path, write_json
from tqdm import tqdm

from dl2.sim.metrics import mean_ci95

ROOT = Path(__file__).resolve().parent.parent
FULL_WARM_UP = ROOT / "models" / "dl2-compat-small"
TEST_WORKLOADS = "dl2-official-small"
SLOT_S = 1200.0
"""The authors' slot (compat mode reports JCTs in slots)."""
WARM_UP_ARGUMENTS = (
    *("--mode", "compat", "--episodes", "8", "--record-every", "2"),
    *("--dagger-rounds", "2", "--dagger-episodes", "4", "--window", "40", "--hidden", "64,64"),
    *("--network", "per-job-local", "--epochs", "6", "--seed", "0"),
)
"""The shipped warm-ups' parameters (models/dl2-compat-small/MODEL_CARD.md), teacher and source aside."""


def warm_up(out: Path, without: str, args: argparse.Namespace) -> None:
    packed = ("--packed",) if args.packed else ()
    source = f"authors-small:without={without}"
    dl2("train-sl", "--teacher", args.teacher, *packed, *WARM_UP_ARGUMENTS, "--source", source, "--out", str(out))


def fine_tune(init: Path, out: Path, seed: int, args: argparse.Namespace) -> Path:
    dl2(
        *("train-rl", "--init", str(init), "--mode", "compat", "--source", "authors-small"),
        *("--iterations", str(args.iterations), "--episodes-per-iteration", str(args.episodes)),
        *("--workers", str(args.rl_workers), "--seed", str(seed), "--keep", "best", "--credit", args.credit),
        *("--learning-rate", str(args.learning_rate), "--entropy-weight", str(args.entropy_weight)),
        *("--validation-seeds", "5000,5001,5002,5003,5004", "--validate-every", str(args.validate_every)),
        *("--out", str(out), "--overwrite"),
    )
    return out


def test_jcts(policy: str, held_out: tuple[str, ...]) -> dict[str, Any]:
    """Average JCT (slots) on the test workloads: of all jobs (the mean of the workloads' averages, as every
    table here reports it), and pooled over the held-out types' jobs and over the others. A policy that starves
    a job (no progress for the simulator's stall limit) gets None and the simulator's message under 'starves'."""
    from dl2.rl.learned import LearnedScheduler
    from dl2.schedulers.registry import make_scheduler
    from dl2.sim.config import SimConfig
    from dl2.sim.run import run_one
    from dl2.sim.simulator import SimulationError
    from dl2.workload.registry import load_workloads

    def build(speed, compat):  # type: ignore[no-untyped-def]
        if Path(policy).is_dir():
            return LearnedScheduler.from_dir(Path(policy), compat=compat)
        return make_scheduler(policy, speed, compat)

    averages, unseen, seen = [], [], []
    for workload in load_workloads(TEST_WORKLOADS):
        try:
            result = run_one(workload, build, SimConfig.compat())
        except SimulationError as error:
            return {"all": None, "held_out_types": None, "other_types": None, "starves": str(error)}
        jcts = [(job.model, job.jct_s / SLOT_S) for job in result.jobs]
        averages.append(sum(jct for _, jct in jcts) / len(jcts))
        unseen += [jct for model, jct in jcts if model in held_out]
        seen += [jct for model, jct in jcts if model not in held_out]
    return {
        "all": sum(averages) / len(averages),
        "held_out_types": sum(unseen) / len(unseen),
        "other_types": sum(seen) / len(seen),
        "held_out_jobs": len(unseen),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--without", default="seq2seq+dssm", help="held-out job types, joined by '+'")
    parser.add_argument("--warm-up", type=Path, default=ROOT / "work" / "unseen" / "warm-up-6types")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--episodes", type=int, default=4, help="episodes per iteration")
    parser.add_argument("--validate-every", type=int, default=5)
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    parser.add_argument("--entropy-weight", type=float, default=0.001)
    parser.add_argument("--jobs", type=int, default=2, help="trainings run at once (one core each)")
    parser.add_argument("--teacher", default="srpt-knee-fill")
    parser.add_argument("--packed", action="store_true", help="warm up with packed requests")
    parser.add_argument("--full-warm-up", type=Path, default=FULL_WARM_UP, help="the same recipe with every type")
    parser.add_argument("--credit", choices=["returns", "perturbation"], default="returns")
    parser.add_argument("--rl-workers", type=int, default=0, help="rollout processes per RL run")
    parser.add_argument("--json", default="unseen_types.json", help="file name under benchmarks/results/")
    parser.add_argument("--reuse", action="store_true", help="keep RL runs already in the warm-up's folder")
    parser.add_argument(
        "--reference",
        default=None,
        help="heuristic shown beside the policies (default: the teacher; for a packed teacher, the heuristic that "
        "makes the same allocations in the authors' mechanism, e.g. speedup-hull for speedup-hull-marginal)",
    )
    args = parser.parse_args()
    held_out = tuple(args.without.split("+"))
    seeds = [int(s) for s in args.seeds.split(",")]
    if not (args.warm_up / "policy.pt").exists():
        print(f"warming up without {', '.join(held_out)} -> {args.warm_up}", file=sys.stderr)
        warm_up(args.warm_up, args.without, args)
    credit = "" if args.credit == "returns" else f"{args.credit}-"
    tuned = {seed: args.warm_up.parent / f"rl-{credit}seed{seed}" for seed in seeds}
    to_tune = {seed: out for seed, out in tuned.items() if not (out / "policy.pt").exists() or not args.reuse}
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(fine_tune, args.warm_up, out, seed, args) for seed, out in to_tune.items()]
        for future in tqdm(futures, desc="RL runs", unit="run", file=sys.stderr):
            future.result()
    reference = args.reference or args.teacher
    reference_label = f"{reference} (teacher)" if args.reference is None else f"{reference} (the teacher's allocations)"
    policies = {
        "warm-up without them": str(args.warm_up),
        **{f"+ RL on all types, seed {seed}": str(out) for seed, out in tuned.items()},
        f"warm-up with every type ({args.full_warm_up.name})": str(args.full_warm_up),
        reference_label: reference,
    }
    with ProcessPoolExecutor(args.jobs) as pool:
        results = dict(zip(policies, pool.map(test_jcts, policies.values(), [held_out] * len(policies)), strict=True))
    rl = [results[name] for name in policies if name.startswith("+ RL") and results[name]["all"] is not None]
    summary = {
        key: dict(zip(("mean", "ci95"), mean_ci95([r[key] for r in rl]), strict=True))
        for key in ("all", "held_out_types", "other_types")
    }
    rows = [
        [name, *(f"{r[key]:.2f}" if r[key] is not None else "starves a job" for key in summary)]
        for name, r in results.items()
    ]
    rows.insert(
        1 + len(rl),
        ["+ RL, mean over seeds"] + [f"{summary[k]['mean']:.2f} ±{summary[k]['ci95']:.2f}" for k in summary],
    )
    print_table(
        f"Unseen job types ({', '.join(held_out)}; {max(r.get('held_out_jobs', 0) for r in results.values())} test "
        f"jobs): avg JCT (slots) on the authors' 10 small test workloads (compat); RL {args.iterations} iterations "
        f"x {args.episodes} episodes",
        ["policy", "all jobs", "held-out types", "other types"],
        rows,
    )
    payload = {
        "environment": environment(),
        "held_out_types": list(held_out),
        "warm_up": project_path(args.warm_up),
        "teacher": args.teacher,
        "packed": args.packed,
        "rl": {
            "iterations": args.iterations,
            "episodes_per_iteration": args.episodes,
            "seeds": seeds,
            "learning_rate": args.learning_rate,
            "entropy_weight": args.entropy_weight,
            "credit": args.credit,
            "keep": "best on validation seeds 5000-5004, full mix",
        },
        "unit": "slots",
        "policies": results,
        "rl_mean": summary,
    }
    print(f"wrote {write_json(args.json, payload)}")


if __name__ == "__main__":
    main()
