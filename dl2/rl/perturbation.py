"""Exact credit for one slot's decisions (compatibility mode): sample one slot, finish greedily, compare.

Why: with returns as the signal (DL2 §4.3, `dl2.rl.actor_critic`), the ~150-190 decisions of a slot share one
advantage that the sampling of every later slot also moves, while one decision changes the total JCT very little
(`benchmarks/counterfactuals.py`): that advantage is mostly noise.

Compatibility mode is deterministic, so one slot's effect can be measured exactly, with common random numbers:
the greedy policy plays a workload and a copy of the simulation is kept at a few random slots (`Simulation.fork`);
at each copy that one slot's decisions are sampled from the policy and the greedy policy finishes the run. The
greedy run's total JCT minus this one is the exact advantage of the sampled decisions over the greedy ones
(REINFORCE for a policy that samples at that slot and acts greedily elsewhere, with the greedy continuation as its
baseline: an unbiased, low-variance gradient for improving the greedy policy one slot at a time). A sampled slot
that gives the greedy allocation has advantage 0 and costs no continuation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from dl2.core import Allocation, ClusterView, Workload
from dl2.env.decision import SlotDecision, action_count
from dl2.env.observation import Observer
from dl2.rl.inference import NumpyPolicy
from dl2.rl.learned import LearnedScheduler
from dl2.rl.model_io import PolicyConfig
from dl2.sim.config import SimConfig
from dl2.sim.run import interference_model, speed_model
from dl2.sim.simulator import Simulation
from dl2.workload.source import workload


@dataclass(frozen=True, slots=True)
class ForkedRunTask:
    """What every exact-credit task starts from: the greedy policy through one training workload, forked at
    random slots (picklable, for rollout workers)."""

    policy: NumpyPolicy
    config: PolicyConfig
    source: str
    workload_seed: int
    rng_seed: int
    slot_probability: float
    """Chance that a slot with a decision is forked (perturbed, or one of its decisions replaced)."""
    max_slots: int = 3_000
    """Runs are cut at this slot; a job unfinished by then counts the time it has spent so far (the same cut for
    the greedy run and every branch, so that a policy that starves jobs is still compared, never stalled)."""

    def forked_run(self) -> tuple[GreedyRun, np.random.Generator]:
        """The forked greedy run, and the task's generator after the forks were drawn (for its own draws)."""
        rng = np.random.default_rng(self.rng_seed)
        run = greedy_run_with_forks(
            self.policy, self.config, self.source, self.workload_seed, self.max_slots, self.slot_probability, rng
        )
        return run, rng


@dataclass(frozen=True, slots=True)
class PerturbationTask(ForkedRunTask):
    """One training workload's perturbed slots."""


@dataclass(slots=True)
class PerturbationBatch:
    """The sampled decisions of the perturbed slots whose allocation differed from the greedy one."""

    observations: np.ndarray
    masks: np.ndarray
    actions: np.ndarray
    advantages: np.ndarray
    """Per decision: its slot's exact advantage, in slots of average JCT (greedy run minus perturbed run)."""
    greedy_avg_jct_s: float
    perturbed_slots: int
    """Slots sampled (including those that gave the greedy allocation)."""
    changed_slots: int
    """Sampled slots whose allocation differed from the greedy one (each cost one continuation)."""
    improved_slots: int
    """Of those, how many finished the workload with a lower total JCT."""
    workload: str


@dataclass(slots=True)
class Fork:
    """A copy of a greedy run at the start of one of its slots, with what the greedy policy chose there."""

    view: ClusterView
    simulation: Simulation
    allocation: Allocation


@dataclass(slots=True)
class GreedyRun:
    work: Workload
    greedy: LearnedScheduler
    total_jct_s: float
    """Sum of JCTs of the run (cut at `max_slots`: unfinished jobs count the time spent so far)."""
    forks: list[Fork]


def greedy_run_with_forks(
    policy: NumpyPolicy,
    config: PolicyConfig,
    source: str,
    workload_seed: int,
    max_slots: int,
    fork_probability: float,
    rng: np.random.Generator,
) -> GreedyRun:
    """The greedy policy through one workload (compatibility mode), forked at each slot with a decision with
    `fork_probability`: the common start of every exact-credit comparison."""
    work = workload(source, workload_seed)
    sim_config = replace(SimConfig.compat(workload_seed), stall_slots=max_slots + 1)
    simulation = Simulation(work, sim_config, speed_model(sim_config.mode), interference_model())
    greedy = LearnedScheduler(config, policy, greedy=True)
    forks = []
    while not simulation.done and simulation.slot < max_slots:
        view = simulation.begin_slot()
        allocation = greedy.schedule(view)
        if view.jobs and rng.random() < fork_probability:
            forks.append(Fork(view, simulation.fork(), allocation))
        simulation.apply(allocation)
    return GreedyRun(work, greedy, simulation.total_jct_s(), forks)


def finish(simulation: Simulation, schedule: Callable[[ClusterView], Allocation], max_slots: int) -> float:
    """Runs `simulation` on with `schedule` to its end or `max_slots`; returns its total JCT (s) then."""
    while not simulation.done and simulation.slot < max_slots:
        simulation.apply(schedule(simulation.begin_slot()))
    return simulation.total_jct_s()


def allocation_counts(allocation: Allocation) -> dict[str, tuple[int, int]]:
    """Per job: (workers, PS): what two slots must share to be the same slot."""
    return {job_id: (a.num_workers, a.num_ps) for job_id, a in allocation.jobs.items()}


def run_perturbations(task: PerturbationTask) -> PerturbationBatch:
    config = task.config
    if config.mode != "compat":
        raise ValueError("perturbation credit needs compatibility mode (a deterministic simulator)")
    run, rng = task.forked_run()
    work, greedy, greedy_total = run.work, run.greedy, run.total_jct_s
    scale = len(work.jobs) * work.slot_s  # advantages in slots of average JCT
    observations, masks, actions, advantages = [], [], [], []
    observer = Observer(config.observation)
    changed = improved = 0
    for fork in run.forks:
        view, twin, greedy_counts = fork.view, fork.simulation, allocation_counts(fork.allocation)
        decision = SlotDecision(
            view,
            config.observation.window,
            True,
            None,
            work_conserving=True,
            packed=config.observation.packed,
        )
        slot_observations, slot_masks, slot_actions = [], [], []
        while not decision.done:
            observation, mask = observer(decision), decision.mask()
            action, _ = task.policy.act(observation, mask, rng)
            slot_observations.append(observation)
            slot_masks.append(mask)
            slot_actions.append(action)
            decision.step(action)
        allocation = decision.allocation()
        if allocation_counts(allocation) == greedy_counts:
            continue  # the greedy allocation again: advantage 0, nothing to learn or to simulate
        changed += 1
        twin.apply(allocation)
        advantage = (greedy_total - finish(twin, greedy.schedule, task.max_slots)) / scale
        improved += advantage > 0
        observations += slot_observations
        masks += slot_masks
        actions += slot_actions
        advantages += [advantage] * len(slot_actions)
    size = config.observation.size
    return PerturbationBatch(
        np.array(observations, dtype=np.float32).reshape(-1, size),
        np.array(masks, dtype=np.int8).reshape(-1, action_count(config.observation.window)),
        np.array(actions, dtype=np.int64),
        np.array(advantages, dtype=np.float64),
        greedy_total / len(work.jobs),
        len(run.forks),
        changed,
        int(improved),
        work.name,
    )
