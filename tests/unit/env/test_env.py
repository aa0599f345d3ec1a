"""The RL environment: Gymnasium conformance, action masks, determinism, reward identities, the slot decision
mechanism and the incremental observer."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st

from dl2.core import (
    ClusterSpec,
    ClusterView,
    Job,
    JobAllocation,
    JobSpec,
    NodeSpec,
    Resources,
    Workload,
)
from dl2.env.config import EnvConfig
from dl2.env.decision import SlotDecision, action_count, encode_action, stop_action
from dl2.env.env import Dl2Env
from dl2.env.observation import (
    JOB_FEATURES,
    NUM_TYPES,
    RAW_JOB_FEATURES,
    STATIC_FEATURES,
    ObservationConfig,
    Observer,
)
from dl2.schedulers.load_balance import LoadBalancePlacer
from dl2.schedulers.placement import place_sticky
from dl2.schedulers.requests import Role
from dl2.sim.config import Mode, SimConfig
from dl2.sim.run import World
from dl2.sim.simulator import Simulation
from dl2.workload.authors import SETTINGS, generate_authors_workload
from dl2.workload.catalogue import CATALOGUE
from dl2.workload.mapping import TraceMapping
from dl2.workload.speed import SpeedModel
from dl2.workload.synthetic import PRESETS, generate, scaled
from tests.builders import COMPAT_PS, COMPAT_WORKER, LinearSpeed, allreduce_job, make_job, one_node_workload

WINDOWS = (4, 20)


@cache
def compat_workload(num_jobs: int = 10) -> Workload:
    """The first jobs of an authors'-generator workload (48 nodes, 3 arrivals per slot)."""
    full = generate_authors_workload(SETTINGS["small"], 1)
    return Workload("authors-trimmed", full.cluster, full.jobs[:num_jobs], full.slot_s)


@cache
def realistic_workload(allreduce_fraction: float = 0.0) -> Workload:
    """A 15-job synthetic-small workload (one 8-GPU node), optionally with all-reduce jobs."""
    spec = scaled(PRESETS["synthetic-small"], 15)
    if allreduce_fraction:
        spec = replace(spec, mapping=TraceMapping(allreduce_fraction=allreduce_fraction))
    return generate(spec, 3, "x")


def make_env(kind: str, window: int, **changes: object) -> Dl2Env:
    """kind: 'compat', 'compat-packed' (packed requests), 'realistic' or 'realistic-allreduce'."""
    observation = ObservationConfig(window=window, packed=kind == "compat-packed")
    if kind.startswith("compat"):
        return Dl2Env([compat_workload()], EnvConfig(observation=observation, **changes))  # type: ignore[arg-type]
    allreduce = 0.5 if kind == "realistic-allreduce" else 0.0
    config = EnvConfig(observation=observation, sim=SimConfig.realistic(), **changes)  # type: ignore[arg-type]
    return Dl2Env([realistic_workload(allreduce)], config)


def jcts(env: Dl2Env) -> list[float]:
    assert env.simulation is not None
    return [job.jct_s for job in env.simulation.result("agent").jobs]


def random_episode(env: Dl2Env, seed: int) -> tuple[list[np.ndarray], list[float], list[int]]:
    """Play uniformly among the allowed actions; returns observations, rewards and actions."""
    rng = np.random.default_rng(seed)
    observation, info = env.reset(seed=seed)
    observations, rewards, actions = [observation], [], []
    done = False
    while not done:
        action = int(rng.choice(np.flatnonzero(info["action_mask"])))
        observation, reward, terminated, truncated, info = env.step(action)
        observations.append(observation)
        rewards.append(reward)
        actions.append(action)
        done = terminated or truncated
    return observations, rewards, actions


class HalfSpeed:
    """Every job at half the catalogue's speed: a world unlike the catalogue."""

    def __init__(self, catalogue: SpeedModel) -> None:
        self.catalogue = catalogue

    def throughput(self, model: str, num_ps: int, num_workers: int) -> float:
        return 0.5 * self.catalogue.throughput(model, num_ps, num_workers)

    def placed_throughput(self, spec: JobSpec, allocation: JobAllocation) -> float:
        return 0.5 * self.catalogue.placed_throughput(spec, allocation)


def test_the_world_sets_how_fast_the_jobs_run() -> None:
    """The same decisions (every slot, grant whatever is allowed first) in a world at half the catalogue's speed:
    the jobs take longer; without a world the environment is the catalogue's."""
    config = EnvConfig(observation=ObservationConfig(window=5), sim=SimConfig.realistic(seed=0, speed_noise=0.0))
    catalogue = World.catalogue(Mode.REALISTIC)
    averages = []
    for world in (None, catalogue, World(HalfSpeed(catalogue.speed), catalogue.interference)):
        env = Dl2Env([realistic_workload()], config, world)
        _, info = env.reset(seed=1)
        done = False
        while not done:
            _, _, terminated, truncated, info = env.step(int(np.flatnonzero(info["action_mask"])[0]))
            done = terminated or truncated
        averages.append(float(np.mean(jcts(env))))
    usual, same, halved = averages
    assert same == usual and halved > 1.3 * usual


# --- Gymnasium conformance -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("kind", ["compat", "compat-packed", "realistic"])
def test_check_env_passes(kind: str, window: int) -> None:
    env = make_env(kind, window)
    check_env(env, skip_render_check=True)
    observation, info = env.reset(seed=0)
    assert observation.shape == (ObservationConfig(window=window).size,)  # packing changes no feature's place
    assert info["action_mask"].shape == (action_count(window),)


def test_more_jobs_than_the_window_are_shown_in_batches() -> None:
    env = make_env("compat", 4)
    _, info = env.reset(seed=0)
    batches_seen = set()
    rng = np.random.default_rng(0)
    for _ in range(400):
        decision = env.decision
        assert decision is not None
        batches_seen.add((decision.num_batches, decision.batch))
        mask = info["action_mask"]
        if len(decision.jobs) > 4 and decision.granted > 0:
            action = stop_action(4)  # move on to the next batch once something was granted
        else:
            action = int(rng.choice(np.flatnonzero(mask)))
        _, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    assert any(num_batches >= 2 and batch >= 1 for num_batches, batch in batches_seen)


# --- masks ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("kind", ["compat", "realistic", "realistic-allreduce"])
def test_masked_random_agents_are_never_refused(kind: str, window: int) -> None:
    """An allowed job action always grants exactly what it names; observations stay in the space; the episode
    finishes, so the simulator accepted every allocation (it raises on an invalid one)."""
    env = make_env(kind, window)
    rng = np.random.default_rng(window)
    observation, info = env.reset(seed=window)
    stop = stop_action(window)
    done = False
    steps = 0
    while not done:
        assert env.observation_space.contains(observation)
        decision = env.decision
        assert decision is not None and not decision.done
        mask = info["action_mask"]
        assert np.array_equal(mask, decision.mask())
        assert mask.dtype == np.int8 and set(np.unique(mask)) <= {0, 1}
        if decision.work_conserving and decision.granted == 0 and mask[:stop].any():
            assert mask[stop] == 0
        action = int(rng.choice(np.flatnonzero(mask)))
        actions_before, granted_before = decision.num_actions, decision.granted
        counts_before = decision.counts.copy()
        observation, _, terminated, truncated, info = env.step(action)
        assert decision.num_actions == actions_before + 1
        if action != stop:
            role = action % 3
            assert decision.granted == granted_before + 1, "an allowed action was refused"
            added = decision.counts - counts_before
            assert added.sum() >= 1
            changed = np.flatnonzero(added.any(axis=1))
            assert len(changed) == 1
            rank = int(changed[0])
            expected = {
                Role.WORKER: (1, 0),
                Role.PS: (0, 1),
                Role.BUNDLE: (1, int(decision.is_ps[rank])),
            }[Role(role)]
            assert tuple(added[rank]) == expected
            assert np.all(decision.counts <= decision.caps)
        done = terminated or truncated
        steps += 1
    assert terminated and not truncated
    assert env.simulation is not None and env.simulation.done
    assert info["action_mask"][stop] == 1 and info["action_mask"].sum() == 1
    assert steps > 0


@pytest.mark.parametrize("kind", ["compat", "realistic"])
def test_work_conserving_forbids_an_empty_slot(kind: str) -> None:
    env = make_env(kind, 4)
    _, info = env.reset(seed=0)
    decision = env.decision
    assert decision is not None and decision.granted == 0
    assert info["action_mask"][:-1].any()
    assert info["action_mask"][-1] == 0
    lenient = make_env(kind, 4, work_conserving=False)
    _, info = lenient.reset(seed=0)
    assert info["action_mask"][-1] == 1


def test_an_impossible_action_counts_as_stop() -> None:
    env = make_env("compat", 4, work_conserving=False)
    env.reset(seed=0)
    decision = env.decision
    assert decision is not None
    batch = decision.batch
    impossible = np.flatnonzero(decision.mask() == 0)
    assert impossible.size
    env.step(int(impossible[0]))
    assert decision.granted == 0
    assert decision.batch > batch or decision.done


# --- determinism and rewards ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["compat", "compat-packed", "realistic"])
def test_same_seed_and_actions_give_the_same_episode(kind: str) -> None:
    first = make_env(kind, 4)
    observations, rewards, actions = random_episode(first, 7)
    second = make_env(kind, 4)
    observation, _ = second.reset(seed=7)
    replayed_observations, replayed_rewards = [observation], []
    for action in actions:
        observation, reward, *_ = second.step(action)
        replayed_observations.append(observation)
        replayed_rewards.append(reward)
    assert rewards == replayed_rewards
    assert all(np.array_equal(a, b) for a, b in zip(observations, replayed_observations, strict=True))
    assert jcts(first) == jcts(second)


def _without_idle_gaps() -> Workload:
    """Six authors' jobs: three at time 0, three arriving mid-slot while the first ones still run (so every job's
    wait before its first boundary is counted in a slot's job-seconds)."""
    base = compat_workload(6)
    arrivals = [0.0, 0.0, 0.0, 500.0, 700.0, 1900.0]
    jobs = tuple(
        Job(replace(job.spec, arrival_s=arrival), job.true_epochs)
        for job, arrival in zip(base.jobs, arrivals, strict=True)
    )
    return Workload("busy", base.cluster, jobs, base.slot_s)


def test_jct_reward_sums_to_minus_total_jct() -> None:
    workload = _without_idle_gaps()
    env = Dl2Env([workload], EnvConfig(observation=ObservationConfig(window=4), reward="jct", reward_scale=10.0))
    _, rewards, _ = random_episode(env, 3)
    total_jct = sum(jcts(env))
    assert sum(rewards) == pytest.approx(-total_jct / workload.slot_s / 10.0, rel=1e-9)
    assert sum(rewards) == pytest.approx(sum(env.slot_rewards), rel=1e-12)


def test_jct_reward_leaves_out_only_waits_before_the_first_boundary() -> None:
    """With idle gaps (synthetic Poisson arrivals on one node) the reward misses at most one slot per job."""
    env = make_env("realistic", 4, reward="jct", reward_scale=1.0)
    _, rewards, _ = random_episode(env, 5)
    assert env.simulation is not None
    slot_s = env.simulation.slot_s
    total_jct = sum(jcts(env))
    counted = -sum(rewards) * slot_s
    assert counted <= total_jct + 1e-6
    assert total_jct - counted <= len(jcts(env)) * slot_s


@pytest.mark.parametrize("kind", ["compat", "compat-packed", "realistic"])
def test_progress_reward_sums_to_the_number_of_jobs(kind: str) -> None:
    env = make_env(kind, 20, reward="progress")
    _, rewards, _ = random_episode(env, 11)
    assert sum(rewards) == pytest.approx(len(jcts(env)), rel=1e-9)


# --- SlotDecision on hand-made clusters ----------------------------------------------------------------------------


def _view(workload: Workload) -> ClusterView:
    simulation = Simulation(workload, SimConfig.compat(), LinearSpeed())  # type: ignore[arg-type]
    return simulation.begin_slot()


def test_compat_places_each_task_on_the_least_loaded_server() -> None:
    view = _view(one_node_workload(make_job("a", 10), make_job("b", 10), num_nodes=2))
    decision = SlotDecision(view, 4, compat=True)
    assert decision.step(encode_action(0, Role.WORKER))  # node 0 (tie: lowest index), load 6
    assert decision.step(encode_action(1, Role.WORKER))  # node 1, load 6
    assert decision.step(encode_action(0, Role.PS))  # tie again: node 0, load 8
    assert decision.step(encode_action(1, Role.BUNDLE))  # node 1 (load 6 < 8): worker and PS together
    assert decision.worker_nodes == [[0], [1, 1]]
    assert decision.ps_nodes == [[0], [1]]
    assert decision.counts.tolist() == [[1, 1], [2, 1]]
    allocation = decision.allocation()
    assert allocation.get("a").worker_nodes == (0,) and allocation.get("a").ps_nodes == (0,)
    assert allocation.get("b").worker_nodes == (1, 1) and allocation.get("b").ps_nodes == (1,)
    # node 0: 4 GPUs and 4 CPUs used; node 1: 8 GPUs and 6 CPUs used -> next task goes to node 0
    assert decision.next_free().tolist() == [4.0, 4.0, 0.0]
    assert decision.free_total.tolist() == [4.0, 6.0, 0.0]


def test_one_node_masks_follow_what_fits() -> None:
    view = _view(one_node_workload(make_job("a", 10)))
    decision = SlotDecision(view, 2, compat=True)
    worker, ps = encode_action(0, Role.WORKER), encode_action(0, Role.PS)
    assert decision.mask().tolist()[:3] == [1, 1, 1]
    assert decision.mask()[encode_action(1, Role.WORKER)] == 0  # an empty column
    decision.step(worker)
    decision.step(worker)  # 8 GPUs used: no more workers, PS still fit (4 of 8 CPUs used)
    assert decision.mask().tolist()[:3] == [0, 1, 0]
    decision.step(ps)
    assert not decision.done
    decision.step(ps)  # CPUs full: nothing fits, the slot is over without a stop
    assert decision.done
    assert decision.counts.tolist() == [[2, 2]]
    allocation = decision.allocation().get("a")
    assert (allocation.num_workers, allocation.num_ps) == (2, 2)


def test_a_job_at_its_caps_has_no_action() -> None:
    view = _view(one_node_workload(make_job("a", 10, max_tasks=1), make_job("b", 10), num_nodes=2))
    decision = SlotDecision(view, 2, compat=True)
    assert decision.step(encode_action(0, Role.BUNDLE))
    mask = decision.mask()
    assert mask[0:3].tolist() == [0, 0, 0]
    assert mask[3:6].tolist() == [1, 1, 1]
    assert not decision.request(0, Role.WORKER)  # not through the teachers' door either


def test_all_reduce_jobs_have_no_ps_and_no_bundle() -> None:
    view = _view(one_node_workload(allreduce_job("r"), make_job("p", 10)))
    decision = SlotDecision(view, 2, compat=True)
    mask = decision.mask()
    assert mask[0:3].tolist() == [1, 0, 0]
    assert mask[3:6].tolist() == [1, 1, 1]
    assert decision.step(encode_action(0, Role.WORKER))
    assert decision.counts.tolist()[0] == [1, 0]
    # a bundle for the all-reduce job is impossible: it counts as stop and closes the (only) window
    assert not decision.step(encode_action(0, Role.BUNDLE))
    assert decision.done
    assert decision.allocation().get("r").worker_nodes == (0,)


def test_stop_moves_to_the_next_window_and_the_last_one_ends_the_slot() -> None:
    jobs = [make_job(name, 10) for name in "abcde"]
    view = _view(one_node_workload(*jobs, num_nodes=4))
    decision = SlotDecision(view, 2, compat=True, work_conserving=True)
    assert decision.num_batches == 3
    assert list(decision.column_ranks()) == [0, 1]
    assert decision.mask()[stop_action(2)] == 0  # nothing granted yet and something fits
    decision.step(encode_action(1, Role.BUNDLE))
    assert decision.mask()[stop_action(2)] == 1
    decision.step(stop_action(2))
    assert (decision.batch, list(decision.column_ranks())) == (1, [2, 3])
    decision.step(encode_action(0, Role.WORKER))  # column 0 of the second window is job "c"
    decision.step(stop_action(2))
    assert list(decision.column_ranks()) == [4]
    assert decision.mask()[encode_action(1, Role.WORKER)] == 0  # padding column
    decision.step(stop_action(2))
    assert decision.done
    assert decision.counts.tolist() == [[0, 0], [1, 1], [1, 0], [0, 0], [0, 0]]
    allocation = decision.allocation()
    assert sorted(allocation) == ["b", "c"]
    for rank, job in enumerate(view.jobs):
        held = allocation.get(job.spec.job_id)
        assert [held.num_workers, held.num_ps] == decision.counts[rank].tolist()
    with pytest.raises(RuntimeError):
        decision.step(0)


def _two_unequal_nodes() -> Workload:
    """Node 0 has 8 GPUs but only 2 CPUs; node 1 has 8 of each."""
    cluster = ClusterSpec(
        (NodeSpec(0, Resources(gpu=8.0, cpu=2.0)), NodeSpec(1, Resources(gpu=8.0, cpu=8.0))), name="unequal"
    )
    return Workload("unequal", cluster, (make_job("a", 10),), 100.0)


def test_compat_mode_is_bound_to_the_least_loaded_server() -> None:
    view = _view(_two_unequal_nodes())
    decision = SlotDecision(view, 1, compat=True)
    decision.step(encode_action(0, Role.WORKER))  # node 0: its CPUs are now full
    decision.step(encode_action(0, Role.WORKER))  # node 1
    # both loads are 6: node 0 is next, and it has no CPU left although node 1 could host a worker
    assert decision.next_free().tolist() == [4.0, 0.0, 0.0]
    assert decision.done  # nothing is possible, the window closed by itself
    assert decision.counts.tolist() == [[2, 0]]


def test_realistic_mode_uses_free_capacity_in_total_and_places_with_the_placer() -> None:
    workload = _two_unequal_nodes()
    view = _view(workload)
    placer = LoadBalancePlacer()
    decision = SlotDecision(view, 1, compat=False, placer=placer)
    for _ in range(3):
        assert decision.mask()[encode_action(0, Role.WORKER)] == 1
        assert decision.step(encode_action(0, Role.WORKER))
    assert decision.next_free().tolist() == decision.free_total.tolist() == [4.0, 4.0, 0.0]
    assert decision.step(encode_action(0, Role.PS))
    assert decision.counts.tolist() == [[3, 1]]
    allocation = decision.allocation()
    assert allocation == place_sticky(view, [(3, 1)], LoadBalancePlacer())
    held = allocation.get("a")
    assert (held.num_workers, held.num_ps) == (3, 1)
    usage = np.zeros((2, 3))
    for node in held.worker_nodes:
        usage[node] += COMPAT_WORKER.as_tuple()
    for node in held.ps_nodes:
        usage[node] += COMPAT_PS.as_tuple()
    capacity = np.array([node.capacity.as_tuple() for node in workload.cluster.nodes])
    assert np.all(usage <= capacity)
    simulation = Simulation(workload, SimConfig.compat(), LinearSpeed())  # type: ignore[arg-type]
    simulation.begin_slot()
    simulation.apply(allocation)  # the simulator accepts it (it raises on an over-full node)


def test_realistic_mode_needs_a_placer() -> None:
    with pytest.raises(ValueError, match="placer"):
        SlotDecision(_view(_two_unequal_nodes()), 1, compat=False)


# --- the observer --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("kind", ["compat", "realistic-allreduce"])
def test_incremental_observations_equal_fresh_ones(kind: str, window: int) -> None:
    env = make_env(kind, window)
    rng = np.random.default_rng(1)
    observation, info = env.reset(seed=1)
    done, steps = False, 0
    while not done and steps < 1500:
        assert env.decision is not None
        fresh = Observer(env.config.observation)(env.decision)
        np.testing.assert_array_equal(observation, fresh)
        action = int(rng.choice(np.flatnonzero(info["action_mask"])))
        observation, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        steps += 1
    assert steps > 50


def test_normalised_features_of_a_hand_made_state() -> None:
    view = _view(one_node_workload(make_job("a", 10), make_job("b", 10)))
    decision = SlotDecision(view, 3, compat=True)
    observer = Observer(ObservationConfig(window=3))
    decision.step(encode_action(1, Role.BUNDLE))
    rows = observer(decision)[: 3 * JOB_FEATURES].reshape(3, JOB_FEATURES)
    tail = observer(decision)[3 * JOB_FEATURES :]
    type_index = CATALOGUE["resnet-50"].type_index
    for row in rows[:2]:
        assert row[type_index] == 1.0 and row[:NUM_TYPES].sum() == 1.0
        assert row[NUM_TYPES] == 0.0  # parameter-server job
        assert row[NUM_TYPES + 2] == 1.0  # nothing done yet
        assert row[NUM_TYPES + 6] == 1.0  # present
    assert rows[0, STATIC_FEATURES:].tolist() == [0.0, 0.0, 0.0]
    # job b: 1 of 4 workers, 1 of 4 PS, dominant share = 4 of 8 GPUs
    assert rows[1, STATIC_FEATURES:].tolist() == [0.25, 0.25, 0.5]
    assert not rows[2].any()  # padding
    assert tail[:4].tolist() == [0.5, 0.5, 0.5, 0.5]  # one node: the cluster is the next server


def test_raw_dl2_layout_has_six_values_per_job() -> None:
    config = ObservationConfig(window=3, raw_dl2=True)
    assert config.size == 3 * RAW_JOB_FEATURES == 18
    later = make_job("b", 10, arrival_s=0.0)
    view = _view(one_node_workload(make_job("a", 10), later))
    decision = SlotDecision(view, 3, compat=True)
    decision.step(encode_action(0, Role.WORKER))
    decision.step(encode_action(0, Role.PS))
    rows = Observer(config)(decision).reshape(3, RAW_JOB_FEATURES)
    type_id = CATALOGUE["resnet-50"].type_index + 1
    assert rows[0].tolist() == [type_id, 0.0, 1.0, 0.5, 1.0, 1.0]
    assert rows[1].tolist() == [type_id, 0.0, 1.0, 0.0, 0.0, 0.0]
    assert not rows[2].any()
    env = Dl2Env([compat_workload()], EnvConfig(observation=config))
    observation, _ = env.reset(seed=0)
    assert observation.shape == (18,) and env.observation_space.contains(observation)


@st.composite
def _decision_cases(draw: st.DrawFn) -> tuple[Workload, int, bool, list[int]]:
    num_nodes = draw(st.integers(1, 3))
    capacities = [
        Resources(gpu=float(draw(st.sampled_from([4, 8]))), cpu=float(draw(st.sampled_from([2, 4, 8]))))
        for _ in range(num_nodes)
    ]
    cluster = ClusterSpec(tuple(NodeSpec(i, c) for i, c in enumerate(capacities)), name="drawn")
    jobs: list[Job] = []
    for index in range(draw(st.integers(1, 6))):
        if draw(st.booleans()):
            jobs.append(make_job(f"j{index}", 10, max_tasks=draw(st.integers(1, 4))))
        else:
            jobs.append(allreduce_job(f"j{index}", max_workers=draw(st.integers(1, 4))))
    window = draw(st.integers(1, 4))
    actions = draw(st.lists(st.integers(0, 3 * window), min_size=1, max_size=40))
    return Workload("drawn", cluster, tuple(jobs), 100.0), window, draw(st.booleans()), actions


@settings(max_examples=60, deadline=None)
@given(_decision_cases())
def test_decisions_grant_exactly_what_the_mask_allows(case: tuple[Workload, int, bool, list[int]]) -> None:
    """Any action sequence: an allowed job action grants a task, anything else closes the window; caps hold and
    the final allocation is one the simulator accepts."""
    workload, window, compat, actions = case
    view = _view(workload)
    decision = SlotDecision(view, window, compat, placer=LoadBalancePlacer())
    for action in actions:
        if decision.done:
            break
        allowed = bool(decision.mask()[action]) and action != stop_action(window)
        batch = decision.batch
        assert decision.step(action) == allowed
        if not allowed:
            assert decision.batch > batch or decision.done
        assert np.all(decision.counts <= decision.caps)
        assert np.all(decision.free_total >= -1e-9)
    decision.finish()
    allocation = decision.allocation()
    for rank, job in enumerate(view.jobs):
        held = allocation.get(job.spec.job_id)
        workers, ps = decision.counts[rank].tolist()
        if compat:  # each grant was placed on a server when it was made
            assert [held.num_workers, held.num_ps] == [workers, ps]
            continue
        # realistic mode: the mask checks the cluster's free total, the placer then places the counts on servers;
        # fragmentation can leave some of them unplaced, never more than granted, and a PS job gets both or none
        assert held.num_workers <= workers and held.num_ps <= ps
        if decision.is_ps[rank]:
            assert bool(held.num_workers) == bool(held.num_ps)
    simulation = Simulation(workload, SimConfig.compat(), LinearSpeed())  # type: ignore[arg-type]
    simulation.begin_slot()
    simulation.apply(allocation)
