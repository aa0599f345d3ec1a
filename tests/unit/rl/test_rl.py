"""The DL2 policy: networks and NumPy inference, model folders, teacher demonstrations, supervised warm-up, the
actor-critic learner and its rollouts, and the train/evaluate commands, all on tiny budgets."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dl2.cli.main import main
from dl2.config import ConfigError
from dl2.core import Allocation, ClusterSpec, ClusterView, InputError, NodeSpec, Resources, Workload
from dl2.env.config import EnvConfig
from dl2.env.decision import SlotDecision, stop_action
from dl2.env.observation import ObservationConfig, Observer
from dl2.rl import rollout, training
from dl2.rl.actor_critic import ActorCritic, sibling_advantages
from dl2.rl.config import MASKED_LOGIT, ExplorationConfig, NetworkConfig, ReplayConfig, RLConfig, SupervisedConfig
from dl2.rl.demonstrations import Demonstrations, record, record_on_policy, teacher_action
from dl2.rl.deviation import DeviationBatch, DeviationTask, run_deviations
from dl2.rl.exploration import exploratory_action
from dl2.rl.inference import NumpyPolicy
from dl2.rl.learned import LearnedScheduler
from dl2.rl.model_io import PolicyConfig, load_config, load_state, save_model
from dl2.rl.networks import PolicyNetwork, ValueNetwork
from dl2.rl.perturbation import PerturbationTask, run_perturbations
from dl2.rl.rollout import Episode, EpisodeTask, run_episode, slot_returns
from dl2.rl.rollout_teacher import FILLS, KNEES, UntilRefused, make_rollout_teacher, rollout_name
from dl2.rl.supervised import imitation_loss, train_supervised
from dl2.rl.workers import LocalPool
from dl2.schedulers.isolate import StrictIsolatePlacer
from dl2.schedulers.load_balance import LoadBalancePlacer
from dl2.schedulers.registry import check_scheduler, make_scheduler
from dl2.sim.config import Mode, SimConfig
from dl2.sim.run import World, catalogue_speed, speed_model
from dl2.sim.simulator import Simulation, simulate
from dl2.workload.authors import SETTINGS, generate_authors_workload
from dl2.workload.interference import InterferenceModel
from dl2.workload.registry import load_workloads
from dl2.workload.source import workload
from dl2.workload.traces import COMMON_COLUMNS
from testbed.twin.workloads import first_jobs, first_nodes
from tests.builders import LinearSpeed, allreduce_job, make_job

KINDS = ("per-job", "per-job-local", "mlp")
SHAPE = ObservationConfig(window=5).shape


def authors_file(path: Path, seeds: range, num_jobs: int, num_nodes: int, epochs_divisor: float = 1.0) -> Path:
    """Authors'-format workloads (a `workload_source` file source): the first jobs of the authors' generator for
    each seed, on a smaller cluster, optionally with fewer epochs (shorter episodes)."""
    setting = SETTINGS["small"]
    traces = []
    for seed in seeds:
        jobs = generate_authors_workload(setting, seed).jobs[:num_jobs]
        traces.append(
            [
                {
                    "job_id": int(job.spec.job_id),
                    "model": job.spec.model,
                    "arrival_slot": job.spec.arrival_s / setting.slot_s,
                    "total_epochs": job.spec.declared_epochs / epochs_divisor,
                    "real_epochs": job.true_epochs / epochs_divisor,
                    "worker_demand": {"gpu": job.spec.worker_demand.gpu, "cpu": job.spec.worker_demand.cpu},
                    "ps_demand": {"gpu": job.spec.ps_demand.gpu, "cpu": job.spec.ps_demand.cpu},
                    "samples_per_epoch_unit": job.spec.samples_per_epoch,
                }
                for job in jobs
            ]
        )
    document = {
        "num_nodes": num_nodes,
        "slots_per_node": {"gpu": 8, "cpu": 8},
        "slot_seconds": setting.slot_s,
        "max_workers_per_job": setting.max_tasks_per_job,
        "max_ps_per_job": setting.max_tasks_per_job,
        "traces": traces,
    }
    path.write_text(json.dumps(document))
    return path


@pytest.fixture(scope="module")
def warm_up_source(tmp_path_factory: pytest.TempPathFactory) -> str:
    """8 workloads of 12 authors' jobs on 6 nodes (teacher runs of 100-700 slots)."""
    return str(authors_file(tmp_path_factory.mktemp("warm") / "warm.json", range(8), 12, 6))


@pytest.fixture(scope="module")
def rl_source(tmp_path_factory: pytest.TempPathFactory) -> str:
    """6 workloads of 8 authors' jobs on 4 nodes with a quarter of the epochs (short episodes)."""
    return str(authors_file(tmp_path_factory.mktemp("rl") / "rl.json", range(6), 8, 4, epochs_divisor=4.0))


def random_observations(rng: np.random.Generator, count: int, shape: object = SHAPE) -> np.ndarray:
    """Observations in [0, 1] with some job columns zero (padding), as the observer writes them."""
    size = shape.size  # type: ignore[attr-defined]
    window, features = shape.window, shape.job_features  # type: ignore[attr-defined]
    observations = rng.random((count, size), dtype=np.float32)
    for row in observations:
        empty = rng.integers(0, window + 1)
        row[(window - empty) * features : window * features] = 0.0
    observations[0, : window * features] = 0.0  # no job at all
    return observations


def random_masks(rng: np.random.Generator, count: int, num_actions: int) -> np.ndarray:
    masks = (rng.random((count, num_actions)) < 0.5).astype(np.int8)
    masks[:, -1] = 1
    return masks


# --- networks and NumPy inference ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_networks_output_one_logit_per_action(kind: str) -> None:
    torch.manual_seed(0)
    config = NetworkConfig(hidden=(16, 8), kind=kind)
    policy, value = PolicyNetwork(SHAPE, config), ValueNetwork(SHAPE, config)
    observations = torch.from_numpy(random_observations(np.random.default_rng(0), 7))
    assert policy(observations).shape == (7, 3 * SHAPE.window + 1)
    assert value(observations).shape == (7,)
    masks = torch.from_numpy(random_masks(np.random.default_rng(1), 7, 3 * SHAPE.window + 1))
    masked = policy.masked_logits(observations, masks)
    assert torch.all(masked[masks == 0] == MASKED_LOGIT)
    assert torch.equal(masked[masks == 1], policy(observations)[masks == 1])


def test_unknown_network_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="kind"):
        PolicyNetwork(SHAPE, NetworkConfig(kind="transformer"))


@pytest.mark.parametrize("kind", KINDS)
def test_numpy_inference_matches_torch(kind: str) -> None:
    torch.manual_seed(1)
    config = NetworkConfig(hidden=(32, 16), kind=kind)
    policy = PolicyNetwork(SHAPE, config)
    numpy_policy = NumpyPolicy.from_state_dict(policy.state_dict(), SHAPE, config)
    assert numpy_policy.input_size == SHAPE.size
    rng = np.random.default_rng(2)
    observations = random_observations(rng, 20)
    with torch.no_grad():
        expected = policy(torch.from_numpy(observations)).numpy()
    for observation, logits in zip(observations, expected, strict=True):
        np.testing.assert_allclose(numpy_policy.logits(observation), logits, atol=1e-4)
    masks = random_masks(rng, 20, 3 * SHAPE.window + 1)
    with torch.no_grad():
        greedy = policy.masked_logits(torch.from_numpy(observations), torch.from_numpy(masks)).argmax(dim=1)
    for observation, mask, best in zip(observations, masks, greedy.tolist(), strict=True):
        action, log_prob = numpy_policy.act(observation, mask)
        assert action == best and log_prob <= 0.0
        for seed in range(5):
            sampled, _ = numpy_policy.act(observation, mask, np.random.default_rng(seed))
            assert mask[sampled] == 1


def test_local_network_inference_keeps_unchanged_rows_between_calls() -> None:
    """`per-job-local` NumPy inference re-encodes only the rows that changed since the previous call; as a task
    is granted (one row and the tail change) it must still agree with torch's full pass."""
    torch.manual_seed(5)
    config = NetworkConfig(hidden=(32, 16), kind="per-job-local")
    policy = PolicyNetwork(SHAPE, config)
    numpy_policy = NumpyPolicy.from_state_dict(policy.state_dict(), SHAPE, config)
    rng = np.random.default_rng(6)
    observation = random_observations(rng, 2)[1]
    window, features = SHAPE.window, SHAPE.job_features
    for step in range(25):
        if step % 10 == 9:  # now and then a new window: every row changes
            observation = random_observations(rng, 2)[1]
        else:
            row = int(rng.integers(0, window))
            start = row * features + features - 3
            observation[start : start + 3] = rng.random(3, dtype=np.float32)  # the job's dynamic features
            observation[window * features :] = rng.random(SHAPE.global_features, dtype=np.float32)
        with torch.no_grad():
            expected = policy(torch.from_numpy(observation[None, :])).numpy()[0]
        np.testing.assert_allclose(numpy_policy.logits(observation), expected, atol=1e-4)


@pytest.mark.parametrize("kind", ["per-job-local", "per-job"])
@pytest.mark.parametrize("hidden", [(24,), (32, 16), (16, 16, 8)])
def test_compiled_greedy_decisions_match_torch(kind: str, hidden: tuple[int, ...]) -> None:
    """The numba kernels (`dl2.rl.compiled`) carry the window's columns between calls; through a slot-like
    sequence (one row and the tail change per call, now and then a new window, random masks) their logits and
    their masked argmax agree with torch's full pass and with the NumPy path."""
    pytest.importorskip("numba")
    torch.manual_seed(7)
    config = NetworkConfig(hidden=hidden, kind=kind)
    policy = PolicyNetwork(SHAPE, config)
    compiled_policy = NumpyPolicy.from_state_dict(policy.state_dict(), SHAPE, config)
    fallback = NumpyPolicy.from_state_dict(policy.state_dict(), SHAPE, config, use_compiled=False)
    assert compiled_policy._kernel is not None and fallback._kernel is None
    rng = np.random.default_rng(8)
    observation = random_observations(rng, 2)[1]
    window, features = SHAPE.window, SHAPE.job_features
    for step in range(40):
        if step % 10 == 9:
            observation = random_observations(rng, 2)[1]
            observation[:features] = 0.0  # an empty column: it leaves the pooled mean
        else:
            row = int(rng.integers(0, window))
            start = row * features + features - 3
            observation[start : start + 3] = rng.random(3, dtype=np.float32)
            observation[window * features :] = rng.random(SHAPE.global_features, dtype=np.float32)
        mask = random_masks(rng, 1, 3 * window + 1)[0]
        if step == 5:
            mask[:] = 0  # nothing possible: action 0, as argmax over all-masked logits
        with torch.no_grad():
            observed = torch.from_numpy(observation[None, :])
            expected = policy(observed).numpy()[0]
            best = int(policy.masked_logits(observed, torch.from_numpy(mask[None, :])).argmax(dim=1)[0])
        action = compiled_policy.greedy_action(observation, mask)
        assert compiled_policy._kernel is not None
        np.testing.assert_allclose(compiled_policy._kernel.logits, expected, atol=1e-4)
        assert action == best == fallback.greedy_action(observation, mask)


def test_per_job_network_is_permutation_equivariant() -> None:
    torch.manual_seed(3)
    policy = PolicyNetwork(SHAPE, NetworkConfig(hidden=(16, 16)))
    window, features = SHAPE.window, SHAPE.job_features
    observations = random_observations(np.random.default_rng(4), 6)
    permutation = np.array([3, 0, 4, 1, 2])
    jobs = observations[:, : window * features].reshape(-1, window, features)
    permuted = np.concatenate([jobs[:, permutation].reshape(6, -1), observations[:, window * features :]], axis=1)
    with torch.no_grad():
        logits = policy(torch.from_numpy(observations)).numpy()
        permuted_logits = policy(torch.from_numpy(permuted)).numpy()
    job_logits = logits[:, :-1].reshape(6, window, 3)
    np.testing.assert_allclose(
        permuted_logits[:, :-1].reshape(6, window, 3), job_logits[:, permutation], rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(permuted_logits[:, -1], logits[:, -1], rtol=1e-5, atol=1e-5)


# --- model folders -------------------------------------------------------------------------------------------------


def _tiny_compat_workload() -> Workload:
    full = generate_authors_workload(SETTINGS["small"], 2)
    return Workload("tiny", ClusterSpec.homogeneous(4, Resources(gpu=8.0, cpu=8.0)), full.jobs[:6], full.slot_s)


def _saved_policy(
    directory: Path, kind: str = "per-job", seed: int = 0, packed: bool = False
) -> tuple[PolicyConfig, PolicyNetwork]:
    torch.manual_seed(seed)
    config = PolicyConfig(
        observation=ObservationConfig(window=4, packed=packed), network=NetworkConfig(hidden=(16,), kind=kind)
    )
    policy = PolicyNetwork(config.observation.shape, config.network)
    save_model(directory, config, policy.state_dict(), card="# test\n", metadata={"seed": seed})
    return config, policy


def _decisions_agree(config: PolicyConfig, policy: PolicyNetwork, directory: Path) -> None:
    """Drive the simulator with DRF and ask both schedulers for every slot's allocation."""
    in_memory = LearnedScheduler(
        config, NumpyPolicy.from_state_dict(policy.state_dict(), config.observation.shape, config.network)
    )
    loaded = LearnedScheduler.from_dir(directory)
    assert loaded.name == directory.name
    speed = speed_model(Mode.COMPAT)
    simulation = Simulation(_tiny_compat_workload(), SimConfig.compat(), speed)
    teacher = make_scheduler("drf", speed, True)
    for _ in range(15):
        if simulation.done:
            break
        view = simulation.begin_slot()
        assert in_memory.schedule(view) == loaded.schedule(view)
        simulation.apply(teacher.schedule(view))
    assert in_memory.decisions == loaded.decisions > 0


def test_saved_model_makes_the_same_decisions(tmp_path: Path) -> None:
    directory = tmp_path / "model"
    config, policy = _saved_policy(directory)
    assert {p.name for p in directory.iterdir()} == {"policy.pt", "config.json", "MODEL_CARD.md"}
    loaded_config, metadata = load_config(directory)
    assert loaded_config == config and metadata == {"seed": 0}
    _decisions_agree(config, policy, directory)


def test_saved_mlp_model_round_trips(tmp_path: Path) -> None:
    directory = tmp_path / "mlp"
    config, policy = _saved_policy(directory, kind="mlp")
    assert load_config(directory)[0].network.kind == "mlp"
    _decisions_agree(config, policy, directory)


def test_a_packed_requests_model_round_trips_and_older_configs_load_as_asked_as_decided(tmp_path: Path) -> None:
    directory = tmp_path / "packed"
    config, policy = _saved_policy(directory, packed=True)
    assert load_config(directory)[0].observation.packed
    _decisions_agree(config, policy, directory)
    data = json.loads((directory / "config.json").read_text())
    del data["observation"]["packed"]  # a model saved before the option existed
    assert not PolicyConfig.from_json_dict(data).observation.packed


class Smuggled:
    """Anything that is not a tensor: a weights-only load must refuse it."""

    def __init__(self) -> None:
        self.payload = "code"


def test_loading_refuses_pickled_objects(tmp_path: Path) -> None:
    directory = tmp_path / "model"
    _saved_policy(directory)
    torch.save({"trunk.0.weight": Smuggled()}, directory / "policy.pt")
    with pytest.raises(InputError, match="cannot load weights"):
        LearnedScheduler.from_dir(directory)
    (directory / "policy.pt").write_bytes(b"not a torch file")
    with pytest.raises(InputError, match=r"policy\.pt"):
        LearnedScheduler.from_dir(directory)


def test_overwriting_keeps_the_previous_model(tmp_path: Path) -> None:
    directory = tmp_path / "model"
    _saved_policy(directory, seed=0)
    first = (directory / "policy.pt").read_bytes()
    with pytest.raises(FileExistsError):
        _saved_policy(directory, seed=1)
    torch.manual_seed(1)
    config = PolicyConfig(observation=ObservationConfig(window=4), network=NetworkConfig(hidden=(16,)))
    save_model(directory, config, PolicyNetwork(config.observation.shape, config.network).state_dict(), overwrite=True)
    backup = tmp_path / "model.previous"
    assert (backup / "policy.pt").read_bytes() == first
    assert (directory / "policy.pt").read_bytes() != first
    assert not (directory / "MODEL_CARD.md").exists()  # the new folder is the new model only
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "model.previous"]  # no staging left over


@pytest.mark.parametrize(
    "content",
    ['{"format": "dl2-policy/1", "observation": {"window": 4', '{"format": "other"}', '{"format": "dl2-policy/1"}'],
    ids=["truncated", "foreign", "incomplete"],
)
def test_a_corrupt_config_is_an_input_error(tmp_path: Path, content: str) -> None:
    directory = tmp_path / "model"
    _saved_policy(directory)
    (directory / "config.json").write_text(content)
    with pytest.raises(InputError, match=r"config\.json"):
        LearnedScheduler.from_dir(directory)
    with pytest.raises(InputError):
        LearnedScheduler.from_dir(tmp_path / "nowhere")


# --- workload sources ----------------------------------------------------------------------------------------------


def test_authors_source_can_leave_job_types_out() -> None:
    """`without=` drops types from the mix (DL2 §6.4's unseen types); without it the draws are unchanged."""
    plain = workload("authors-small", 7)
    assert plain.name == generate_authors_workload(SETTINGS["small"], 7).name == "authors-small-uniform/7"
    assert [job.spec.model for job in plain.jobs] == [
        job.spec.model for job in generate_authors_workload(SETTINGS["small"], 7, without=()).jobs
    ]
    assert {"seq2seq", "dssm"} <= {job.spec.model for job in plain.jobs}
    restricted = workload("authors-small:poisson:without=seq2seq+dssm", 7)
    assert restricted.name == "authors-small-poisson-without-seq2seq+dssm/7"
    assert len(restricted.jobs) == SETTINGS["small"].num_jobs
    assert {job.spec.model for job in restricted.jobs}.isdisjoint({"seq2seq", "dssm"})
    with pytest.raises(InputError, match=r"unknown job type.*gpt"):
        workload("authors-small:without=gpt", 0)


# --- demonstrations ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("teacher_name", ["drf", "optimus", "srpt-knee"])
def test_recorded_demonstrations_replay_the_teacher(teacher_name: str, warm_up_source: str) -> None:
    """With J >= the number of jobs the replay is the teacher's own run (measured: identical average JCT)."""
    jobs = workload(warm_up_source, 2)
    speed = speed_model(Mode.COMPAT)
    observation = ObservationConfig(window=jobs.num_jobs)
    own = simulate(jobs, make_scheduler(teacher_name, speed, True), SimConfig.compat(), speed)
    own_jct = float(np.mean([job.jct_s for job in own.jobs]))
    teacher = make_scheduler(teacher_name, speed, True)
    data, replayed_jct = record(jobs, teacher, SimConfig.compat(), observation, LoadBalancePlacer())
    assert replayed_jct == pytest.approx(own_jct, rel=0.01)
    assert len(data) > 100
    assert data.observations.shape == (len(data), observation.size)
    assert np.all(data.masks[np.arange(len(data)), data.actions] == 1)
    # the teacher's first answer from the initial state is the first recorded action
    simulation = Simulation(jobs, SimConfig.compat(), speed)
    decision = SlotDecision(simulation.begin_slot(), observation.window, True, LoadBalancePlacer())
    teacher.reset()
    assert teacher_action(decision, teacher, None) == data.actions[0]
    sparse, _ = record(jobs, teacher, SimConfig.compat(), observation, LoadBalancePlacer(), every=3)
    assert 0 < len(sparse) < len(data)


def test_dagger_labels_are_the_teachers_answers(warm_up_source: str) -> None:
    jobs = workload(warm_up_source, 2)
    speed = speed_model(Mode.COMPAT)
    teacher = make_scheduler("srpt-knee", speed, True)
    observation = ObservationConfig(window=6)  # fewer columns than jobs: several windows per slot

    def first_allowed(state: np.ndarray, mask: np.ndarray) -> int:
        return int(np.flatnonzero(mask)[0])

    data = record_on_policy(
        jobs, first_allowed, teacher, SimConfig.compat(), observation, LoadBalancePlacer(), max_slots=20
    )
    assert len(data) > 0
    assert np.all(data.masks[np.arange(len(data)), data.actions] == 1)
    assert set(np.unique(data.actions)) - {stop_action(6)}  # not only stops


def test_a_heuristic_until_refused_replays_the_authors_mechanism(warm_up_source: str) -> None:
    """Replayed through a `SlotDecision` (one window), `UntilRefused(h)` is `h`'s own compatibility-mode run."""
    jobs = workload(warm_up_source, 3)
    speed = speed_model(Mode.COMPAT)
    base = make_scheduler("srpt-knee-fill", speed, True)
    own = simulate(jobs, base, SimConfig.compat(), speed)
    observation = ObservationConfig(window=jobs.num_jobs)
    _, replayed = record(jobs, UntilRefused(base), SimConfig.compat(), observation, LoadBalancePlacer(), every=50)
    assert replayed == pytest.approx(float(np.mean([job.jct_s for job in own.jobs])), rel=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_rollout_teacher_never_does_worse_than_its_base(rl_source: str, seed: int) -> None:
    """Rollout policy improvement: the base's own slot is always a candidate, so the teacher's run is at least as
    good as the base heuristic's; it leaves the run it looks ahead from untouched."""
    jobs = workload(rl_source, seed)
    speed = speed_model(Mode.COMPAT)
    own = simulate(jobs, make_scheduler("srpt-knee-fill", speed, True), SimConfig.compat(), speed)
    own_jct = float(np.mean([job.jct_s for job in own.jobs]))
    observation = ObservationConfig(window=jobs.num_jobs)
    teacher = make_rollout_teacher("rollout:srpt-knee-fill", speed, True, observation.window)
    assert teacher.name == "rollout:srpt-knee-fill"
    assert len(teacher.variants) == len(KNEES) * len(FILLS) + 1
    data, jct = record(jobs, teacher, SimConfig.compat(), observation, LoadBalancePlacer(), every=5)
    assert jct <= own_jct * (1 + 1e-12)
    assert teacher.rollouts > 0 and sum(teacher.chosen.values()) > 0
    assert np.all(data.masks[np.arange(len(data)), data.actions] == 1)
    simulation = Simulation(jobs, SimConfig.compat(), speed)
    teacher.reset()
    view = simulation.begin_slot()
    chosen = teacher.heuristic_for(simulation, view)
    assert chosen in teacher.variants
    assert (simulation.slot, simulation.progress, simulation.num_finished) == (view.slot, [0.0] * jobs.num_jobs, 0)


def test_dagger_asks_a_slot_teacher_only_on_recorded_slots(warm_up_source: str) -> None:
    """A slot teacher's choice may cost many simulations: DAgger asks for it only where it records labels."""
    speed = speed_model(Mode.COMPAT)
    base = make_scheduler("srpt-knee", speed, True)
    asked: list[int] = []

    class Counting:
        name = "counting"

        def reset(self) -> None:
            base.reset()

        def heuristic_for(self, simulation: Simulation, view: object) -> object:
            asked.append(simulation.slot)
            return base

    def first_allowed(state: np.ndarray, mask: np.ndarray) -> int:
        return int(np.flatnonzero(mask)[0])

    jobs = workload(warm_up_source, 2)
    observation = ObservationConfig(window=6)
    data = record_on_policy(
        jobs, first_allowed, Counting(), SimConfig.compat(), observation, LoadBalancePlacer(), every=3, max_slots=9
    )
    assert len(asked) == 3 and len(data) > 0


def test_rollout_teachers_exist_for_srpt_knee_fill_alone_or_over_named_heuristics() -> None:
    with pytest.raises(InputError, match="rollout teachers improve one of: srpt-knee-fill"):
        make_rollout_teacher("rollout:drf", speed_model(Mode.COMPAT), True, 10)
    with pytest.raises(InputError, match="unknown scheduler 'nope'"):
        make_rollout_teacher("rollout:optimus+nope", speed_model(Mode.REALISTIC), False, 10)
    check_scheduler("teacher", "rollout:optimus+speedup-hull", "realistic", rollout=True)
    with pytest.raises(ConfigError, match="rollout:optimus\\+nope"):
        check_scheduler("teacher", "rollout:optimus+nope", "realistic", rollout=True)
    assert rollout_name("speedup-hull", ("optimus", "speedup-hull")) == "rollout:speedup-hull+optimus"


def test_a_rollout_teacher_over_two_heuristics_is_never_worse_than_its_base() -> None:
    """`rollout:optimus+speedup-hull` on the Philly week's first 12 jobs on 4 servers (realistic mode, isolating
    placement): the base first among the variants, its run at least as good as the base's replayed alone, and it
    takes the other heuristic's slot somewhere (there it found a better continuation)."""
    jobs = first_jobs(first_nodes(load_workloads("philly", seed=0)[0], 4), 12)
    speed, world = catalogue_speed(), World.catalogue(Mode.REALISTIC)
    observation = ObservationConfig(window=jobs.num_jobs)
    config = SimConfig.realistic(seed=0)
    teacher = make_rollout_teacher(
        "rollout:optimus+speedup-hull", speed, False, observation.window, StrictIsolatePlacer()
    )
    assert teacher.name == "rollout:optimus+speedup-hull"
    assert [v.name for v in teacher.variants] == ["optimus", "speedup-hull"]
    _, base_jct = record(jobs, teacher.base, config, observation, StrictIsolatePlacer(), every=50, world=world)
    _, jct = record(jobs, teacher, config, observation, StrictIsolatePlacer(), every=50, world=world)
    assert jct <= base_jct * (1 + 1e-12)
    assert teacher.rollouts > 0 and teacher.chosen.get(1, 0) > 0


def test_a_search_teacher_is_replayed_exactly_and_checked_when_configured() -> None:
    """Expert iteration's teacher: `lookahead:optimus+speedup-hull` recorded on a contended slice (30 jobs on 3
    servers) replays, action by action through the policy's `SlotDecision`, to the very run the search makes alone
    (so the student learns the search's decisions, not an approximation); every label is one its mask allows. A
    search in compat mode or over an unknown candidate is refused by the configuration, naming the teacher."""
    source = "synthetic-philly:first=30:servers=3"
    config = training.WarmUpConfig(
        teacher="lookahead:optimus+speedup-hull", mode="realistic", source=source, placer="isolate-strict",
        observation=ObservationConfig(window=30),
    )  # fmt: skip
    world = World.catalogue(Mode.REALISTIC)
    sim = SimConfig.realistic(seed=1)
    data, replayed_jct = record(workload(source, 1), training.make_teacher(config), sim, config.observation,
                                StrictIsolatePlacer())  # fmt: skip
    alone = simulate(workload(source, 1), training.make_teacher(config), sim, world.speed, world.interference)
    assert replayed_jct == pytest.approx(float(np.mean([job.jct_s for job in alone.jobs])), rel=1e-12)
    assert len(data) > 0 and all(data.masks[i, action] for i, action in enumerate(data.actions))
    with pytest.raises(ConfigError, match=r"teacher.*realistic mode"):
        training.WarmUpConfig(teacher="lookahead:optimus+speedup-hull", mode="compat")
    with pytest.raises(ConfigError, match="neither a heuristic nor a model folder"):
        training.WarmUpConfig(teacher="lookahead:optimus+nope", mode="realistic")
    with pytest.raises(ConfigError, match="the first a heuristic"):
        training.WarmUpConfig(teacher="lookahead-fitted:models/dl2-philly+optimus", mode="realistic")


# --- supervised warm-up --------------------------------------------------------------------------------------------


def test_recording_in_worker_processes_gives_the_same_demonstrations(warm_up_source: str) -> None:
    config = training.WarmUpConfig(teacher="srpt-knee", source=warm_up_source, observation=ObservationConfig(window=6))
    finished: list[None] = []
    alone = training.record_teacher(config, [0, 1, 2])
    parallel = training.record_teacher(replace(config, workers=2), [0, 1, 2], lambda: finished.append(None))
    assert len(finished) == 3
    for (data, jct), (same_data, same_jct) in zip(alone, parallel, strict=True):
        assert jct == same_jct
        assert np.array_equal(data.actions, same_data.actions)
        assert np.array_equal(data.observations, same_data.observations)


def test_warm_up_imitates_srpt_knee(warm_up_source: str) -> None:
    """Behaviour cloning on 4 teacher runs then one DAgger round; held-out imitation accuracy above 0.9.

    Measured with this configuration (seeds 0-5): 0.969-0.994 after DAgger (0.955-0.985 before it); seed 0 gives
    0.98. The DAgger run is capped at 60 slots: a student that stops too early starves its jobs and would
    otherwise drive for 3,000 slots (20-30 s here)."""
    config = training.WarmUpConfig(
        teacher="srpt-knee",
        source=warm_up_source,
        episodes=4,
        seed_offset=0,
        held_out_seed=7,
        record_every=2,
        dagger_rounds=1,
        dagger_episodes=1,
        dagger_max_slots=60,
        observation=ObservationConfig(window=20),
        supervised=SupervisedConfig(epochs=10, learning_rate=3e-3, network=NetworkConfig(hidden=(32, 32))),
    )
    epochs: list[tuple[int, float, float]] = []
    policy, history, facts = training.warm_up(config, on_epoch=lambda *values: epochs.append(values))
    assert len(history.held_out_accuracy) == len(history.train_loss) == len(epochs) == 20
    assert facts["held_out_accuracy"] == history.held_out_accuracy[-1] > 0.9
    assert facts["demonstrations"] > facts["held_out_demonstrations"] > 0
    assert history.train_loss[-1] < history.train_loss[0]
    assert isinstance(policy, PolicyNetwork)


def test_train_supervised_is_deterministic_for_a_seed() -> None:
    rng = np.random.default_rng(0)
    num_actions = 3 * SHAPE.window + 1
    masks = random_masks(rng, 300, num_actions)
    actions = np.array([rng.choice(np.flatnonzero(mask)) for mask in masks], dtype=np.int64)
    data = Demonstrations(random_observations(rng, 300), masks, actions)
    held_out = Demonstrations(data.observations[:50], data.masks[:50], data.actions[:50])
    config = SupervisedConfig(epochs=3, batch_size=64, network=NetworkConfig(hidden=(16,)), seed=5)
    first, first_history = train_supervised(data, held_out, config, SHAPE)
    second, second_history = train_supervised(data, held_out, config, SHAPE)
    assert first_history.train_loss == second_history.train_loss
    assert first_history.held_out_accuracy == second_history.held_out_accuracy
    for key, value in first.state_dict().items():
        assert torch.equal(value, second.state_dict()[key]), key
    other, _ = train_supervised(data, held_out, replace(config, seed=6), SHAPE)
    assert not torch.equal(other.state_dict()["jobs.encoder.0.weight"], first.state_dict()["jobs.encoder.0.weight"])


def test_label_smoothing_spreads_over_possible_actions_only_by_hand() -> None:
    # two possible actions with probabilities 3/4 and 1/4, the third impossible (masked)
    logits = torch.tensor([[math.log(3.0), 0.0, MASKED_LOGIT]])
    masks = torch.tensor([[1, 1, 0]], dtype=torch.int8)
    teacher = torch.tensor([0])
    plain = -math.log(0.75)
    assert float(imitation_loss(logits, masks, teacher, 0.0)) == pytest.approx(plain)
    spread = -(math.log(0.75) + math.log(0.25)) / 2
    assert float(imitation_loss(logits, masks, teacher, 0.1)) == pytest.approx(0.9 * plain + 0.1 * spread)


def test_label_smoothing_keeps_the_teachers_unused_actions_reachable() -> None:
    rng = np.random.default_rng(0)
    num_actions = 3 * SHAPE.window + 1
    masks = np.ones((300, num_actions), dtype=np.int8)
    stop = num_actions - 1
    actions = np.full(300, stop, dtype=np.int64)  # the teacher always stops
    data = Demonstrations(random_observations(rng, 300), masks, actions)
    config = SupervisedConfig(epochs=30, batch_size=64, network=NetworkConfig(hidden=(16,)), seed=0)
    gaps = {}
    for smoothing in (0.0, 0.1):
        policy, _ = train_supervised(data, data, replace(config, label_smoothing=smoothing), SHAPE)
        with torch.no_grad():
            log_probs = torch.log_softmax(
                policy.masked_logits(torch.from_numpy(data.observations), torch.from_numpy(masks)), 1
            )
        assert bool((log_probs.argmax(1) == stop).all())
        gaps[smoothing] = float((log_probs[:, stop, None] - log_probs).mean())
    # smoothed, the others keep 0.1 / 16 each: a log-probability gap of log((0.9 + 0.1 / 16) / (0.1 / 16)) = 4.98
    # to each of the 15 (averaged with the stop action's own 0); unsmoothed, the gap only grows with training
    assert gaps[0.1] == pytest.approx(15 / 16 * math.log(145), abs=0.5)
    assert gaps[0.0] > gaps[0.1] + 3


# --- returns and advantages ----------------------------------------------------------------------------------------


def test_slot_returns_by_hand() -> None:
    rewards = np.array([1.0, -2.0, 4.0])
    np.testing.assert_allclose(slot_returns(rewards, 0.5, myopic=False), [1.0 - 1.0 + 1.0, -2.0 + 2.0, 4.0])
    np.testing.assert_allclose(slot_returns(rewards, 0.5, myopic=True), rewards)
    assert slot_returns(np.zeros(0), 0.9, myopic=False).shape == (0,)


def _hand_episode(size: int, num_actions: int) -> Episode:
    """Decisions in slots 1, 1, 2 and 4 of six: slot 0 ran before the first decision, slots 3 and 5 needed none."""
    slot_of = np.array([1, 1, 2, 4])
    observations = np.zeros((4, size), dtype=np.float32)
    observations[:, 0] = [0.1, 0.2, 0.3, 0.4]
    return Episode(
        observations=observations,
        masks=np.ones((4, num_actions), dtype=np.int8),
        actions=np.zeros(4, dtype=np.int64),
        log_probs=np.zeros(4, dtype=np.float32),
        slot_of=slot_of,
        explored=np.zeros(4, dtype=bool),
        slot_rewards=np.array([-5.0, -1.0, -2.0, -3.0, -4.0, -6.0]),
        avg_jct_s=1.0,
        num_slots=6,
        workload="hand",
    )


def _learner(value_constant: float | None = None, **changes: object) -> ActorCritic:
    env = EnvConfig(observation=ObservationConfig(window=4))
    config = RLConfig(gamma=0.5, network=NetworkConfig(hidden=(8,)), **changes)  # type: ignore[arg-type]
    learner = ActorCritic(env, config)
    if value_constant is not None:  # V(s) = constant (the return scale starts at mean 0, deviation 1)
        with torch.no_grad():
            learner.value.head.weight.zero_()
            learner.value.head.bias.fill_(value_constant)
    return learner


# gamma = 0.5; rewards of the decision slots 1, 2, 4 with the folded slots 3 and 5:
#   folded = [-1, -2 + 0.5 * -3, -4 + 0.5 * -6] = [-1, -3.5, -7], discounts to the next decision slot [0.5, 0.25, 0.25]
#   returns: G4 = -7, G2 = -3.5 + 0.25 * -7 = -5.25, G1 = -1 + 0.5 * -5.25 = -3.625
#   (directly: -1 + 0.5 * -2 + 0.25 * -3 + 0.125 * -4 + 0.0625 * -6 = -3.625)
RETURNS = [-3.625, -3.625, -5.25, -7.0]


@pytest.mark.parametrize(
    ("changes", "value", "advantages", "targets"),
    [
        # Monte-Carlo returns, no baseline
        ({"gae_lambda": 1.0, "value_baseline": False}, None, RETURNS, [-3.625, -5.25, -7.0]),
        # DL2's myopic returns: each decision slot's own reward (the folded slots are dropped)
        ({"myopic": True, "value_baseline": False}, None, [-1.0, -1.0, -2.0, -4.0], [-1.0, -2.0, -4.0]),
        # GAE, lambda 0.5, V = 0: A4 = -7, A2 = -3.5 + 0.5 * 0.25 * -7 = -4.375, A1 = -1 + 0.5 * 0.5 * -4.375
        ({"gae_lambda": 0.5, "value_baseline": False}, None, [-2.09375] * 2 + [-4.375, -7.0], [-2.09375, -4.375, -7.0]),
        # GAE, lambda 0.5, V = 1: deltas -1 + 0.5 - 1 = -1.5, -3.5 + 0.25 - 1 = -4.25, -7 + 0 - 1 = -8;
        #   A4 = -8, A2 = -4.25 + 0.125 * -8 = -5.25, A1 = -1.5 + 0.25 * -5.25 = -2.8125; targets = A + V
        ({"gae_lambda": 0.5}, 1.0, [-2.8125] * 2 + [-5.25, -8.0], [-1.8125, -4.25, -7.0]),
        # Monte-Carlo with V = 1: A = G - 1
        ({"gae_lambda": 1.0}, 1.0, [r - 1.0 for r in RETURNS], [-3.625, -5.25, -7.0]),
    ],
    ids=["monte-carlo", "myopic", "gae-no-baseline", "gae-baseline", "monte-carlo-baseline"],
)
def test_advantages_and_targets_by_hand(
    changes: dict[str, object], value: float | None, advantages: list[float], targets: list[float]
) -> None:
    learner = _learner(value, **changes)
    episode = _hand_episode(learner.env.observation.size, 13)
    got_advantages, got_returns, starts, got_targets = learner._targets(episode)
    np.testing.assert_allclose(got_advantages, advantages, rtol=1e-6)
    np.testing.assert_allclose(got_targets, targets, rtol=1e-6)
    expected_returns = [-1.0, -1.0, -2.0, -4.0] if changes.get("myopic") else RETURNS
    np.testing.assert_allclose(got_returns, expected_returns, rtol=1e-6)
    np.testing.assert_array_equal(starts[:, 0], np.array([0.1, 0.3, 0.4], dtype=np.float32))


def test_sibling_advantages_by_hand() -> None:
    """Three episodes: two on workload "a" (siblings of each other), one alone on "b". gamma = 0.5.
    a1 rewards [-2, -2] -> returns-to-go [-3, -2]; a2 rewards [-4] -> [-4] (0 after it ended).
    a1's decisions in slots 0 and 1: -3 - (-4) = 1 and -2 - 0 = -2; a2's decision in slot 0: -4 - (-3) = -1;
    b has no sibling: 0."""
    size, actions = 4, 13

    def episode(name: str, rewards: list[float], slots: list[int]) -> Episode:
        count = len(slots)
        return Episode(
            np.zeros((count, size), dtype=np.float32),
            np.ones((count, actions), dtype=np.int8),
            np.zeros(count, dtype=np.int64),
            np.zeros(count, dtype=np.float32),
            np.array(slots),
            np.zeros(count, dtype=bool),
            np.array(rewards),
            1.0,
            len(rewards),
            name,
        )

    episodes = [episode("a", [-2.0, -2.0], [0, 1]), episode("a", [-4.0], [0]), episode("b", [-1.0], [0, 0])]
    np.testing.assert_allclose(sibling_advantages(episodes, 0.5), [1.0, -2.0, -1.0, 0.0, 0.0])


def test_groups_of_episodes_share_a_workload_and_differ_in_sampling() -> None:
    learner = _learner(group_size=2, episodes_per_iteration=4, sibling_baseline=True)
    tasks = learner.training_tasks(0) + learner.training_tasks(1)
    offset = learner.config.train_seed_offset
    assert [t.workload_seed - offset for t in tasks] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert len({t.episode_seed for t in tasks}) == len(tasks)


# --- exploration ---------------------------------------------------------------------------------------------------


@st.composite
def _decisions(draw: st.DrawFn, work_conserving: bool) -> tuple[SlotDecision, list[int]]:
    """A slot decision on a drawn cluster and jobs, advanced by a drawn number of allowed actions."""
    num_nodes = draw(st.integers(1, 3))
    cluster = ClusterSpec(
        tuple(
            NodeSpec(i, Resources(gpu=float(draw(st.sampled_from([4, 8]))), cpu=float(draw(st.sampled_from([2, 8])))))
            for i in range(num_nodes)
        )
    )
    jobs = []
    for index in range(draw(st.integers(1, 6))):
        cap = draw(st.integers(1, 4))
        jobs.append(
            make_job(f"j{index}", 10, max_tasks=cap) if draw(st.booleans()) else allreduce_job(f"r{index}", cap)
        )
    view = Simulation(Workload("drawn", cluster, tuple(jobs), 100.0), SimConfig.compat(), LinearSpeed()).begin_slot()  # type: ignore[arg-type]
    decision = SlotDecision(
        view, draw(st.integers(1, 4)), draw(st.booleans()), LoadBalancePlacer(), work_conserving=work_conserving
    )
    picks = draw(st.lists(st.integers(0, 100), max_size=6))
    for pick in picks:
        if decision.done:
            break
        allowed = np.flatnonzero(decision.mask())
        decision.step(int(allowed[pick % len(allowed)]))
    return decision, draw(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=5))


@settings(max_examples=80, deadline=None)
@given(_decisions(work_conserving=False), st.floats(0.25, 4.0), st.sampled_from([0.0, 0.05, 1.0]))
def test_exploration_only_takes_allowed_actions(
    case: tuple[SlotDecision, list[int]], ratio: float, stop_probability: float
) -> None:
    decision, seeds = case
    if decision.done:
        return
    mask = decision.mask()
    config = ExplorationConfig(stop_probability=stop_probability)
    for seed in seeds:
        action = exploratory_action(decision, mask, ratio, config, np.random.default_rng(seed))
        assert mask[action] == 1


def test_exploration_respects_a_work_conserving_mask() -> None:
    cluster = ClusterSpec.homogeneous(1, Resources(gpu=8.0, cpu=8.0))
    view = Simulation(
        Workload("r", cluster, (allreduce_job("r", 2),), 100.0),
        SimConfig.compat(),
        LinearSpeed(),  # type: ignore[arg-type]
    ).begin_slot()
    decision = SlotDecision(view, 2, True, work_conserving=True)
    mask = decision.mask()
    assert mask[stop_action(2)] == 0 and mask[0] == 1
    for seed in range(50):
        action = exploratory_action(
            decision, mask, 1.0, ExplorationConfig(stop_probability=0.05), np.random.default_rng(seed)
        )
        assert mask[action] == 1


# --- actor-critic --------------------------------------------------------------------------------------------------


def _rl(source: str, **changes: object) -> tuple[EnvConfig, RLConfig]:
    env = EnvConfig(observation=ObservationConfig(window=8), reward="jct", max_slots=100)
    config = RLConfig(
        iterations=2,
        episodes_per_iteration=2,
        train_source=source,
        validation_source=source,
        validation_seeds=(5,),
        validate_every=1,
        validation_max_slots=300,
        network=NetworkConfig(hidden=(16,)),
        exploration=ExplorationConfig(epsilon_start=0.3),
        replay=ReplayConfig(capacity=5_000),
        minibatch_size=256,
    )
    return env, replace(config, **changes)  # type: ignore[arg-type]


def test_actor_critic_runs_end_to_end(rl_source: str, tmp_path: Path) -> None:
    torch.set_num_threads(1)
    env, config = _rl(rl_source)
    seen = []
    trainer, state = training.fine_tune(env, config, LocalPool(0), on_iteration=seen.append)
    assert [stats.iteration for stats in state.history] == [0, 1] == [stats.iteration for stats in seen]
    assert all(stats.decisions > 0 and stats.validation_jct_s is not None for stats in state.history)
    assert all(math.isfinite(stats.policy_loss) and math.isfinite(stats.value_loss) for stats in state.history)
    assert state.best_iteration in (-1, 0, 1)
    assert trainer.replay is not None and trainer.replay.size > 0
    directory = tmp_path / "rl-model"
    policy_config = PolicyConfig(observation=env.observation, network=config.network)
    save_model(directory, policy_config, state.best_policy, state.best_value)
    scheduler = LearnedScheduler.from_dir(directory)
    view = Simulation(workload(rl_source, 0), SimConfig.compat(), speed_model(Mode.COMPAT)).begin_slot()
    allocation = scheduler.schedule(view)
    assert len(allocation) >= 1  # work-conserving: something is granted


@pytest.mark.parametrize(
    "changes",
    [
        {"value_baseline": False},
        {"exploration": ExplorationConfig(enabled=False)},
        {"replay": ReplayConfig(enabled=False)},
        {"myopic": True},
        {"clip": 0.0},
        {"clip": 0.2, "epochs_per_iteration": 2},
        {"gae_lambda": 1.0},
        {"max_samples_per_iteration": 50},
        {"network": NetworkConfig(hidden=(16,), kind="mlp")},
    ],
    ids=[
        "no-baseline",
        "no-exploration",
        "no-replay",
        "myopic",
        "reinforce",
        "ppo-clip",
        "monte-carlo",
        "subsample",
        "mlp",
    ],
)
def test_actor_critic_switches_run(rl_source: str, changes: dict[str, object]) -> None:
    torch.set_num_threads(1)
    env, config = _rl(rl_source, iterations=2, episodes_per_iteration=1, **changes)
    trainer, state = training.fine_tune(env, config, LocalPool(0))
    assert len(state.history) == 2
    assert all(math.isfinite(stats.policy_loss) for stats in state.history)
    if not config.value_baseline:
        assert all(stats.value_loss == 0.0 for stats in state.history)
    assert set(state.best_policy) == set(trainer.policy.state_dict())


def test_perturbation_credit_runs_end_to_end(rl_source: str) -> None:
    torch.set_num_threads(1)
    env, config = _rl(rl_source, credit="perturbation", perturbation_probability=0.5, learning_rate=0.01)
    trainer, state = training.fine_tune(env, config, LocalPool(0))
    assert len(state.history) == 2
    assert all(stats.validation_jct_s is not None and math.isfinite(stats.policy_loss) for stats in state.history)
    assert set(state.best_policy) == set(trainer.policy.state_dict())


def test_perturbed_slots_carry_their_exact_advantage(warm_model: Path, tiny_csv: Path) -> None:
    """Every slot perturbed: a batch holds only slots whose allocation differed from the greedy one, each decision
    with its slot's advantage; the same task gives the same batch (compatibility mode is deterministic); and its
    greedy baseline is the greedy policy's own run."""
    greedy = LearnedScheduler.from_dir(warm_model, compat=True)
    task = PerturbationTask(greedy.policy, greedy.config, str(tiny_csv), 0, 1, slot_probability=1.0)
    batch = run_perturbations(task)
    again = run_perturbations(task)
    np.testing.assert_array_equal(batch.actions, again.actions)
    np.testing.assert_array_equal(batch.advantages, again.advantages)
    assert batch.perturbed_slots >= batch.changed_slots >= batch.improved_slots >= 0
    assert len(batch.actions) == len(batch.advantages) == len(batch.observations) == len(batch.masks)
    assert batch.changed_slots > 0
    assert all(batch.masks[np.arange(len(batch.actions)), batch.actions] == 1)
    assert len(np.unique(batch.advantages)) <= batch.changed_slots
    result = simulate(workload(task.source, 0), greedy, SimConfig.compat(), speed_model(Mode.COMPAT))
    assert batch.greedy_avg_jct_s == pytest.approx(float(np.mean([job.jct_s for job in result.jobs])))


class _OneDecisionReplaced:
    """The greedy policy, except that in `slot` its decision number `index` is `action` (None: unchanged), and
    every later slot is decided by `after`: the run that `run_deviations` compares, rebuilt as a scheduler."""

    name = "one decision replaced"

    def __init__(self, greedy: LearnedScheduler, slot: int, index: int, action: int | None, after: object) -> None:
        self.greedy, self.slot, self.index, self.action, self.after = greedy, slot, index, action, after
        self.observer = Observer(greedy.config.observation)

    def reset(self) -> None:
        self.greedy.reset()

    def schedule(self, view: ClusterView) -> Allocation:
        if view.slot < self.slot:
            return self.greedy.schedule(view)
        if view.slot == self.slot:
            observation = self.greedy.config.observation
            decision = SlotDecision(view, observation.window, True, None, work_conserving=True, packed=False)
            step = 0
            while not decision.done:
                action = self.greedy.policy.greedy_action(self.observer(decision), decision.mask())
                decision.step(self.action if step == self.index and self.action is not None else action)
                step += 1
            return decision.allocation()
        return self.after.schedule(view)  # type: ignore[attr-defined]


@pytest.mark.parametrize("continuation", ["policy", "drf"])
def test_deviated_decisions_carry_their_exact_advantage(warm_model: Path, tiny_csv: Path, continuation: str) -> None:
    """Each evaluated action's advantage is the difference between two whole runs that a plain scheduler
    reproduces: greedy up to the slot, that slot with the decision replaced (or not), then the continuation."""
    greedy = LearnedScheduler.from_dir(warm_model, compat=True)
    task = DeviationTask(
        greedy.policy, greedy.config, str(tiny_csv), 0, 1, slot_probability=0.5, continuation=continuation
    )
    batch = run_deviations(task)
    again = run_deviations(task)
    np.testing.assert_array_equal(batch.actions, again.actions)
    np.testing.assert_array_equal(batch.advantages, again.advantages)
    states = len(batch.slots)
    assert states > 0
    assert batch.actions.shape == batch.advantages.shape == batch.evaluated.shape == (states, 1 + task.alternatives)
    assert batch.evaluated[:, 0].all() and not batch.advantages[:, 0].any()
    for observation, mask, row, evaluated in zip(
        batch.observations, batch.masks, batch.actions, batch.evaluated, strict=True
    ):
        assert row[0] == greedy.policy.greedy_action(observation, mask)
        tried = row[evaluated][1:]
        assert len(set(tried.tolist())) == len(tried) > 0 and row[0] not in tried
        assert all(mask[tried] == 1)
    work = workload(task.source, 0)
    speed, config = speed_model(Mode.COMPAT), SimConfig.compat(0)
    after = greedy if continuation == "policy" else make_scheduler(continuation, speed, True)

    def avg_jct_slots(slot: int, index: int, action: int | None) -> float:
        result = simulate(work, _OneDecisionReplaced(greedy, slot, index, action, after), config, speed)
        return float(np.mean([job.jct_s for job in result.jobs])) / work.slot_s

    checked = 0
    for state in range(min(states, 3)):
        slot, index = int(batch.slots[state]), int(batch.indices[state])
        base = avg_jct_slots(slot, index, None)
        for column in np.flatnonzero(batch.evaluated[state])[1:3]:
            action = int(batch.actions[state, column])
            expected = base - avg_jct_slots(slot, index, action)
            assert batch.advantages[state, column] == pytest.approx(expected, abs=1e-9)
            checked += 1
    assert checked > 0


def test_the_deviation_update_moves_the_policy_towards_better_actions(rl_source: str) -> None:
    torch.set_num_threads(1)
    env, config = _rl(rl_source, credit="deviation", learning_rate=0.01, epochs_per_iteration=4)
    trainer = ActorCritic(env, config)
    rng = np.random.default_rng(0)
    size, num_actions = env.observation.shape, 3 * env.observation.window + 1
    observations = random_observations(rng, 200, size)
    masks = np.ones((200, num_actions), dtype=np.int8)

    def log_probs() -> np.ndarray:
        with torch.no_grad():
            return torch.log_softmax(
                trainer.policy.masked_logits(torch.from_numpy(observations), torch.from_numpy(masks)), 1
            ).numpy()

    before = log_probs()
    greedy = before.argmax(1)
    better = (greedy + 1) % num_actions  # measured better than the greedy action in every state
    worse = (greedy + 2) % num_actions  # measured worse
    rows = np.arange(200)
    batch = DeviationBatch(
        observations,
        masks,
        np.stack([greedy, better, worse], axis=1),
        np.stack([np.zeros(200), np.full(200, 0.01), np.full(200, -0.01)], axis=1),
        np.ones((200, 3), dtype=bool),
        rows,
        np.zeros(200, dtype=np.int64),
        1.0,
        "synthetic",
    )
    loss, entropy = trainer.update_deviations([batch])
    assert math.isfinite(loss) and math.isfinite(entropy)
    after = log_probs()
    gain = lambda table, actions: table[rows, actions] - table[rows, greedy]  # noqa: E731
    assert np.mean(gain(after, better) - gain(before, better)) > 0.5
    # the worse action loses ground against the better one (it shares the better one's job column or the next)
    assert np.mean((after[rows, better] - after[rows, worse]) - (before[rows, better] - before[rows, worse])) > 0.5


def test_deviation_credit_runs_end_to_end(rl_source: str) -> None:
    torch.set_num_threads(1)
    env, config = _rl(rl_source, credit="deviation", perturbation_probability=0.3, alternatives=2)
    trainer, state = training.fine_tune(env, config, LocalPool(0))
    assert len(state.history) == 2
    assert all(stats.validation_jct_s is not None and math.isfinite(stats.policy_loss) for stats in state.history)
    assert set(state.best_policy) == set(trainer.policy.state_dict())


def test_deviation_credit_needs_compatibility_mode(warm_model: Path, tiny_csv: Path) -> None:
    greedy = LearnedScheduler.from_dir(warm_model, compat=True)
    task = DeviationTask(greedy.policy, PolicyConfig(mode="realistic"), str(tiny_csv), 0, 1, slot_probability=0.5)
    with pytest.raises(ValueError, match="compatibility mode"):
        run_deviations(task)


def test_perturbation_credit_needs_compatibility_mode(rl_source: str) -> None:
    env, config = _rl(rl_source, credit="perturbation")
    task = replace(ActorCritic(env, config).perturbation_tasks()[0], config=PolicyConfig(mode="realistic"))
    with pytest.raises(ValueError, match="compatibility mode"):
        run_perturbations(task)


def _episode_arrays(episode: Episode) -> list[np.ndarray]:
    return [
        episode.observations,
        episode.masks,
        episode.actions,
        episode.log_probs,
        episode.slot_of,
        episode.explored,
        episode.slot_rewards,
    ]


def test_worker_processes_play_the_same_episodes(rl_source: str) -> None:
    env, config = _rl(rl_source, episodes_per_iteration=3, exploration=ExplorationConfig(epsilon_start=0.5))
    trainer = ActorCritic(env, config)
    tasks = [*trainer.training_tasks(0), *trainer.validation_tasks()]
    here = LocalPool(0).run(tasks)
    pool = LocalPool(2)
    try:
        there = pool.run(tasks)
    finally:
        pool.close()
    assert any(episode.explored.any() for episode in here)
    for mine, theirs in zip(here, there, strict=True):
        for a, b in zip(_episode_arrays(mine), _episode_arrays(theirs), strict=True):
            np.testing.assert_array_equal(a, b)
        assert (mine.num_slots, mine.workload) == (theirs.num_slots, theirs.workload)
        assert mine.avg_jct_s == theirs.avg_jct_s or (math.isnan(mine.avg_jct_s) and math.isnan(theirs.avg_jct_s))
    # and the same task run again in this process is the same episode
    again = run_episode(tasks[0])
    np.testing.assert_array_equal(again.actions, here[0].actions)


def test_a_world_decides_where_the_learners_episodes_run(rl_source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Training and validation episodes run in the learner's world (a calibrated twin, say: `Dl2Env`'s test shows
    the world at work); exact credits, which replay the catalogue, refuse another world."""
    env, config = _rl(rl_source)
    catalogue = World.catalogue(env.sim.mode)
    other = World(
        catalogue.speed,
        InterferenceModel({v: {a: 2.0 for a in row} for v, row in catalogue.interference.matrix.items()}),
    )
    trainer = ActorCritic(env, config, world=other)
    tasks = [*trainer.training_tasks(0), *trainer.validation_tasks()]
    assert all(task.world is other for task in tasks)
    assert all(task.world is None for task in ActorCritic(env, config).validation_tasks())
    worlds = []
    real_env = rollout.Dl2Env

    def spy(workloads, config, world=None):  # type: ignore[no-untyped-def]
        worlds.append(world)
        return real_env(workloads, config, world)

    monkeypatch.setattr(rollout, "Dl2Env", spy)
    run_episode(tasks[-1])
    assert worlds == [other]
    with pytest.raises(ValueError, match="replays the catalogue"):
        ActorCritic(env, replace(config, credit="perturbation"), world=other)


def test_episodes_record_what_the_learner_needs(rl_source: str) -> None:
    env, config = _rl(rl_source)
    trainer = ActorCritic(env, config)
    task = replace(trainer.training_tasks(0)[0], epsilon=0.3)
    episode = run_episode(task)
    n = episode.num_decisions
    assert n > 0
    assert episode.observations.shape == (n, env.observation.size)
    assert np.all(episode.masks[np.arange(n), episode.actions] == 1)  # exploration picks allowed actions here
    assert np.all(np.diff(episode.slot_of) >= 0) and episode.slot_of[-1] < len(episode.slot_rewards)
    assert np.all(episode.log_probs[episode.explored] == 0.0) and np.all(episode.log_probs <= 0.0)
    assert np.all(episode.slot_rewards <= 0.0)  # 'jct' reward
    quiet = run_episode(EpisodeTask(task.policy, env, rl_source, 0, 0, greedy=True, record=False))
    assert quiet.num_decisions == 0 and quiet.num_slots > 0


# --- the commands --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six jobs in the common trace schema on two 4-GPU nodes (a nodes_gpu.csv beside the jobs)."""
    folder = tmp_path_factory.mktemp("csv")
    (folder / "nodes_gpu.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,131072,4,V100\nn1,32000,131072,4,V100\n"
    )
    rows = [
        "a,0,1,3600,unknown,unknown",
        "b,0,2,1800,unknown,unknown",
        "c,300,1,600,unknown,resnet-50",
        "d,700,4,1200,unknown,unknown",
        "e,900,1,2400,unknown,unknown",
        "f,1500,2,900,unknown,unknown",
    ]
    path = folder / "tiny.csv"
    path.write_text("\n".join([",".join(COMMON_COLUMNS), *rows]) + "\n")
    return path


@pytest.fixture(scope="module")
def warm_model(tiny_csv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`dl2 train-sl` on the tiny CSV. DRF is the teacher: it always grants bundles, so even a crude imitation
    never starves a job (an srpt-knee student of 57 demonstrations and one epoch grants workers, stops before
    their PS and stalls: `evaluate` then fails after 2,000 idle slots, and `train-rl` validation hits its
    3,000-slot cap)."""
    out = tmp_path_factory.mktemp("models") / "warm"
    code = main(
        [
            *("train-sl", "--teacher", "drf", "--episodes", "1", "--epochs", "20", "--learning-rate", "0.01"),
            *("--record-every", "1", "--dagger-rounds", "0", "--window", "10", "--hidden", "16"),
            *("--source", str(tiny_csv), "--mode", "compat", "--out", str(out)),
        ]
    )
    assert code == 0
    return out


def test_train_sl_writes_a_model_folder(warm_model: Path) -> None:
    assert {p.name for p in warm_model.iterdir()} >= {"policy.pt", "config.json", "MODEL_CARD.md", "learning_curve.png"}
    config, metadata = load_config(warm_model)
    assert (config.observation.window, config.network.hidden, config.mode) == (10, (16,), "compat")
    assert metadata["kind"] == "warm-up" and metadata["facts"]["demonstrations"] > 0
    assert len(metadata["history"]["train_loss"]) == 20


def test_train_sl_continues_a_model_on_dagger_rounds_only(warm_model: Path, tiny_csv: Path, tmp_path: Path) -> None:
    out = tmp_path / "continued"
    common = ("train-sl", "--teacher", "drf", "--source", str(tiny_csv), "--mode", "compat", "--epochs", "2")
    assert (
        main(
            [
                *common,
                "--init",
                str(warm_model),
                "--episodes",
                "0",
                "--dagger-rounds",
                "1",
                "--dagger-episodes",
                "1",
                "--workers",
                "1",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    config, metadata = load_config(out)
    assert (config.observation.window, config.network.hidden) == (10, (16,))  # the model's, not the defaults
    assert metadata["init"] == str(warm_model) and metadata["facts"]["demonstrations"] > 0
    assert metadata["facts"]["teacher_replayed_avg_jct_s"] is None
    assert len(metadata["history"]["train_loss"]) == 2
    assert main([*common, "--episodes", "0", "--out", str(tmp_path / "nothing")]) != 0
    assert not (tmp_path / "nothing").exists()


def test_simulate_runs_a_model_folder(warm_model: Path, tiny_csv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "--scheduler", str(warm_model), "--workload", str(tiny_csv), "--mode", "compat", "--json"])
    out = capsys.readouterr().out
    assert code == 0
    report = json.loads(out)
    assert out.count("\n") == 1
    assert report["num_jobs"] == 6 and report["scheduler"] == "warm" and report["avg_jct_s"] > 0


def test_train_rl_from_a_warm_model(
    warm_model: Path, tiny_csv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "tuned"
    code = main(
        [
            *("train-rl", "--init", str(warm_model), "--iterations", "1", "--episodes-per-iteration", "1"),
            *("--workers", "0", "--validate-every", "1", "--validation-seeds", "1", "--source", str(tiny_csv)),
            *("--mode", "compat", "--out", str(out)),
        ]
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["model"] == str(out) and summary["best_iteration"] in (-1, 0)
    assert math.isfinite(summary["best_validation_avg_jct_slots"])
    names = {p.name for p in out.iterdir()}
    assert names >= {"policy.pt", "value.pt", "config.json", "MODEL_CARD.md", "learning_curve.png", "history.json"}
    config, metadata = load_config(out)
    assert config == load_config(warm_model)[0]
    assert metadata["initialised_from"] == str(warm_model) and len(metadata["history"]) == 1
    LearnedScheduler.from_dir(out)


def test_train_rl_can_keep_the_last_policy(warm_model: Path, tiny_csv: Path, tmp_path: Path) -> None:
    """`--keep last` saves the policy after training (ablations compare what each variant learned), not the
    best-validated checkpoint, which with tiny budgets is usually the warm-up itself."""
    out = tmp_path / "last"
    code = main(
        [
            *("train-rl", "--init", str(warm_model), "--iterations", "1", "--episodes-per-iteration", "1"),
            *("--workers", "0", "--validation-seeds", "1", "--source", str(tiny_csv), "--value-warmup", "0"),
            *("--learning-rate", "0.01", "--mode", "compat", "--keep", "last", "--out", str(out)),
        ]
    )
    assert code == 0
    assert load_config(out)[1]["saved"] == "last"
    warm, last = load_state(warm_model), load_state(out)
    assert warm.keys() == last.keys()
    assert any(not torch.equal(warm[key], last[key]) for key in warm)


def test_evaluate_prints_one_json_object(warm_model: Path, tiny_csv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            *("evaluate", "--model", str(warm_model), "--workload", str(tiny_csv)),
            *("--mode", "compat", "--baselines", "drf", "--json"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert out.count("\n") == 1
    report = json.loads(out)
    assert set(report["schedulers"]) == {"warm (greedy)", "drf"}
    row = report["schedulers"]["warm (greedy)"]
    assert row["runs"] == 1 and row["vs_drf"] == pytest.approx(
        row["avg_jct_s"] / report["schedulers"]["drf"]["avg_jct_s"]
    )


@pytest.mark.parametrize("command", ["train-sl", "train-rl"])
def test_an_existing_out_folder_is_not_overwritten(
    command: str, warm_model: Path, tiny_csv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = (warm_model / "policy.pt").read_bytes()
    code = main([command, "--source", str(tiny_csv), "--out", str(warm_model)])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and "--overwrite" in lines[0] and str(warm_model) in lines[0]
    assert (warm_model / "policy.pt").read_bytes() == before


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("train-sl", "--packed", "--mode", "realistic"), "--packed: True is not allowed (packed requests"),
        (("train-rl", "--credit", "perturbation", "--mode", "realistic"), "--credit: 'perturbation' is not allowed"),
        (("train-rl", "--perturbation-probability", "0"), "--perturbation-probability: '0' is not allowed (input sho"),
        (("train-sl", "--label-smoothing", "1"), "--label-smoothing: '1' is not allowed (input should be less than 1)"),
        (("train-rl", "--credit", "deviation", "--mode", "realistic"), "--credit: 'deviation' is not allowed (exact"),
        (("train-rl", "--continuation", "oracle"), "--continuation: 'oracle' is not allowed (compat-mode"),
        (("train-rl", "--alternatives", "0"), "--alternatives: '0' is not allowed (input should be greater than or"),
    ],
)
def test_invalid_training_options_are_refused(
    arguments: tuple[str, ...], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([*arguments, "--out", str(tmp_path / "model")])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "model").exists()


@pytest.mark.parametrize("kind", ["per-job-local", "per-job"])
def test_a_policy_decides_the_same_after_pickling_into_read_only_arrays(kind: str) -> None:
    """Rollout workers get the policy pickled (Ray's object store hands them read-only arrays): what it carries
    between calls is rebuilt, writable, and its decisions are those of the original."""
    import pickle

    torch.manual_seed(11)
    config = NetworkConfig(hidden=(16, 16), kind=kind)
    original = NumpyPolicy.from_state_dict(PolicyNetwork(SHAPE, config).state_dict(), SHAPE, config)
    rng = np.random.default_rng(12)
    observations, masks = random_observations(rng, 6), random_masks(rng, 6, 3 * SHAPE.window + 1)
    original.greedy_action(observations[0], masks[0])  # something carried before pickling
    copy = pickle.loads(pickle.dumps(original))
    for layers in copy.parts.values():
        for weight, bias in layers:
            weight.setflags(write=False)
            bias.setflags(write=False)
    assert (copy._kernel is None) == (original._kernel is None)
    for observation, mask in zip(observations, masks, strict=True):
        assert copy.greedy_action(observation, mask) == original.greedy_action(observation, mask)
