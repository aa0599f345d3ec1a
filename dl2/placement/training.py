"""Actor-critic training of Harmony's placer (PyTorch), against the speed-prediction model.

Harmony §4.2: the policy learns from rewards the prediction model gives, with experience replay and
exploration that mixes in the heuristics. The learner is a soft actor-critic for discrete actions (Christodoulou
2019) in its one-step form: a placement's reward (`experience`) already holds what the placement does to its
job over the slots it lasts and to its neighbours, so the critic learns Q(s, a), the expected reward of putting
the job's next tasks on candidate server a (or of leaving them unplaced), by regression on replayed decisions,
and the actor is pulled towards softmax(Q / alpha):

    critic  (Q(s, a) - r)^2                                     over decisions taken (fresh and replayed)
    actor   sum_a pi(a|s) (alpha log pi(a|s) - Q(s, a))          over every candidate of those decisions

Both are per-candidate scorers with shared weights, so the critic learns from every decision, also those the
exploration took: with probability epsilon (annealed) a job's placement in a round follows one of the
`explorers` heuristics (job-aware exploration; load balancing and bin packing by default). One iteration
plays one training workload (a new seed each time) under one of the allocation policies in the speed model's
world, then takes gradient steps on minibatches of fresh and replayed decisions. Every `validate_every`
iterations the greedy placer runs the validation workloads in the same world and the best policy by mean
average JCT is kept. Test workloads are never used.

An optional warm-up comes first (`imitate`, as DL2 §4.1 warms its policy up on a scheduler's decisions): for
`imitation_iterations` episodes every job's placement follows that heuristic and the actor learns to make its
choices (cross-entropy over the candidates), the critic learning their rewards as usual; with `dagger`, after
the first episode the policy places the jobs and the heuristic labels its decisions. The warm-up ends with a
validation, so the copy competes for the best policy too.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from dl2.nn.layers import mlp
from dl2.placement.config import JOB_INPUTS, SERVER_INPUTS, PlacerConfig, PlacerTraining
from dl2.placement.episodes import World, run_episode
from dl2.placement.experience import Decisions, ExperienceRecorder, ReplayBuffer
from dl2.placement.policy import HarmonyPlacer, NumpyPlacementPolicy
from dl2.placement.world import SimulatorSpeeds, SpeedSource
from dl2.schedulers.registry import PLACERS
from dl2.sim.config import SimConfig
from dl2.workload.source import workload


class PlacerNetwork(nn.Module):
    """Scores (server row, job row) pairs; `NumpyPlacementPolicy` evaluates the same layers."""

    def __init__(self, config: PlacerConfig) -> None:
        super().__init__()
        self.scorer = mlp([SERVER_INPUTS + JOB_INPUTS, *config.hidden, 1], final_activation=False)

    def forward(self, rows: torch.Tensor, jobs: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.scorer(torch.cat([rows, jobs[segments]], dim=1)).squeeze(1)
        return logits


@dataclass(slots=True)
class IterationStats:
    iteration: int
    scheduler: str
    train_jct_s: float
    decisions: int
    mean_reward: float
    actor_loss: float
    critic_loss: float
    entropy: float
    slots: int
    """Slots the iteration simulated (training episode and validations)."""
    seconds: float
    validation_jct_s: float | None = None
    validation_runs_s: list[float] | None = None
    """Each validation run's average JCT (seed by seed, allocation policies in turn)."""
    imitation: bool = False
    """Whether the iteration copied `imitate`'s decisions (the warm-up) rather than learning by RL."""


@dataclass(slots=True)
class PlacerResult:
    best_policy: dict[str, torch.Tensor]
    best_critic: dict[str, torch.Tensor]
    best_validation_jct_s: float
    best_iteration: int
    history: list[IterationStats]
    untrained_validation_runs_s: list[float]
    """The validation runs of the policy before training (iteration -1)."""


class PlacerTrainer:
    def __init__(
        self,
        training: PlacerTraining,
        world: World,
        initial: tuple[Mapping[str, torch.Tensor], Mapping[str, torch.Tensor] | None] | None = None,
    ) -> None:
        """`initial`: the policy's and (if kept) the critic's weights to start from, as a retraining starts from
        the placer already deployed (`dl2.placement.refit`); None: fresh networks."""
        torch.manual_seed(training.seed)
        self.training = training
        self.world = world
        self.policy = PlacerNetwork(training.network)
        self.critic = PlacerNetwork(training.network)
        if initial is not None:
            self.policy.load_state_dict(initial[0])
            if initial[1] is not None:
                self.critic.load_state_dict(initial[1])
        self.policy_optimizer = torch.optim.Adam(self.policy.parameters(), lr=training.learning_rate)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=training.critic_learning_rate)
        self.replay = ReplayBuffer(training.replay_capacity) if training.replay else None
        self.rng = np.random.default_rng(training.seed)

    def placer(self, greedy: bool) -> HarmonyPlacer:
        policy = NumpyPlacementPolicy.from_state_dict(self.policy.state_dict())
        return HarmonyPlacer(policy, self.training.network, greedy=greedy, seed=int(self.rng.integers(2**31)))

    def validate(self) -> tuple[float, int, list[float]]:
        """Mean average JCT of the greedy placer over validation workloads and allocation policies, the slots
        run, and each run's average JCT (seed by seed, allocation policies in turn)."""
        jcts, slots = [], 0
        for seed in self.training.validation_seeds:
            for scheduler in self.training.schedulers:
                result = run_episode(
                    self.world,
                    workload(self.training.source, seed),
                    scheduler,
                    self.placer(True),
                    SimConfig.realistic(seed),
                )
                jcts.append(result.avg_jct_s)
                slots += result.slots
        return float(np.mean(jcts)), slots, jcts

    def iteration(self, index: int) -> IterationStats:
        """Iteration `index`: the imitation warm-up's first, then RL's (numbered on, so each plays its own seed)."""
        started = time.perf_counter()
        training = self.training
        imitation = index < training.imitation_iterations
        scheduler = training.schedulers[index % len(training.schedulers)]
        seed = training.train_seed_offset + index
        job_workload = workload(training.source, seed)
        placer = self.placer(greedy=False)
        dagger = imitation and training.dagger and index > 0
        if dagger:
            # the policy places every job; the heuristic labels each decision with what it would have chosen
            placer.teacher = PLACERS[training.imitate]()
        elif imitation:
            # every job's placement follows the heuristic; the policy learns to choose what it chose
            placer.epsilon, placer.explorers = 1.0, (PLACERS[training.imitate](),)
        else:
            progress = (index - training.imitation_iterations) / max(training.iterations - 1, 1)
            placer.epsilon = training.epsilon_start + (training.epsilon_end - training.epsilon_start) * progress
            placer.explorers = tuple(PLACERS[name]() for name in training.explorers)
        recorder = ExperienceRecorder(self._reward_source(), job_workload.cluster, self.world.speed)
        result = run_episode(self.world, job_workload, scheduler, placer, SimConfig.realistic(seed), recorder)
        fresh = result.decisions
        assert fresh is not None
        losses = self.update(fresh, imitation, learn_values=not dagger)
        if self.replay is not None and not dagger:
            self.replay.add(fresh)
        return IterationStats(
            index,
            scheduler,
            result.avg_jct_s,
            len(fresh),
            float(fresh.rewards.mean()) if len(fresh) else 0.0,
            *losses,
            result.slots,
            time.perf_counter() - started,
            imitation=imitation,
        )

    def _reward_source(self) -> SpeedSource:
        return self.world.source or SimulatorSpeeds(self.world.speed, self.world.interference)

    def update(
        self, fresh: Decisions, imitation: bool = False, learn_values: bool = True
    ) -> tuple[float, float, float]:
        """Gradient steps on fresh and replayed decisions; with `imitation` the actor learns to make the choices
        taken (cross-entropy) instead of following the critic; without `learn_values` the critic is left as it is
        (DAgger's labels are not the choices whose rewards were observed)."""
        training = self.training
        if len(fresh) == 0:
            return 0.0, 0.0, 0.0
        stats = []
        for _ in range(training.updates_per_iteration):
            batch = fresh.subset(self.rng.integers(0, len(fresh), size=min(training.minibatch_size, len(fresh))))
            if self.replay is not None and len(self.replay) and training.replay_ratio > 0:
                replayed = self.replay.sample(int(len(batch) * training.replay_ratio), self.rng)
                if replayed is not None:
                    batch = Decisions.concatenate([batch, replayed])
            stats.append(self._step(batch, imitation, learn_values))
        policy_loss, value_loss, entropy = np.mean(stats, axis=0)
        return float(policy_loss), float(value_loss), float(entropy)

    def _step(self, batch: Decisions, imitation: bool, learn_values: bool) -> tuple[float, float, float]:
        rows = torch.from_numpy(batch.rows)
        jobs = torch.from_numpy(batch.jobs)
        log_counts = torch.log(torch.from_numpy(batch.counts))
        segments = torch.from_numpy(np.repeat(np.arange(len(batch)), np.diff(batch.starts)))
        chosen = torch.from_numpy(batch.starts[:-1] + batch.choices)
        rewards = torch.from_numpy(batch.rewards.astype(np.float32))
        q = self.critic(rows, jobs, segments)
        critic_loss = nn.functional.mse_loss(q[chosen], rewards)
        if learn_values:
            self.critic_optimizer.zero_grad()
            critic_loss.backward()  # type: ignore[no-untyped-call]
            self.critic_optimizer.step()
        # distinct rows stand for `count` candidates each: the softmax over candidates is the softmax over rows
        # with log(count) added, and the entropy is that of the choice among rows
        log_pi = _segment_log_softmax(self.policy(rows, jobs, segments) + log_counts, segments, len(batch))
        pi = log_pi.exp()
        alpha = self.training.temperature
        if imitation:
            actor_loss = -log_pi[chosen].mean()
        else:
            per_row = pi * (alpha * log_pi - q.detach())
            actor_loss = torch.zeros(len(batch)).index_add_(0, segments, per_row).mean()
        self.policy_optimizer.zero_grad()
        actor_loss.backward()  # type: ignore[no-untyped-call]
        nn.utils.clip_grad_norm_(self.policy.parameters(), 1.0)
        self.policy_optimizer.step()
        entropy = -torch.zeros(len(batch)).index_add_(0, segments, (pi * log_pi).detach()).mean()
        return float(actor_loss.detach()), float(critic_loss.detach()), float(entropy)

    def train(self, on_iteration: Callable[[IterationStats], None] | None = None) -> PlacerResult:
        training = self.training
        best_jct, slots, first_runs = self.validate()
        best = (self._copy(self.policy), self._copy(self.critic), best_jct, -1)
        history: list[IterationStats] = []
        total = training.imitation_iterations + training.iterations
        for index in range(total):
            stats = self.iteration(index)
            warmed_up = index == training.imitation_iterations - 1
            if (index + 1) % training.validate_every == 0 or index == total - 1 or warmed_up:
                stats.validation_jct_s, validation_slots, stats.validation_runs_s = self.validate()
                stats.slots += validation_slots
                if stats.validation_jct_s < best[2]:
                    best = (self._copy(self.policy), self._copy(self.critic), stats.validation_jct_s, index)
            history.append(stats)
            if on_iteration is not None:
                on_iteration(stats)
        if history:
            history[0].slots += slots  # the validation of the untrained policy
        return PlacerResult(best[0], best[1], best[2], best[3], history, first_runs)

    @staticmethod
    def _copy(network: nn.Module) -> dict[str, torch.Tensor]:
        return {name: value.detach().clone() for name, value in network.state_dict().items()}


def _segment_log_softmax(logits: torch.Tensor, segments: torch.Tensor, count: int) -> torch.Tensor:
    largest = torch.full((count,), -math.inf).scatter_reduce(
        0, segments, logits.detach(), reduce="amax", include_self=True
    )
    shifted = logits - largest[segments]
    total = torch.zeros(count).index_add_(0, segments, shifted.exp())
    return shifted - torch.log(total)[segments]
