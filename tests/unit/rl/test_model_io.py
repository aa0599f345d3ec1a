"""Continuing a model: what the model brings to the training that continues it, and what it refuses."""

from __future__ import annotations

import pytest

from dl2.core import InputError
from dl2.env.config import EnvConfig
from dl2.env.observation import ObservationConfig
from dl2.rl.config import NetworkConfig, RLConfig
from dl2.rl.model_io import PolicyConfig, continuing
from dl2.sim.config import SimConfig


def test_the_model_brings_its_window_placer_and_network_and_the_training_keeps_the_rest():
    model = PolicyConfig(ObservationConfig(window=7), NetworkConfig(hidden=(16, 8)), "realistic", "binpack")
    env = EnvConfig(sim=SimConfig.realistic(), reward="progress", max_slots=40)
    rl = RLConfig(learning_rate=3e-4, iterations=2)
    continued_env, continued_rl = continuing(model, env, rl, "models/x")
    assert continued_env.observation.window == 7 and continued_env.placer == "binpack"
    assert continued_rl.network.hidden == (16, 8)
    assert (continued_env.reward, continued_env.max_slots, continued_env.sim) == ("progress", 40, env.sim)
    assert (continued_rl.learning_rate, continued_rl.iterations) == (3e-4, 2)


def test_a_model_of_another_mode_is_refused_naming_it():
    model = PolicyConfig(mode="compat")
    with pytest.raises(InputError, match="models/x: a compat-mode model; this training is in realistic mode"):
        continuing(model, EnvConfig(sim=SimConfig.realistic()), RLConfig(), "models/x")


def test_the_model_card_says_what_the_model_learned_from() -> None:
    from dl2.rl.model_io import learned_from, model_card

    warm = {"kind": "warm-up", "warm_up": {"teacher": "optimus", "episodes": 3, "source": "synthetic-philly@200",
                                           "mode": "realistic", "dagger_rounds": 1}}  # fmt: skip
    rl = {
        "kind": "rl",
        "initial_metadata": warm,
        "initialised_from": "models/staging/warmup",
        "rl": {"credit": "returns", "iterations": 2},
        "best_iteration": -1,
        "feedback": {"kept": True, "logs": [{"log": "data/feedback/simulated/a", "decisions": 10}]},
        "online_twin": [{"log": "data/feedback/clusters/dl2-local", "teacher": "speedup-hull", "kept": True,
                         "predicted_difference": {"mean": -0.05, "low": -0.08, "high": -0.02}}],
    }  # fmt: skip
    assert learned_from(rl) == [
        "warm-up: imitated `optimus` on 3 `synthetic-philly@200` workloads (realistic mode) and 1 DAgger round(s)",
        "RL (`returns` credit, 2 iterations) from `models/staging/warmup`: no checkpoint validated better",
        "feedback steps on `data/feedback/simulated/a` (10 decisions): kept",
        "re-warmed in the twin calibrated from `data/feedback/clusters/dl2-local` on `speedup-hull` reading the "
        "calibrated speeds: -5.0% [-8.0%, -2.0%] against the policy it started from in the twin, kept",
    ]
    placed = {**rl["online_twin"][0], "teacher": "optimus", "placer": "isolate-strict", "running_placer": "binpack"}
    assert learned_from({"online_twin": [placed]}) == [
        "re-warmed in the twin calibrated from `data/feedback/clusters/dl2-local` on `optimus` reading the "
        "calibrated speeds, placing with `isolate-strict` (it started from `binpack`): -5.0% [-8.0%, -2.0%] against "
        "the policy it started from in the twin, kept"
    ]
    assert learned_from({"lookahead": ["optimus", "speedup-hull"]}) == [
        "runs inside a lookahead over `optimus`, `speedup-hull` and itself (`dl2.rl.lookahead`)"
    ]
    assert learned_from({"lookahead": []}) == []
    card = model_card("a policy", rl)
    assert card.index("## What it learned from") < card.index("## Facts") and "- RL (`returns` credit" in card
    assert "## What it learned from" not in model_card("bare", {"kind": "rl"})  # nothing known, nothing said
