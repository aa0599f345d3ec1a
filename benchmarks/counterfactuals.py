"""What one decision is worth: exact counterfactuals of single actions under a greedy policy (a diagnosis of RL).

Compatibility mode is deterministic, so the effect of one decision can be measured exactly: run the policy
greedily on a training workload, pick decisions at random, and at each replace the greedy action by each of the
policy's next-likeliest allowed actions, then let the greedy policy finish the workload. The change in the sum
of all jobs' JCTs is Q(s, a') - Q(s, greedy) for that policy, with no sampling noise. The table says how often
one action changes the outcome at all, and by how much: what a per-decision policy gradient has to find among
the ~150 decisions of a slot that share one advantage.

    .venv/bin/python benchmarks/counterfactuals.py [--model models/dl2-compat-small] [--seeds 10001,10002]
        [--points 10] [--alternatives 3]

Prints a table and writes `benchmarks/results/counterfactuals.json`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from common import environment, print_table, project_path, write_json
from tqdm import tqdm

from dl2.env.config import EnvConfig
from dl2.env.env import Dl2Env
from dl2.rl.inference import NumpyPolicy
from dl2.rl.learned import LearnedScheduler
from dl2.rl.training import sim_config
from dl2.workload.source import workload

ROOT = Path(__file__).resolve().parent.parent
SLOT_S = 1200.0


def total_jct_slots(env: Dl2Env) -> float:
    assert env.simulation is not None
    return sum(job.jct_s for job in env.simulation.result("policy").jobs) / SLOT_S


def play(env: Dl2Env, policy: NumpyPolicy, observation: np.ndarray, info: dict[str, object]) -> float:
    """Finish the episode greedily; the sum of the jobs' JCTs in slots."""
    done = False
    while not done:
        action, _ = policy.act(observation, info["action_mask"])  # type: ignore[arg-type]
        observation, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
    return total_jct_slots(env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "dl2-compat-small")
    parser.add_argument("--source", default="authors-small", help="training workloads (never the test ones)")
    parser.add_argument("--seeds", default="10001,10002", help="workload seeds (training range)")
    parser.add_argument("--points", type=int, default=10, help="decisions branched per workload")
    parser.add_argument("--alternatives", type=int, default=3, help="next-likeliest actions tried per decision")
    parser.add_argument("--seed", type=int, default=0, help="seed of the choice of decisions")
    args = parser.parse_args()
    scheduler = LearnedScheduler.from_dir(args.model, compat=True)
    policy = scheduler.policy
    env_config = EnvConfig(observation=scheduler.config.observation, sim=sim_config("compat"), max_slots=20_000)
    rng = np.random.default_rng(args.seed)
    branches: list[dict[str, object]] = []
    per_workload = []
    started = time.perf_counter()
    for seed in (int(s) for s in args.seeds.split(",")):
        source = workload(args.source, seed)

        def fresh(source=source):  # type: ignore[no-untyped-def]
            env = Dl2Env([source], env_config)
            observation, info = env.reset(seed=0)
            return env, observation, info

        env, observation, info = fresh()
        actions, observations, masks = [], [], []
        done = False
        while not done:
            action, _ = policy.act(observation, info["action_mask"])
            actions.append(action)
            observations.append(observation)
            masks.append(info["action_mask"])
            observation, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
        greedy_total = total_jct_slots(env)
        per_workload.append({"seed": seed, "decisions": len(actions), "greedy_total_jct_slots": greedy_total})
        points = sorted(rng.choice(len(actions), min(args.points, len(actions)), replace=False).tolist())
        for point in tqdm(points, desc=f"workload {seed}", unit="decision", file=sys.stderr):
            mask = masks[point]
            logits = np.where(mask > 0, policy.logits(observations[point]), -np.inf)
            probabilities = np.exp(logits - logits.max())
            probabilities /= probabilities.sum()
            greedy = int(np.argmax(logits))
            ranked = [int(a) for a in np.argsort(-logits, kind="stable") if mask[a] and a != greedy]
            for alternative in ranked[: args.alternatives]:
                env, observation, info = fresh()
                for action in actions[:point]:
                    observation, _, _, _, info = env.step(action)
                observation, _, terminated, truncated, info = env.step(alternative)
                total = total_jct_slots(env) if terminated or truncated else play(env, policy, observation, info)
                branches.append(
                    {
                        "workload_seed": seed,
                        "decision": point,
                        "greedy_probability": float(probabilities[greedy]),
                        "alternative_probability": float(probabilities[alternative]),
                        "change_total_jct_slots": total - greedy_total,
                        "relative_change": (total - greedy_total) / greedy_total,
                    }
                )
    changes = np.array([b["change_total_jct_slots"] for b in branches], dtype=float)
    relative = np.array([b["relative_change"] for b in branches], dtype=float)
    unchanged = np.abs(changes) < 1e-6
    summary = {
        "branches": len(branches),
        "no_effect": float(unchanged.mean()),
        "better": float((changes < -1e-6).mean()),
        "worse": float((changes > 1e-6).mean()),
        "median_abs_relative_change_when_any": float(np.median(np.abs(relative[~unchanged])))
        if (~unchanged).any()
        else 0.0,
        "largest_gain_relative": float(-relative.min()) if len(relative) else 0.0,
        "largest_loss_relative": float(relative.max()) if len(relative) else 0.0,
        "seconds": time.perf_counter() - started,
    }
    print_table(
        f"One action changed, the greedy policy finishes ({args.model.name}; {len(branches)} branches on "
        f"{len(per_workload)} training workloads; change in the sum of JCTs)",
        ["branches", "no effect", "better", "worse", "median |change| when any", "largest gain", "largest loss"],
        [
            [
                str(summary["branches"]),
                f"{summary['no_effect']:.0%}",
                f"{summary['better']:.0%}",
                f"{summary['worse']:.0%}",
                f"{summary['median_abs_relative_change_when_any']:.3%}",
                f"{summary['largest_gain_relative']:.3%}",
                f"{summary['largest_loss_relative']:.3%}",
            ]
        ],
    )
    payload = {
        "environment": environment(),
        "model": project_path(args.model),
        "source": args.source,
        "alternatives": args.alternatives,
        "summary": summary,
        "workloads": per_workload,
        "branches": branches,
    }
    print(f"wrote {write_json('counterfactuals.json', payload)}")


if __name__ == "__main__":
    main()
