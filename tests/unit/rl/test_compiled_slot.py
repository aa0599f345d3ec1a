"""The compiled greedy slot (`dl2.rl.compiled_slot`) decides as the NumPy path does, slot after slot."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch

from dl2.core import ClusterSpec, Resources, Workload
from dl2.env.observation import ObservationConfig
from dl2.rl import compiled_slot
from dl2.rl.config import NetworkConfig
from dl2.rl.inference import NumpyPolicy
from dl2.rl.learned import LearnedScheduler
from dl2.rl.model_io import PolicyConfig, load_config, load_state
from dl2.rl.networks import PolicyNetwork
from dl2.schedulers.registry import PLACERS
from dl2.sim.config import Mode, SimConfig
from dl2.sim.run import interference_model, speed_model
from dl2.sim.simulator import Simulation
from dl2.workload.registry import load_workloads
from tests.builders import allreduce_job, make_job

PHILLY_MODEL = Path(__file__).resolve().parents[3] / "models" / "dl2-philly"


def _pair(config: PolicyConfig, state: dict[str, torch.Tensor]) -> tuple[LearnedScheduler, LearnedScheduler]:
    """The same policy twice: through the compiled slot, and stepped from Python with NumPy inference."""
    shape, network = config.observation.shape, config.network
    placer = PLACERS["isolate-strict"]
    compiled = LearnedScheduler(config, NumpyPolicy.from_state_dict(state, shape, network), placer=placer())
    reference = LearnedScheduler(
        config, NumpyPolicy.from_state_dict(state, shape, network, use_compiled=False), placer=placer()
    )
    assert compiled._slot is not None and reference._slot is None
    return compiled, reference


def _agree(compiled: LearnedScheduler, reference: LearnedScheduler, workload: Workload, slots: int) -> None:
    """Both decide every slot of a realistic run (driven by the compiled one's allocations) alike."""
    simulation = Simulation(workload, SimConfig.realistic(seed=0), speed_model(Mode.REALISTIC), interference_model())
    for _ in range(slots):
        if simulation.done:
            break
        view = simulation.begin_slot()
        allocation = compiled.schedule(view)
        assert allocation == reference.schedule(view)
        simulation.apply(allocation)
    assert compiled.decisions == reference.decisions > 0


def _hand_workload(seed: int) -> Workload:
    """Parameter-server and all-reduce jobs of several types on four small servers: more jobs than fit, and
    more than a window (jobs wait, windows close and are skipped)."""
    models = ("resnet-50", "vgg-16", "inception-bn", "seq2seq")
    jobs = [
        make_job(f"ps-{i}", epochs=3.0 + (i * 7 + seed) % 11, arrival_s=100.0 * (i % 4), max_tasks=2 + i % 5,
                 model=models[(i + seed) % len(models)])
        for i in range(14)
    ] + [allreduce_job(f"ar-{i}", max_workers=1 + (i + seed) % 6) for i in range(5)]  # fmt: skip
    cluster = ClusterSpec.homogeneous(4, Resources(gpu=8.0, cpu=16.0, mem_gb=128.0), kind="test")
    return Workload("hand", cluster, tuple(jobs), 100.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("stop_bias", [None, -50.0])
def test_compiled_slot_decides_as_numpy_on_hand_built_clusters(seed: int, stop_bias: float | None) -> None:
    """Random networks; with a stop bias of -50 the policy grants until nothing fits (every window runs long, the
    cluster fills up, and the windows after are skipped)."""
    pytest.importorskip("numba")
    torch.manual_seed(seed)
    config = PolicyConfig(
        observation=ObservationConfig(window=4),
        network=NetworkConfig(hidden=(16, 16), kind="per-job"),
        mode="realistic",
        placer="isolate-strict",
    )
    state = PolicyNetwork(config.observation.shape, config.network).state_dict()
    if stop_bias is not None:
        state["stop_head.bias"] = torch.full_like(state["stop_head.bias"], stop_bias)
    _agree(*_pair(config, state), _hand_workload(seed), slots=25)


def test_compiled_slot_decides_as_numpy_with_the_philly_model() -> None:
    """The shipped network on the first slots of the Philly week at 8x its arrivals (up to ~80 active jobs, some
    ten thousand decisions)."""
    pytest.importorskip("numba")
    from dataclasses import replace

    config, _ = load_config(PHILLY_MODEL)
    state = load_state(PHILLY_MODEL, config=config)
    philly = load_workloads("philly", 0)[0]
    jobs = tuple(replace(job, spec=replace(job.spec, arrival_s=job.spec.arrival_s / 8.0)) for job in philly.jobs)
    _agree(*_pair(config, state), replace(philly, jobs=jobs), slots=15)


def test_other_networks_and_modes_step_from_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """No compiled slot for networks it does not cover, for compatibility mode, for sampling, or without numba."""
    torch.manual_seed(0)
    observation = ObservationConfig(window=4)
    for network in (
        NetworkConfig(hidden=(16, 16), kind="per-job-local"),
        NetworkConfig(hidden=(16,), kind="per-job"),
        NetworkConfig(hidden=(16, 16, 16), kind="per-job"),
        NetworkConfig(hidden=(16,), kind="mlp"),
    ):
        state = PolicyNetwork(observation.shape, network).state_dict()
        assert compiled_slot.slot_kernel(NumpyPolicy.from_state_dict(state, observation.shape, network)) is None
    config = PolicyConfig(observation=observation, network=NetworkConfig(hidden=(16, 16)), mode="realistic")
    policy = NumpyPolicy.from_state_dict(
        PolicyNetwork(observation.shape, config.network).state_dict(), observation.shape, config.network
    )
    assert LearnedScheduler(config, policy, compat=True)._slot is None
    assert LearnedScheduler(config, policy, greedy=False)._slot is None
    learned = LearnedScheduler(config, policy)
    assert (learned._slot is not None) == (compiled_slot._compiled_window() is not None)
    assert (pickle.loads(pickle.dumps(learned))._slot is not None) == (learned._slot is not None)
    monkeypatch.setattr(compiled_slot, "_compiled_window", lambda: None)
    assert LearnedScheduler(config, policy)._slot is None
