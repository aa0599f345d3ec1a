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


def test_the_gate_places_every_heuristic_and_the_asked_sizes_as_the_challenger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gate's rows differ from the challenger in their allocations only: each heuristic, the incumbent
    included, and the jobs at their asked sizes place with the challenger's placer, while the models place as
    their own configs say; the `evaluate` stage's heuristic figures (placed with its own placer) are not reused."""
    from pipelines.promotion import scoring
    from pipelines.stage import Layout

    params = load(ROOT / "params.yaml", overrides=["workloads.test_seeds=[9000]", "evaluate.workers=1"])
    config, state = load_config(ROOT / "models" / "dl2-philly")[0], load_state(ROOT / "models" / "dl2-philly")
    challenger = save_model(tmp_path / "challenger", replace(config, placer="isolate-strict"), state, card="t\n")
    champion = save_model(tmp_path / "champion", replace(config, placer="binpack"), state, card="t\n")
    placed: dict[str, str] = {}

    def fake(scheduler: str, params: object, limit: int | None = None, placer: str = evaluate.PLACER) -> object:
        placed[scheduler] = placer
        return evaluate.Outcome((1.0,), (2.0,), (1.0,))

    monkeypatch.setattr(evaluate, "simulate", fake)
    monkeypatch.setattr(scoring, "evaluated_scores", lambda *_: {h: scoring.Score(9.0, 9.0, True, 1)
                                                                 for h in evaluate.heuristics(params)})  # fmt: skip
    scores = scoring.evaluate(params, challenger, champion, Layout(tmp_path))

    assert scoring.challenger_placer(challenger) == "isolate-strict"
    assert set(scores) == {"challenger", "champion", *evaluate.heuristics(params), scoring.ASKED_SIZES}
    assert {placed[name] for name in (*evaluate.heuristics(params), scoring.ASKED_SIZES)} == {"isolate-strict"}
    assert all(score.avg_jct_s == 1.0 for score in scores.values())  # run here, not the stage's load-balanced 9.0
