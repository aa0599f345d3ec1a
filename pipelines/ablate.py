"""Stage `ablate`: which RL components matter (DL2 §6.5). Each variant (`full`, `no-exploration`, `no-replay`,
`no-value-baseline`) is fine-tuned from the warm-up for `ablate.iterations` iterations per seed of `ablate.seeds`,
then its greedy policy after the last iteration runs on the first `ablate.test_workloads` held-out test workloads.

Every (variant, seed) is an MLflow child run (its learning curve and test JCT); the parent run logs every child's
JCT as `<variant>.seed<k>.test_avg_jct_s` and each variant's mean as `<variant>.test_avg_jct_s`, so the MLflow
UI compares them side by side. The table goes to `reports/ablation.json` (a DVC metric).

    python -m pipelines.ablate [--smoke]
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Any

from pipelines import tracking
from pipelines.evaluate import simulate_builder
from pipelines.params import Params
from pipelines.rl import env_config, learned_builder, load_networks, rl_config, rl_seeds, unit
from pipelines.stage import Layout, StageResult, log_outputs, main, stage_digest, up_to_date, write_json
from pipelines.workloads import require_within


def train_and_test(params: Params, layout: Layout, variant: str, seed: int, pool: Any) -> float | None:
    """One child run: RL from the warm-up with `variant`'s components, then the test JCT (None: unsafe)."""
    import mlflow
    import torch

    from dl2.rl.training import fine_tune
    from pipelines.finetune import log_iteration

    config, policy, value, _ = load_networks(layout.model("warmup"))
    a = params.ablate
    rl = rl_config(params, config.network, a.iterations, seed, variant, a.episodes_per_iteration)
    torch.manual_seed(seed)
    child = {"variant": variant, "seed": seed, "iterations": params.ablate.iterations}
    with tracking.stage_run("ablate", child, nested=True, run_name=f"{variant}-seed{seed}"):
        trainer, state = fine_tune(env_config(params, config), rl, pool, policy, value, on_iteration=log_iteration)
        # the policy after training, not the best-validated checkpoint: with ablation budgets that is often the
        # warm-up itself for every variant, which would hide what switching a component off does
        build = learned_builder(config, trainer.policy.state_dict(), f"dl2-{variant}")
        outcome = simulate_builder(build, params, params.ablate.test_workloads or None)
        jct = sum(outcome.avg_jct_s) / len(outcome.avg_jct_s) if outcome.safe and outcome.avg_jct_s else None
        mlflow.log_metric("test_safe", float(outcome.safe))
        if jct is not None:
            mlflow.log_metric("test_avg_jct_s", jct)
        if math.isfinite(state.best_validation_jct_s):
            mlflow.log_metric("best_validation_avg_jct_s", state.best_validation_jct_s)
    return jct


def summarize(params: Params, results: dict[str, dict[int, float | None]]) -> dict[str, Any]:
    """Per variant: each seed's test JCT, their mean with a 95% CI over the safe seeds, and the ratio to `full`."""
    from dl2.sim.metrics import mean_ci95

    scale, unit_name = unit(params.workloads.mode)
    variants: dict[str, dict[str, Any]] = {}
    for variant, by_seed in results.items():
        finished = [v for v in by_seed.values() if v is not None]
        mean, half = mean_ci95(finished) if finished else (None, None)
        variants[variant] = {
            "seeds": {str(seed): value for seed, value in by_seed.items()},
            "safe_runs": len(finished),
            "runs": len(by_seed),
            "test_avg_jct_s": mean,
            "test_avg_jct_ci95_s": half,
            f"test_avg_jct_{unit_name}": None if mean is None else mean / scale,
        }
    full = variants.get("full", {}).get("test_avg_jct_s")
    for row in variants.values():
        mean = row["test_avg_jct_s"]
        row["vs_full"] = mean / full if mean is not None and full else None
    return {
        "workload": params.workloads.test,
        "test_workloads": params.ablate.test_workloads,
        "iterations": params.ablate.iterations,
        "unit": unit_name,
        "order": list(results),
        "variants": variants,
    }


def run(params: Params, layout: Layout | None = None, force: bool = False) -> StageResult:
    import mlflow

    from dl2.rl.workers import make_pool

    layout = layout or Layout()
    warm = layout.model("warmup")
    config, *_ = load_networks(warm)
    for seed in params.ablate.seeds:
        rl = rl_config(
            params, config.network, params.ablate.iterations, seed, episodes=params.ablate.episodes_per_iteration
        )
        require_within(layout, params, "rl", rl_seeds(rl))
    settings = {
        "ablate": params.section("ablate"),
        "finetune": params.section("finetune"),
        "workloads": params.section("workloads"),
        "evaluate": params.section("evaluate"),
    }
    digest = stage_digest("ablate", "ablate", settings, [layout.training_manifest, warm])
    output = layout.reports / "ablation.json"
    if not force and (done := up_to_date("ablate", digest, layout, [output])):
        return done
    with tracking.stage_run("ablate", settings, tags={"dl2.digest": digest}) as active:
        pool = make_pool("local", params.finetune.workers)
        try:
            results = {
                variant: {seed: train_and_test(params, layout, variant, seed, pool) for seed in params.ablate.seeds}
                for variant in params.ablate.variants
            }
        finally:
            pool.close()
        document = {"digest": digest, **summarize(params, results)}
        for variant, row in document["variants"].items():
            for seed, value in row["seeds"].items():
                if value is not None:
                    mlflow.log_metric(f"{variant}.seed{seed}.test_avg_jct_s", value)
            if row["test_avg_jct_s"] is not None:
                mlflow.log_metric(f"{variant}.test_avg_jct_s", row["test_avg_jct_s"])
            mlflow.log_metric(f"{variant}.safe_runs", float(row["safe_runs"]))
        write_json(output, document)
        log_outputs(layout, [output])
        summary = {variant: row["test_avg_jct_s"] for variant, row in document["variants"].items()}
        return StageResult("ablate", False, (layout.relative(output),), digest, active.info.run_id, summary)


def _run(params: Params, args: argparse.Namespace) -> StageResult:
    return run(params, force=args.force)


def cli(argv: Sequence[str] | None = None) -> int:
    return main("ablate", "Ablations of the RL components (variants x seeds), as MLflow child runs.", _run, None, argv)


if __name__ == "__main__":
    raise SystemExit(cli())
