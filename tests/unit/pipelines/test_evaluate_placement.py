"""The evaluate stage runs a policy with the placement its model names (as the cluster runs it), heuristics with
the stage's default placement."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from dl2.resolve import scheduler_builder
from dl2.rl.model_io import load_config, load_state, save_model
from dl2.sim.config import Mode
from pipelines import evaluate
from pipelines.params import load

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("placer", ["binpack", "isolate-strict"])
def test_a_policy_is_evaluated_with_its_own_placement(tmp_path: Path, placer: str) -> None:
    params = load(ROOT / "params.yaml", overrides=["workloads.test_seeds=[9000]", "evaluate.workers=1"])
    config, state = load_config(ROOT / "models" / "dl2-philly")[0], load_state(ROOT / "models" / "dl2-philly")
    model = save_model(tmp_path / placer, replace(config, placer=placer), state, card="test\n")

    outcome = evaluate.simulate(str(model), params, limit=1)

    own = evaluate.simulate_builder(scheduler_builder(str(model), None, Mode.REALISTIC), params, limit=1)
    forced = evaluate.simulate_builder(scheduler_builder(str(model), evaluate.PLACER, Mode.REALISTIC), params, limit=1)
    assert outcome.avg_jct_s == own.avg_jct_s != forced.avg_jct_s
    heuristic = evaluate.simulate("optimus", params, limit=1)
    placed = scheduler_builder("optimus", evaluate.PLACER, Mode.REALISTIC)
    assert heuristic.avg_jct_s == evaluate.simulate_builder(placed, params, limit=1).avg_jct_s
