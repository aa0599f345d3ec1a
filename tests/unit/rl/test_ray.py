"""The Ray rollout backend: a local Ray instance (2 CPUs) runs the same tasks as the process pool, and training
with a seed gives the same policy either way."""

from __future__ import annotations

import pytest
import torch

from dl2.env.config import EnvConfig
from dl2.env.observation import ObservationConfig
from dl2.rl.config import NetworkConfig, RLConfig
from dl2.rl.training import fine_tune
from dl2.rl.workers import LocalPool, RayPool, RolloutPool

ray = pytest.importorskip("ray")  # installed by `make` (requirements.txt): the test always runs there


def train(pool: RolloutPool) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    env = EnvConfig(observation=ObservationConfig(window=10), max_slots=60)
    config = RLConfig(
        iterations=2,
        episodes_per_iteration=2,
        train_source="authors-tiny",
        validation_seeds=(5000,),
        validation_max_slots=60,
        value_warmup_iterations=0,
        network=NetworkConfig(hidden=(16,)),
        seed=3,
    )
    trainer, _ = fine_tune(env, config, pool)
    return {key: value.detach().clone() for key, value in trainer.policy.state_dict().items()}


@pytest.mark.slow
def test_ray_and_the_process_pool_train_the_same_policy() -> None:
    local = LocalPool(2)
    try:
        expected = train(local)
    finally:
        local.close()
    remote = RayPool(num_cpus=2)  # a local instance: `ray.init` with 2 CPUs
    try:
        assert ray.cluster_resources().get("CPU") == 2
        got = train(remote)
    finally:
        remote.close()
    assert not ray.is_initialized()  # the pool ended the instance it started
    assert expected.keys() == got.keys()
    for key in expected:
        assert torch.equal(expected[key], got[key]), key
