"""Stage `ablate`: which RL components matter (DL2 §6.5). Each variant (`full`, `no-exploration`, `no-replay`,
`no-value-baseline`) is fine-tuned from the warm-up for `ablate.iterations` iterations per seed of `ablate.seeds`
(DL2's own credit: slot returns against the value baseline), then its greedy policy after the last iteration runs
on the held-out test workloads (the first `ablate.test_workloads` of them; 0: all).

A small budget can leave a switched-off component nothing to do (replay needs earlier iterations to replay,
the policy does not move while only the critic warms up), and then a variant trains exactly as `full` does. The
table says so instead of showing a difference of zero as a finding: per seed it records whether the policy moved
from the warm-up at all and whether its weights are bit-identical to `full`'s, and a variant whose every seed is
identical to `full` is marked "cannot differ at this budget". A variant that cannot differ by construction
(`no-replay` with one iteration: there is no earlier iteration to replay) is not trained; its row says why.

Every (variant, seed) is an MLflow child run (its learning curve and test JCT); the parent run logs every child's
JCT as `<variant>.seed<k>.test_avg_jct_s` and each variant's mean as `<variant>.test_avg_jct_s`, so the MLflow
UI compares them side by side. The table goes to `reports/ablation.json` (a DVC metric).

    python -m pipelines.ablate [--smoke]
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dl2.sim.metrics import report_unit
from pipelines import tracking
from pipelines.code import code_version
from pipelines.evaluate import simulate_builder
from pipelines.params import Params
from pipelines.rl import ablation_config, continued, learned_builder, rl_seeds
from pipelines.stage import Layout, StageResult, main_without_arguments, write_json
from pipelines.workloads import require_within, test_dataset, training_dataset


@dataclass(frozen=True, slots=True)
class Trained:
    """One (variant, seed): its test JCT (None: unsafe) and its weights' fingerprint."""

    test_avg_jct_s: float | None
    weights: str
    """sha256 of the policy's state after training (equal fingerprints: bit-identical policies)."""
    moved: bool
    """The policy's weights differ from the warm-up's (some update happened)."""


def fingerprint(state: Mapping[str, Any]) -> str:
    import hashlib

    digest = hashlib.sha256()
    for key in sorted(state):
        digest.update(key.encode() + b"\0" + state[key].detach().cpu().numpy().tobytes())
    return digest.hexdigest()


def train_and_test(params: Params, layout: Layout, variant: str, seed: int, pool: Any) -> Trained:
    """One child run: RL from the warm-up with `variant`'s components, then the test JCT."""
    import mlflow
    import torch

    from dl2.rl.training import fine_tune, load_trained
    from pipelines.finetune import log_iteration

    warm = load_trained(layout.model("warmup"))
    config = warm.config
    start = fingerprint(warm.policy.state_dict())
    rl = ablation_config(params, config.network, seed, variant)
    torch.manual_seed(seed)
    child = {"variant": variant, "seed": seed, "iterations": params.ablate.iterations}
    with tracking.stage_run("ablate", child, nested=True, run_name=f"{variant}-seed{seed}", root=layout.root):
        env, _ = continued(params, config, layout.relative(layout.model("warmup")))
        trainer, _ = fine_tune(env, rl, pool, warm.policy, warm.value, on_iteration=log_iteration)
        # the policy after training (no validation): a best-validated checkpoint would often be the warm-up itself
        # for every variant at ablation budgets, hiding what switching a component off does
        build = learned_builder(config, trainer.policy.state_dict(), f"dl2-{variant}")
        outcome = simulate_builder(build, params, params.ablate.test_workloads or None)
        jct = sum(outcome.avg_jct_s) / len(outcome.avg_jct_s) if outcome.safe and outcome.avg_jct_s else None
        mlflow.log_metric("test_safe", float(outcome.safe))
        if jct is not None:
            mlflow.log_metric("test_avg_jct_s", jct)
        weights = fingerprint(trainer.policy.state_dict())
        mlflow.set_tag("dl2.policy_fingerprint", weights[:16])
    return Trained(jct, weights, weights != start)


def same_as_full(params: Params, variant: str) -> str | None:
    """Why `variant` trains bit-identically to `full` at this budget by construction (None: it can differ)."""
    if variant == "no-replay" and params.ablate.iterations < 2:
        return (
            "not trained: replay draws on earlier iterations and with ablate.iterations = 1 there is none, so it "
            "trains as full does (ablate.iterations >= 2 measures it)"
        )
    return None


def summarize(
    params: Params, results: dict[str, dict[int, Trained]], not_run: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Per variant: each seed's test JCT, their mean with a 95% CI over the safe seeds, the ratio to `full`, and
    whether the budget let the variant differ from `full` at all (`not_run`: variants left out, and why)."""
    from dl2.sim.metrics import mean_ci95

    scale, unit_name = report_unit(params.workloads.mode)
    full_weights = {seed: t.weights for seed, t in results.get("full", {}).items()}
    variants: dict[str, dict[str, Any]] = {}
    for variant, by_seed in results.items():
        finished = [t.test_avg_jct_s for t in by_seed.values() if t.test_avg_jct_s is not None]
        mean, half = mean_ci95(finished) if finished else (None, None)
        identical = [seed for seed, t in by_seed.items() if full_weights.get(seed) == t.weights]
        variants[variant] = {
            "seeds": {str(seed): t.test_avg_jct_s for seed, t in by_seed.items()},
            "safe_runs": len(finished),
            "runs": len(by_seed),
            "test_avg_jct_s": mean,
            "test_avg_jct_ci95_s": half,
            f"test_avg_jct_{unit_name}": None if mean is None else mean / scale,
            "moved_from_warmup": sum(t.moved for t in by_seed.values()),
            "identical_to_full": len(identical),
            "cannot_differ": variant != "full" and bool(by_seed) and len(identical) == len(by_seed),
        }
    for variant, why in (not_run or {}).items():
        variants[variant] = {
            "seeds": {}, "safe_runs": 0, "runs": 0, "test_avg_jct_s": None, "test_avg_jct_ci95_s": None,
            f"test_avg_jct_{unit_name}": None, "moved_from_warmup": 0, "identical_to_full": 0,
            "cannot_differ": True, "not_run": why,
        }  # fmt: skip
    full = variants.get("full", {}).get("test_avg_jct_s")
    for row in variants.values():
        mean = row["test_avg_jct_s"]
        row["vs_full"] = mean / full if mean is not None and full else None
    return {
        "workload": params.workloads.test,
        "test_workloads": params.ablate.test_workloads,
        "iterations": params.ablate.iterations,
        "unit": unit_name,
        "order": [variant for variant in params.ablate.variants if variant in variants],
        "variants": variants,
    }


def run(params: Params, layout: Layout | None = None) -> StageResult:
    import mlflow
    from tqdm import tqdm

    from dl2.rl.model_io import load_config
    from dl2.rl.workers import make_pool

    layout = layout or Layout()
    config, _ = load_config(layout.model("warmup"))
    for seed in params.ablate.seeds:
        require_within(layout, params, "rl", rl_seeds(ablation_config(params, config.network, seed, "full")))
    settings = {
        "ablate": params.section("ablate"),
        "finetune": params.section("finetune"),
        "workloads": params.section("workloads"),
        "evaluate": params.section("evaluate"),
    }
    output = layout.reports / "ablation.json"
    version = code_version("pipelines.ablate")
    with tracking.stage_run("ablate", settings, tags={"dl2.code_version": version}, root=layout.root) as active:
        test = test_dataset(params)
        tracking.log_inputs([(training_dataset(layout), "training"), (test, "test")])
        pool = make_pool("local", params.finetune.workers)
        not_run: dict[str, str] = {
            v: why for v in params.ablate.variants if (why := same_as_full(params, v)) is not None
        }
        trained = [variant for variant in params.ablate.variants if variant not in not_run]
        cells = [(variant, seed) for variant in trained for seed in params.ablate.seeds]
        results: dict[str, dict[int, Trained]] = {variant: {} for variant in trained}
        try:
            for variant, seed in tqdm(cells, desc="ablate", unit="training", file=sys.stderr):
                results[variant][seed] = train_and_test(params, layout, variant, seed, pool)
        finally:
            pool.close()
        document = {"code_version": version, **summarize(params, results, not_run)}
        for variant, row in document["variants"].items():
            for seed, value in row["seeds"].items():
                if value is not None:
                    mlflow.log_metric(f"{variant}.seed{seed}.test_avg_jct_s", value, dataset=test)
            if row["test_avg_jct_s"] is not None:
                mlflow.log_metric(f"{variant}.test_avg_jct_s", row["test_avg_jct_s"], dataset=test)
            if not row.get("not_run"):
                mlflow.log_metric(f"{variant}.safe_runs", float(row["safe_runs"]))
        write_json(output, document)
        summary = {variant: row["test_avg_jct_s"] for variant, row in document["variants"].items()}
        return StageResult("ablate", (layout.relative(output),), version, active.info.run_id, summary)


def cli(argv: Sequence[str] | None = None) -> int:
    return main_without_arguments(
        "ablate", "Ablations of the RL components (variants x seeds), as MLflow child runs.", run, argv
    )


if __name__ == "__main__":
    raise SystemExit(cli())
