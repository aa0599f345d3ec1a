"""Harmony (dl2.placement): features, samples from decision logs, the speed model, the worlds, the placer and
its training, on hand-computed cases and tiny budgets."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from dl2.config import ConfigError
from dl2.core import Allocation, ClusterSpec, ClusterView, InputError, Job, JobAllocation, JobView
from dl2.placement.candidates import RoundCandidates
from dl2.placement.config import (
    JOB_INPUTS,
    SERVER_INPUTS,
    PlacerConfig,
    PlacerTraining,
    PredictorTraining,
    SpeedModelConfig,
)
from dl2.placement.episodes import World, run_episode
from dl2.placement.experience import Decisions, ExperienceRecorder, ReplayBuffer
from dl2.placement.features import NUM_TYPES, SERVER_FEATURES, SlotPlacement, per_node
from dl2.placement.linear import LinearInterferenceModel
from dl2.placement.policy import WEIGHTS, HarmonyPlacer, NumpyPlacementPolicy, candidates
from dl2.placement.predictor import SpeedNetwork, train_predictor
from dl2.placement.samples import LoggedRun, log_samples, record_run, relative_errors, samples_from_records
from dl2.placement.speed_model import NumpySpeedModel
from dl2.placement.training import PlacerNetwork, PlacerTrainer
from dl2.placement.world import PredictedSimulation, SimulatorSpeeds
from dl2.resolve import placer_factory
from dl2.schedulers.isolate import IsolatePlacer, StrictIsolatePlacer
from dl2.schedulers.load_balance import LoadBalancePlacer
from dl2.schedulers.placement import Demand, NodeState, place_sticky
from dl2.schedulers.registry import make_scheduler
from dl2.schedulers.tally import TallyingPlacer
from dl2.schedulers.tenancy import Tenancy
from dl2.sim.config import SimConfig
from dl2.sim.run import interference_model, speed_model
from dl2.sim.simulator import Simulation, simulate
from dl2.workload.catalogue import CATALOGUE
from dl2.workload.mapping import DEFAULT_MAPPING, map_trace_job
from dl2.workload.source import workload
from dl2.workload.traces import PHILLY_NODE

SPEED = speed_model(SimConfig.realistic().mode)
INTERFERENCE = interference_model()
TINY = "synthetic-small@40"
"""40 jobs on 3 eight-GPU servers: a placement round with neighbours, in a second."""


def philly_job(job_id: str, model: str, gpus: int, arrival_s: float = 0.0) -> Job:
    return map_trace_job(job_id, arrival_s, gpus, 3600.0, np.random.default_rng(0), DEFAULT_MAPPING, model)


def cluster(nodes: int = 3) -> ClusterSpec:
    return ClusterSpec.homogeneous(nodes, PHILLY_NODE, name="test")


# -- features ---------------------------------------------------------------------------------------------------


def test_features_of_two_jobs_sharing_a_server_by_hand() -> None:
    a, b = philly_job("a", "resnet-50", 2), philly_job("b", "vgg-16", 1)
    placed = [(a.spec, JobAllocation((0, 1), (0,))), (b.spec, JobAllocation((1,), (1,)))]
    encoded = SlotPlacement(placed, cluster()).encode()
    assert encoded.segments.tolist() == [0, 0, 1]
    job_a = encoded.jobs[0]
    assert job_a[CATALOGUE["resnet-50"].type_index] == 1.0
    # a: 2 workers, 1 PS, on 2 servers; one of its 2 worker-PS pairs shares a server
    assert job_a[NUM_TYPES + 1 : NUM_TYPES + 3].tolist() == [2 / 16, 1 / 16]
    assert job_a[NUM_TYPES + 9] == pytest.approx(0.5)
    node0, node1, b_row = encoded.servers
    assert node0[:2].tolist() == [0.5, 1.0]  # half a's workers and its PS
    assert node0[7 : 7 + NUM_TYPES].sum() == 0 and node0[8 + NUM_TYPES] == 1.0  # alone on server 0
    vgg = CATALOGUE["vgg-16"].type_index
    assert node1[7 + vgg] == 1.0 and node1[7 + NUM_TYPES] == 1.0 and node1[8 + NUM_TYPES] == 0.0
    # b's worker and PS on server 1 take 1 of 8 GPUs and 8 of 64 cores; a's worker there a GPU and 4 cores
    assert node1[3:5].tolist() == pytest.approx([1 / 8, 8 / 64])
    assert b_row[3:5].tolist() == pytest.approx([1 / 8, 4 / 64])
    assert b_row[5:7].tolist() == pytest.approx([1 - 2 / 8, 1 - 12 / 64])
    assert encoded.servers.shape[1] == SERVER_FEATURES


def test_without_equals_encoding_the_placement_without_those_tasks() -> None:
    a, b, c = philly_job("a", "resnet-50", 2), philly_job("b", "wlm", 1), philly_job("c", "seq2seq", 1)
    placed = [
        (a.spec, JobAllocation((0, 1), (0, 1))),
        (b.spec, JobAllocation((1,), (1,))),
        (c.spec, JobAllocation((0,), (2,))),
    ]
    slot = SlotPlacement(placed, cluster())
    # job a had only its tasks on server 0: what b and c see without a's server-1 tasks
    patched = slot.without(0, {1: (1, 1)}, {1}, [1, 2])
    reduced = [(a.spec, JobAllocation((0,), (0,))), *placed[1:]]
    expected = SlotPlacement(reduced, cluster()).encode([1, 2])
    np.testing.assert_allclose(patched.servers, expected.servers, atol=1e-6)
    np.testing.assert_array_equal(patched.segments, expected.segments)


# -- samples ----------------------------------------------------------------------------------------------------


def test_samples_are_the_throughput_the_simulator_ran_at() -> None:
    small = workload(TINY, 1)
    config = SimConfig.realistic(0, speed_noise=0.0, interference=False)
    records = record_run(small, make_scheduler("optimus", SPEED, False, "binpack"), config, SPEED, None)
    assert all(r.applied_worker_nodes or not r.applied_workers for r in records)
    samples = samples_from_records(records, small.cluster)
    assert len(samples) > 20
    # no noise, no interference: every steady sample is the speed function at its placement
    by_time: dict[float, list] = {}
    for record in records:
        by_time.setdefault(record.time_s, []).append(record)
    expected = []
    times = sorted(by_time)
    for k in range(1, len(times) - 1):
        before = {r.job_id: r for r in by_time[times[k - 1]]}
        after = {r.job_id for r in by_time[times[k + 1]]}
        for r in by_time[times[k]]:
            held = before.get(r.job_id)
            if not r.applied_worker_nodes or r.job_id not in after or held is None or r.observed_epochs <= 0:
                continue
            now, then = (
                JobAllocation(r.applied_worker_nodes, r.applied_ps_nodes),
                JobAllocation(held.applied_worker_nodes, held.applied_ps_nodes),
            )
            if now.same_placement(then):
                expected.append(math.log(SPEED.placed_throughput(r.job_spec(), now)))
    np.testing.assert_allclose(samples.log_throughput, expected, rtol=1e-9)


def test_log_samples_is_seeded() -> None:
    run = LoggedRun(TINY, 3, "drf", "mixed")
    first, second = log_samples(run, 0), log_samples(run, 0)
    np.testing.assert_array_equal(first.log_throughput, second.log_throughput)
    np.testing.assert_array_equal(first.encoded.servers, second.encoded.servers)
    assert first.slots > 0


# -- speed model ------------------------------------------------------------------------------------------------


def test_numpy_speed_model_matches_torch_and_training_learns() -> None:
    samples = log_samples(LoggedRun(TINY, 5, "drf", "mixed"), 0)
    training = PredictorTraining(epochs=3, batch_size=64, network=SpeedModelConfig((16,), (16,)))
    result = train_predictor(samples, training)
    assert result.train_loss[-1] < result.train_loss[0]
    network = SpeedNetwork(result.config)
    network.load_state_dict(result.state)
    encoded = samples.encoded
    with torch.no_grad():
        standardised = network(
            torch.from_numpy(encoded.jobs), torch.from_numpy(encoded.servers), torch.from_numpy(encoded.segments)
        ).numpy()
    expected = standardised * result.config.target_std + result.config.target_mean
    np.testing.assert_allclose(result.numpy_model().log_throughput(encoded), expected, rtol=1e-4, atol=1e-4)


def test_linear_model_recovers_a_linear_truth() -> None:
    samples = log_samples(LoggedRun(TINY, 5, "drf", "mixed"), 0)
    from dl2.placement.linear import design

    truth = np.random.default_rng(0).normal(size=design(samples.encoded).shape[1])
    target = design(samples.encoded) @ truth
    model = LinearInterferenceModel.fit(samples.encoded, target)
    np.testing.assert_allclose(model.log_throughput(samples.encoded), target, atol=1e-6)
    assert relative_errors(np.log([2.0]), np.log([1.0]))[0] == pytest.approx(1.0)


# -- worlds -----------------------------------------------------------------------------------------------------


def test_the_simulator_as_a_speed_source_reproduces_the_simulator() -> None:
    small = workload(TINY, 2)
    config = SimConfig.realistic(4)
    for name, placer in (("drf", "load-balance"), ("optimus-fitted", "binpack")):
        truth = simulate(small, make_scheduler(name, SPEED, False, placer), config, SPEED, INTERFERENCE)
        world = PredictedSimulation(small, config, SPEED, SimulatorSpeeds(SPEED, INTERFERENCE))
        scheduler = make_scheduler(name, SPEED, False, placer)
        while not world.done:
            world.apply(scheduler.schedule(world.begin_slot()))
        modelled = world.result(name)
        assert [j.finish_s for j in modelled.jobs] == pytest.approx([j.finish_s for j in truth.jobs], rel=1e-12)


# -- the placer -------------------------------------------------------------------------------------------------


def random_placer(seed: int = 0, skip: bool = True) -> HarmonyPlacer:
    torch.manual_seed(seed)
    config = PlacerConfig((16,), skip=skip)
    return HarmonyPlacer(NumpyPlacementPolicy.from_state_dict(PlacerNetwork(config).state_dict()), config, seed=seed)


def test_policy_logits_match_torch() -> None:
    torch.manual_seed(1)
    config = PlacerConfig((8, 4))
    network = PlacerNetwork(config)
    rows = torch.rand(5, SERVER_INPUTS)
    job = torch.rand(1, JOB_INPUTS)
    with torch.no_grad():
        expected = network(rows, job, torch.zeros(5, dtype=torch.int64)).numpy()
    policy = NumpyPlacementPolicy.from_state_dict(network.state_dict())
    np.testing.assert_allclose(policy.logits(rows.numpy(), job.numpy()[0]), expected, rtol=1e-5, atol=1e-6)


def test_candidates_describe_the_servers_by_hand() -> None:
    a, b = philly_job("a", "resnet-50", 1), philly_job("b", "wlm", 1)
    views = tuple(
        JobView(job.spec, 0.0, 0.0, allocation, 0.0, 0.0, 0)
        for job, allocation in ((a, JobAllocation((0,), (0,))), (b, JobAllocation((1,), (1,))))
    )
    view = ClusterView(0.0, 0, 600.0, cluster(), views, Allocation())
    seen = []

    class Spy:
        name = "spy"
        needs_tenancy = True

        def choose(self, state: NodeState, demand: tuple[float, float, float], job_nodes: object) -> int:
            assert state.tenancy is not None
            seen.append(candidates(state, state.tenancy, state.tenancy.placing, demand, True))
            return state.best("least", NodeState.utilisation, demand)

    place_sticky(view, [(2, 1), (1, 1)], Spy())  # a grows by one worker
    nodes, rows = seen[0]
    assert nodes.tolist() == [0, 1, 2]
    assert rows[0, :2].tolist() == [0.5, 1.0]  # a already holds 1 of 2 workers and its PS on server 0
    wlm = CATALOGUE["wlm"].type_index
    assert rows[1, 2 + wlm] == 1.0 and rows[1, 2 + NUM_TYPES] == 1.0  # b, a wlm job, on server 1
    assert rows[2, 3 + NUM_TYPES] == 1.0  # server 2 is empty
    assert rows[3, -1] == 1.0 and rows[3, :-1].sum() == 0  # the 'leave unplaced' row


def test_learned_placement_is_valid_deterministic_and_keeps_jobs_running() -> None:
    small = workload(TINY, 7)
    config = SimConfig.realistic(0)
    results = []
    for _ in range(2):
        placer = random_placer(3)
        results.append(simulate(small, make_scheduler("drf", SPEED, False, placer), config, SPEED, INTERFERENCE))
        assert placer.tasks_asked > 0
    assert len(results[0].jobs) == small.num_jobs  # every job finished: the placer never starved one
    assert [j.finish_s for j in results[0].jobs] == [j.finish_s for j in results[1].jobs]


def test_without_skip_a_task_is_left_unplaced_only_where_nothing_fits() -> None:
    small = workload(TINY, 8)
    inner = random_placer(4, skip=False)

    class Checked:
        name, needs_tenancy = "checked", True

        def choose(self, state: NodeState, demand: tuple[float, float, float], job_nodes: object) -> int:
            node = inner.choose(state, demand, job_nodes)  # type: ignore[arg-type]
            assert node >= 0 or len(state.fitting_nodes(demand)) == 0
            return node

    simulate(small, make_scheduler("drf", SPEED, False, Checked()), SimConfig.realistic(0), SPEED, INTERFERENCE)
    assert inner.tasks_asked > 0


def test_an_explorer_naming_a_server_that_does_not_fit_is_refused() -> None:
    """A broken explorer fails loudly rather than having its choice taken for another server's row."""

    class Beyond:
        name = "beyond"

        def choose(self, state: NodeState, demand: Demand, job_nodes: Sequence[int]) -> int:
            return state.num_nodes  # no such server

    placer = random_placer(6, skip=False)
    placer.epsilon, placer.explorers = 1.0, (Beyond(),)
    with pytest.raises(ValueError, match="explorer beyond chose server"):
        simulate(workload(TINY, 9), make_scheduler("drf", SPEED, False, placer), SimConfig.realistic(0), SPEED, None)


def test_round_candidates_are_the_candidates_to_the_bit_throughout_a_run() -> None:
    compared = []

    class Compare:
        name, needs_tenancy = "compare", True

        def __init__(self) -> None:
            self.inner = LoadBalancePlacer()
            self.round: RoundCandidates | None = None

        def choose(self, state: NodeState, demand: Demand, job_nodes: object) -> int:
            tenancy = state.tenancy
            assert tenancy is not None
            if self.round is None or self.round.state is not state:
                self.round = RoundCandidates(state)
            for may_skip in (False, True):
                nodes, rows = self.round.rows(tenancy.placing, demand, may_skip)
                expected_nodes, expected_rows = candidates(state, tenancy, tenancy.placing, demand, may_skip)
                np.testing.assert_array_equal(nodes, expected_nodes)
                np.testing.assert_array_equal(rows, expected_rows)
            compared.append(len(nodes))
            return self.inner.choose(state, demand, job_nodes)  # type: ignore[arg-type]

    simulate(workload(TINY, 3), make_scheduler("drf", SPEED, False, Compare()), SimConfig.realistic(0), SPEED, None)
    assert len(compared) > 100 and min(compared) < max(compared)  # rounds with servers filling up


def test_the_placer_decides_as_with_rows_built_from_scratch() -> None:
    class FromScratch(HarmonyPlacer):
        def _candidates(
            self, state: NodeState, rank: int, demand: Demand, may_skip: bool
        ) -> tuple[np.ndarray, np.ndarray]:
            assert state.tenancy is not None
            return candidates(state, state.tenancy, rank, demand, may_skip)

    class Logged:
        name, needs_tenancy = "logged", True

        def __init__(self, inner: HarmonyPlacer) -> None:
            self.inner, self.nodes = inner, list[int]()

        def choose(self, state: NodeState, demand: Demand, job_nodes: object) -> int:
            node = self.inner.choose(state, demand, job_nodes)  # type: ignore[arg-type]
            self.nodes.append(node)
            return node

    runs = []
    for kind in (HarmonyPlacer, FromScratch):
        for greedy, skip in ((True, False), (False, True)):
            base = random_placer(5, skip=skip)
            logged = Logged(kind(base.policy, base.config, greedy=greedy, seed=5))
            simulate(
                workload(TINY, 4), make_scheduler("drf", SPEED, False, logged), SimConfig.realistic(0), SPEED, None
            )
            runs.append(logged.nodes)
    assert runs[0] == runs[2] and runs[1] == runs[3]  # greedy, and sampling with the same seed
    assert len(runs[0]) > 100 and runs[0] != runs[1]


def test_isolate_keeps_a_job_on_its_servers_and_opens_empty_ones_before_sharing() -> None:
    jobs = [philly_job(name, "resnet-50", 1) for name in "abcd"]
    held = {"b": JobAllocation((0,), (0,))}
    views = tuple(JobView(job.spec, 0.0, 0.0, held.get(job.spec.job_id, JobAllocation()), 0.0, 0.0, 0) for job in jobs)
    view = ClusterView(0.0, 0, 600.0, cluster(), views, Allocation())
    targets = [(2, 1), (1, 1), (1, 1), (1, 1)]
    isolated = place_sticky(view, targets, IsolatePlacer())
    assert isolated.get("a") == JobAllocation((1, 1), (1,))  # an empty server, then its own
    assert isolated.get("c") == JobAllocation((2,), (2,))  # the last empty one
    assert isolated.get("d") == JobAllocation((0,), (0,))  # none left: the least loaded (0 and 2 tie: the lower)
    spread = place_sticky(view, targets, LoadBalancePlacer())
    assert spread.get("a").worker_nodes == (1, 2)  # load balancing spreads a over two servers


def test_isolate_strict_leaves_a_running_job_s_tasks_unplaced_rather_than_share_but_starts_every_job() -> None:
    # two 8-GPU servers: a holds server 1, b server 0; a asks for 12 workers and 2 PS, c (holding nothing) for one
    jobs = [philly_job(name, "resnet-50", 1) for name in "abc"]
    held = {"a": JobAllocation((1,), (1,)), "b": JobAllocation((0,), (0,))}
    views = tuple(JobView(job.spec, 0.0, 0.0, held.get(job.spec.job_id, JobAllocation()), 0.0, 0.0, 0) for job in jobs)
    view = ClusterView(0.0, 0, 600.0, cluster(2), views, Allocation())
    targets = [(12, 2), (1, 1), (1, 1)]
    isolated = place_sticky(view, targets, IsolatePlacer())
    assert isolated.get("a") == JobAllocation((1,) * 8 + (0,) * 4, (1, 1))  # its last 4 workers beside b
    strict = place_sticky(view, targets, StrictIsolatePlacer())
    assert strict.get("a") == JobAllocation((1,) * 8, (1, 1))  # server 1 is full: the 4 are left, not put by b
    assert strict.get("c") == JobAllocation((0,), (0,))  # c holds nothing: it shares rather than wait


def test_the_tenancy_agrees_with_itself_and_with_each_round_s_allocation_throughout_a_run() -> None:
    """Built lazily, the tenancy must still answer, at every decision, what an eager count would: each job's
    servers, each server's jobs (the same lists), the distinct jobs per server and type; and after the round,
    what each job holds in the allocation that `place_sticky` returns."""
    checked = []

    def check(tenancy: Tenancy) -> None:
        held = [tenancy.holdings(rank) for rank in range(len(tenancy.jobs))]
        expected_types = np.zeros((tenancy.num_nodes, NUM_TYPES))
        for node in range(tenancy.num_nodes):
            on = tenancy.jobs_on(node)
            assert sorted(on) == [rank for rank in range(len(held)) if node in held[rank]]
            assert all(on[rank] is held[rank][node] and on[rank] != [0, 0] for rank in on)
            for rank in on:
                expected_types[node, tenancy.type_of[rank]] += 1
        np.testing.assert_array_equal(tenancy.jobs_of_type, expected_types)

    class Checking(LoadBalancePlacer):
        name, needs_tenancy = "checking", True

        def __init__(self) -> None:
            super().__init__()
            self.rounds: list[Tenancy] = []

        def choose(self, state: NodeState, demand: Demand, job_nodes: Sequence[int]) -> int:
            assert state.tenancy is not None
            if not self.rounds or self.rounds[-1] is not state.tenancy:
                self.rounds.append(state.tenancy)
            check(state.tenancy)
            return super().choose(state, demand, job_nodes)

    placer = Checking()
    for seed in range(3):
        simulation = Simulation(workload(TINY, seed), SimConfig.realistic(seed), SPEED, None)
        policy = make_scheduler("drf", SPEED, False, placer)
        while not simulation.done:
            view = simulation.begin_slot()
            rounds = len(placer.rounds)
            allocation = policy.schedule(view)
            if len(placer.rounds) > rounds:
                tenancy = placer.rounds[-1]
                check(tenancy)
                for rank, job in enumerate(tenancy.jobs):
                    held = per_node(allocation.get(job.spec.job_id))
                    assert tenancy.holdings(rank) == {node: list(counts) for node, counts in held.items()}
                checked.append(tenancy)
            simulation.apply(allocation)
    assert len(checked) > 100

    class WorkersOnly(Checking):
        def choose(self, state: NodeState, demand: Demand, job_nodes: Sequence[int]) -> int:
            assert state.tenancy is not None
            return -1 if state.tenancy.placing_ps else super().choose(state, demand, job_nodes)

    # a job whose PS finds no server gives its new workers back: the tenancy forgets them
    job = philly_job("a", "resnet-50", 2)
    views = (JobView(job.spec, 0.0, 0.0, JobAllocation(), 0.0, 0.0, 0),)
    placer = WorkersOnly()
    assert place_sticky(ClusterView(0.0, 0, 600.0, cluster(), views, Allocation()), [(2, 1)], placer).jobs == {}
    check(placer.rounds[0])
    assert placer.rounds[0].holdings(0) == {} and not placer.rounds[0].jobs_of_type.any()


def test_tally_counts_the_tasks_asked_for_and_those_not_placed() -> None:
    big = philly_job("big", "resnet-50", 8)
    view = ClusterView(
        0.0, 0, 600.0, cluster(1), (JobView(big.spec, 0.0, 0.0, JobAllocation(), 0.0, 0.0, 0),), Allocation()
    )
    tally = TallyingPlacer(LoadBalancePlacer())
    allocation = place_sticky(view, [(9, 1)], tally)  # 8 GPUs: the ninth worker fits nowhere
    tally.close()
    assert allocation.get("big").num_workers == 8 and allocation.get("big").num_ps == 1
    assert (tally.asked, tally.left) == (10, 1)

    class Refuse:
        name = "refuse"

        def choose(self, state: NodeState, demand: Demand, job_nodes: object) -> int:
            return -1

    refused = TallyingPlacer(Refuse())
    assert place_sticky(view, [(2, 1)], refused).get("big") == JobAllocation()
    refused.close()
    assert (refused.asked, refused.left) == (3, 3) and refused.share_left == 1.0


# -- rewards and training ---------------------------------------------------------------------------------------


def test_reward_is_own_relative_speed_plus_the_slowdown_inflicted() -> None:
    a, b = philly_job("a", "wlm", 1), philly_job("b", "vgg-16", 1)
    recorder = ExperienceRecorder(SimulatorSpeeds(SPEED, INTERFERENCE), cluster(), SPEED)
    held_a = JobAllocation((0,), (0,))
    views = tuple(JobView(job.spec, 0.0, 0.0, held, 0.0, 0.0, 0) for job, held in ((a, held_a), (b, JobAllocation())))
    view = ClusterView(0.0, 0, 600.0, cluster(), views, Allocation())
    tenancy = Tenancy(views, [(1, 1), (1, 1)], 3)
    tenancy.register(0, (0,), (0,))
    state = NodeState(cluster(), tenancy=tenancy)
    recorder.decided(np.zeros(JOB_INPUTS, np.float32), np.eye(2, SERVER_INPUTS, dtype=np.float32), 0, 0.5)
    recorder.job_placed(state, 1, {})  # b decided where to go, held nothing before
    allocation = Allocation({"a": held_a, "b": JobAllocation((0,), (0,))})  # ... and joined a on server 0
    recorder.end_round(view, allocation)
    decisions = recorder.take()
    table, index = INTERFERENCE.table, INTERFERENCE.model_index
    on_b, on_a = table[index["vgg-16"]][index["wlm"]], table[index["wlm"]][index["vgg-16"]]
    # both packed on one server: b runs at 1/on_b of its speed alone, and a lost 1 - 1/on_a of its own
    assert decisions.rewards.tolist() == pytest.approx([1 / on_b - (1 - 1 / on_a)])
    assert decisions.behaviour.tolist() == [0.5]
    # alone on server 1 instead: no slowdown either way
    recorder.decided(np.zeros(JOB_INPUTS, np.float32), np.eye(2, SERVER_INPUTS, dtype=np.float32), 1, 0.5)
    recorder.job_placed(state, 1, {})
    recorder.end_round(view, Allocation({"a": held_a, "b": JobAllocation((1,), (1,))}))
    assert recorder.take().rewards.tolist() == pytest.approx([1.0])


def test_a_task_left_unplaced_costs_the_speed_it_would_have_added() -> None:
    # b is asked for 2 workers and 1 PS but placed with 1 worker, alone: its reward is its speed over its speed
    # alone with the 2 workers it was asked for, not over the speed of the 1 it got (inception-bn: a second worker
    # beside one PS speeds it up)
    b = philly_job("b", "inception-bn", 2)
    recorder = ExperienceRecorder(SimulatorSpeeds(SPEED, INTERFERENCE), cluster(), SPEED)
    views = (JobView(b.spec, 0.0, 0.0, JobAllocation(), 0.0, 0.0, 0),)
    view = ClusterView(0.0, 0, 600.0, cluster(), views, Allocation())
    tenancy = Tenancy(views, [(2, 1)], 3)
    tenancy.register(0, (), ())
    state = NodeState(cluster(), tenancy=tenancy)
    recorder.decided(np.zeros(JOB_INPUTS, np.float32), np.eye(2, SERVER_INPUTS, dtype=np.float32), 0, 0.5)
    recorder.job_placed(state, 0, {})
    recorder.end_round(view, Allocation({"b": JobAllocation((1,), (1,))}))
    reward = recorder.take().rewards[0]
    one, two = recorder.reference(b.spec, 1, 1), recorder.reference(b.spec, 2, 1)
    assert two > one
    assert reward == pytest.approx(one / two)


def test_replay_keeps_the_newest_decisions_and_samples_whole_decisions() -> None:
    def batch(size: int, value: float) -> Decisions:
        rows = np.full((2 * size, SERVER_INPUTS), value, np.float32)
        return Decisions(
            np.full((size, JOB_INPUTS), value, np.float32),
            rows,
            np.ones(2 * size, np.float32),
            np.arange(0, 2 * size + 1, 2),
            np.zeros(size, np.int64),
            np.ones(size),
            np.full(size, value),
        )

    replay = ReplayBuffer(capacity=5)
    for value in (1.0, 2.0, 3.0):
        replay.add(batch(3, value))
    assert len(replay) == 6  # the first batch went once the others held more than capacity minus it
    sample = replay.sample(4, np.random.default_rng(0))
    assert sample is not None and len(sample) == 4 and len(sample.rows) == 8
    assert set(sample.rewards.tolist()) <= {2.0, 3.0}


def tiny_training(**changes: Any) -> PlacerTraining:
    """Training on `TINY` under DRF, validated on one seed, with a small network; `changes` override."""
    values: dict[str, Any] = {
        "source": TINY,
        "validation_seeds": (9,),
        "schedulers": ("drf",),
        "network": PlacerConfig((8,)),
    }
    return PlacerTraining(**{**values, **changes})


def test_training_on_a_tiny_budget_runs_and_saves_a_usable_placer(tmp_path: Path) -> None:
    world = World(SPEED, INTERFERENCE, None)  # the simulator's world: no speed model needed
    training = tiny_training(iterations=2, validate_every=1, updates_per_iteration=2, minibatch_size=64)
    trainer = PlacerTrainer(training, world)
    result = trainer.train()
    assert len(result.history) == 2 and all(h.decisions > 0 for h in result.history)
    assert math.isfinite(result.best_validation_jct_s)
    from dl2.nn.state_io import write_model_dir

    document = {"kind": "placer", **training.network.to_json_dict(), "metadata": {}}
    folder = write_model_dir(tmp_path / "placer", {WEIGHTS: result.best_policy}, document)
    placer = HarmonyPlacer.from_dir(folder)
    episode = run_episode(world, workload(TINY, 10), "optimus-fitted", placer, SimConfig.realistic(0))
    assert episode.avg_jct_s > 0 and episode.decisions is None


def test_imitation_warm_up_learns_the_heuristic_s_choices_then_rl_goes_on() -> None:
    training = tiny_training(
        iterations=1,
        validate_every=10,
        updates_per_iteration=30,
        imitate="isolate",
        imitation_iterations=2,
        explorers=("isolate",),
        network=PlacerConfig((16,)),
    )
    result = PlacerTrainer(training, World(SPEED, INTERFERENCE, None)).train()
    assert [h.imitation for h in result.history] == [True, True, False]
    # the cross-entropy of the copied choices falls; the warm-up ends with a validation, and so does the run
    assert result.history[1].actor_loss < result.history[0].actor_loss
    assert [h.validation_jct_s is not None for h in result.history] == [False, True, True]


def test_a_teacher_labels_the_policy_s_decisions_without_changing_what_it_places() -> None:
    """DAgger's labelling: the hook is told the row the heuristic would choose in the state the policy's own
    choices made, and the run is the one the policy makes alone."""
    world = World(SPEED, INTERFERENCE, None)
    untrained = NumpyPlacementPolicy.from_state_dict(PlacerNetwork(PlacerConfig((8,))).state_dict())
    isolate = IsolatePlacer()

    class Teacher:
        name = "spy"

        def __init__(self) -> None:
            self.expected: list[int] = []

        def choose(self, state: NodeState, demand: Demand, job_nodes: Sequence[int]) -> int:
            node = isolate.choose(state, demand, job_nodes)
            self.expected.append(int(np.searchsorted(state.fitting_nodes(demand), node)))
            return node

    class Labels:
        def __init__(self) -> None:
            self.labels: list[int] = []
            self.own: list[int] = []

        def decided(self, job: np.ndarray, rows: np.ndarray, choice: int, probability: float) -> None:
            self.labels.append(choice)
            self.own.append(int(np.argmax(untrained.logits(rows, job))))

        def job_placed(self, state: NodeState, rank: int, kept: dict[int, tuple[int, int]]) -> None:
            pass

    def run(teacher: Teacher | None, hook: Labels | None) -> list[float]:
        placer = HarmonyPlacer(untrained, PlacerConfig((8,)))
        placer.teacher, placer.hook = teacher, hook
        simulation = world.simulation(workload(TINY, 3), SimConfig.realistic(0))
        policy = make_scheduler("drf", SPEED, False, placer)
        while not simulation.done:
            simulation.apply(policy.schedule(simulation.begin_slot()))
            placer.finish_job()
        return [job.jct_s for job in simulation.result("drf").jobs]

    teacher, labels = Teacher(), Labels()
    assert run(teacher, labels) == run(None, None)
    assert labels.labels == teacher.expected and len(labels.labels) > 10
    assert labels.labels != labels.own  # the untrained policy placed otherwise than the labels say


def test_dagger_episodes_train_the_actor_only_and_keep_out_of_replay() -> None:
    training = tiny_training(imitate="isolate", imitation_iterations=2, dagger=True, updates_per_iteration=5)
    trainer = PlacerTrainer(training, World(SPEED, INTERFERENCE, None))
    first = trainer.iteration(0)  # the heuristic places, as without DAgger
    assert trainer.replay is not None and len(trainer.replay) == first.decisions > 0
    critic, policy = trainer._copy(trainer.critic), trainer._copy(trainer.policy)
    second = trainer.iteration(1)  # the policy places, the heuristic labels
    assert second.imitation and second.decisions > 0 and len(trainer.replay) == first.decisions
    assert all(torch.equal(critic[name], value) for name, value in trainer.critic.state_dict().items())
    assert not all(torch.equal(policy[name], value) for name, value in trainer.policy.state_dict().items())


def test_training_refuses_an_unknown_heuristic() -> None:
    with pytest.raises(ConfigError, match="imitate"):
        PlacerTraining(imitate="nowhere", imitation_iterations=1)
    with pytest.raises(ConfigError, match="explorers"):
        PlacerTraining(explorers=("load-balance", "nowhere"))


def test_speed_model_folder_round_trip(tmp_path: Path) -> None:
    from dl2.nn.state_io import write_model_dir
    from dl2.placement.speed_model import WEIGHTS as SPEED_WEIGHTS

    samples = log_samples(LoggedRun(TINY, 6, "optimus", "binpack"), 0)
    result = train_predictor(samples, PredictorTraining(epochs=1, network=SpeedModelConfig((8,), (8,))))
    document = {"kind": "speed-model", **result.config.to_json_dict(), "metadata": {}}
    folder = write_model_dir(tmp_path / "speed", {SPEED_WEIGHTS: result.state}, document)
    loaded = NumpySpeedModel.from_dir(folder)
    np.testing.assert_array_equal(
        loaded.log_throughput(samples.encoded), result.numpy_model().log_throughput(samples.encoded)
    )
    with pytest.raises(InputError, match="not a placer folder"):
        HarmonyPlacer.from_dir(folder)


# -- command line -----------------------------------------------------------------------------------------------


def test_cli_trains_both_models_and_simulates_with_the_placer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dl2.cli.main import main

    speed_dir, placer_dir = tmp_path / "speed", tmp_path / "placer"
    data = ["--source", TINY, "--seeds", "1", "--held-out-seeds", "2", "--schedulers", "drf", "--placers", "binpack"]
    network = ["--epochs", "1", "--encoder", "8", "--head", "8", "--seed", "1"]
    assert main(["train-speed-model", *data, *network, "--out", str(speed_dir)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert 0 < report["held_out_mean_relative_error"]["network"] < 10
    assert json.loads((speed_dir / "config.json").read_text())["metadata"]["data"]["logged_slots"] > 0
    training = ["--source", TINY, "--schedulers", "drf", "--iterations", "1", "--validation-seeds", "3"]
    placer = ["--speed-model", str(speed_dir), "--hidden", "8", "--out", str(placer_dir)]
    assert main(["train-placer", *training, *placer]) == 0
    assert json.loads(capsys.readouterr().out)["best_iteration"] in (-1, 0)
    # what `dl2 simulate --placer <folder>` builds (the CLI's workloads are named ones, none this small)
    make_placer = placer_factory(str(placer_dir))
    assert make_placer is not None
    policy = make_scheduler("drf", SPEED, False, make_placer())
    result = simulate(workload(TINY, 0), policy, SimConfig.realistic(0), SPEED, INTERFERENCE)
    assert len(result.jobs) == 40
    assert main(["simulate", "--workload", TINY, "--scheduler", "drf", "--placer", str(speed_dir)]) == 2
    assert "not a placer" in capsys.readouterr().err
    assert main(["train-placer", *training, "--out", str(tmp_path / "x")]) == 2  # the model's world needs the model
    assert main(["train-placer", *training, "--temperature", "-1", "--out", str(tmp_path / "y")]) == 2
    assert (
        "--temperature: '-1' is not allowed" in capsys.readouterr().err
    )  # refused by PlacerTraining's definition, by flag


def test_a_job_type_the_catalogue_lacks_is_held_but_counted_in_no_type_column() -> None:
    # only an oracle handed a truth's labels sees such a job; placers that look at neighbours must still run
    known, unknown = philly_job("a", "wlm", 1), philly_job("b", "wlm", 1)
    unknown = replace(unknown, spec=replace(unknown.spec, model="graph-net"))
    views = tuple(JobView(job.spec, 0.0, 0.0, JobAllocation(), 0.0, 0.0, 0) for job in (known, unknown))
    tenancy = Tenancy(views, [(1, 1), (1, 1)], 3)
    tenancy.register(0, (0,), (0,))
    tenancy.register(1, (0,), (1,))
    counts = tenancy.jobs_of_type
    assert counts.sum() == 1 and counts[0].sum() == 1 and counts[1].sum() == 0  # only job a is counted
    assert set(tenancy.jobs_on(0)) == {0, 1} and tenancy.holdings(1) == {0: [1, 0], 1: [0, 1]}
    tenancy.add(1, 2, False)
    tenancy.remove(1, 0, False)
    assert tenancy.jobs_of_type.sum() == 1 and set(tenancy.jobs_on(2)) == {1} and set(tenancy.jobs_on(0)) == {0}
