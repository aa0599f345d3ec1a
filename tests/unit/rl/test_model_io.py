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
