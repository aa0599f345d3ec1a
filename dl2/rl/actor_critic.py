"""Online RL for the DL2 policy (§4.3): REINFORCE with a value-network baseline (actor-critic), entropy
regularisation, job-aware exploration and experience replay, each a switch for the ablations of §6.5.

Every iteration the rollout workers play `episodes_per_iteration` episodes with the current policy (sampled
actions; a share replaced by job-aware exploration), the learner computes for each decision the return of its
slot (discounted over slots, or DL2 code's myopic per-slot reward), the advantage against the value network
(or against the batch mean when the baseline is off), and takes gradient steps on
    - log pi(a|s) * A  -  entropy_weight * H(pi(.|s))        (policy)
    (V(s) - G)^2                                               (value, on normalised returns)
over the fresh decisions plus, with replay on, as many decisions drawn from a buffer of recent ones (their
advantages recomputed with the current value network). Checkpoints are selected on validation workloads,
which are disjoint from the test workloads.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np
import torch

from dl2.env.config import EnvConfig
from dl2.rl.buffers import ReplayBuffer, ReturnScale
from dl2.rl.config import MASKED_LOGIT, RLConfig
from dl2.rl.deviation import DeviationBatch, DeviationTask
from dl2.rl.inference import NumpyPolicy
from dl2.rl.model_io import PolicyConfig
from dl2.rl.networks import PolicyNetwork, ValueNetwork
from dl2.rl.perturbation import PerturbationBatch, PerturbationTask
from dl2.rl.rollout import Episode, EpisodeTask, slot_returns
from dl2.rl.supervised import minibatches
from dl2.rl.workers import RolloutPool
from dl2.sim.run import World


@dataclass(slots=True)
class IterationStats:
    iteration: int
    train_jct_s: float
    """Mean average JCT of the iteration's training episodes (exploration included)."""
    mean_return: float
    """Mean return of the iteration's decisions (with perturbation credit: their mean exact advantage, slots)."""
    policy_loss: float
    value_loss: float
    entropy: float
    decisions: int
    seconds: float
    validation_jct_s: float | None = None


@dataclass(slots=True)
class TrainingState:
    """What training produced: the best and last policies and the learning curve."""

    best_policy: dict[str, torch.Tensor]
    best_value: dict[str, torch.Tensor]
    best_validation_jct_s: float
    best_iteration: int
    history: list[IterationStats]


class ActorCritic:
    def __init__(
        self,
        env: EnvConfig,
        config: RLConfig,
        policy: PolicyNetwork | None = None,
        value: ValueNetwork | None = None,
        world: World | None = None,
    ) -> None:
        """`world`: where the episodes run, training and validation alike (None: the catalogue of the
        environment's mode), e.g. a twin calibrated from a cluster's records. Exact credits replay the
        catalogue's compatibility mode, so they take none."""
        if world is not None and config.credit != "returns":
            raise ValueError(f"credit {config.credit!r} replays the catalogue: it cannot run in another world")
        torch.manual_seed(config.seed)
        self.env = env
        self.world = world
        self.config = config
        shape = env.observation.shape
        size = shape.size
        num_actions = 3 * env.window + 1
        self.policy = policy or PolicyNetwork(shape, config.network)
        self.value = value or ValueNetwork(shape, config.network)
        self.policy_optimizer = torch.optim.Adam(self.policy.parameters(), lr=config.learning_rate)
        self.value_optimizer = torch.optim.Adam(self.value.parameters(), lr=config.value_learning_rate)
        self.scale = ReturnScale()
        self.replay = ReplayBuffer(config.replay.capacity, size, num_actions) if config.replay.enabled else None
        self.rng = np.random.default_rng(config.seed)
        self.episodes_played = 0
        self.updates = 0

    # -- acting --------------------------------------------------------------------------------------------------

    def numpy_policy(self) -> NumpyPolicy:
        """The current policy for NumPy inference in the rollout workers."""
        return NumpyPolicy.from_state_dict(self.policy.state_dict(), self.env.observation.shape, self.config.network)

    def training_tasks(self, iteration: int) -> list[EpisodeTask]:
        epsilon = self.config.exploration.epsilon(iteration / max(self.config.iterations - 1, 1))
        policy = self.numpy_policy()
        tasks = []
        for _ in range(self.config.episodes_per_iteration):
            seed = self.config.train_seed_offset + self.episodes_played // max(self.config.group_size, 1)
            self.episodes_played += 1
            tasks.append(
                EpisodeTask(
                    policy,
                    self.env,
                    self.config.train_source,
                    seed,
                    int(self.rng.integers(2**31 - 1)),
                    epsilon=epsilon,
                    exploration=self.config.exploration,
                    world=self.world,
                )
            )
        return tasks

    def _greedy_runs(self) -> Iterator[tuple[NumpyPolicy, PolicyConfig, str, int, int, float]]:
        """Per training workload of an exact-credit iteration, the fields both kinds of task start with: the
        greedy policy, its configuration, the training source, the workload's seed, a seed for the task's own
        draws and the chance that a slot is changed."""
        config = self.config
        policy_config = PolicyConfig(self.env.observation, config.network, "compat", self.env.placer)
        policy = self.numpy_policy()
        for _ in range(config.episodes_per_iteration):
            seed = config.train_seed_offset + self.episodes_played
            self.episodes_played += 1
            rng_seed = int(self.rng.integers(2**31 - 1))
            yield policy, policy_config, config.train_source, seed, rng_seed, config.perturbation_probability

    def perturbation_tasks(self) -> list[PerturbationTask]:
        return [PerturbationTask(*run, max_slots=self.env.max_slots) for run in self._greedy_runs()]

    def deviation_tasks(self) -> list[DeviationTask]:
        config = self.config
        return [
            DeviationTask(
                *run, max_slots=self.env.max_slots, alternatives=config.alternatives, continuation=config.continuation
            )
            for run in self._greedy_runs()
        ]

    def update_deviations(self, batches: list[DeviationBatch]) -> tuple[float, float]:
        """Policy improvement on the deviated states, MPO-style (Abdolmaleki et al. 2018): the target over a
        state's evaluated actions is the current policy reweighted by exp(advantage / eta), eta being
        `temperature` times the deviation of the non-zero advantages; the policy is fitted to it with a KL
        penalty to the current policy over all actions, so that it moves where the measured advantages say and
        little elsewhere. Returns the fitting loss and the policy's entropy on these states."""
        config = self.config
        advantages = np.concatenate([b.advantages for b in batches]) if batches else np.zeros((0, 1))
        measured = advantages[np.abs(advantages) > 0]
        if measured.size < 2 or not np.std(measured) > 0:
            return 0.0, float("nan")
        eta = config.temperature * float(np.std(measured))
        obs = torch.from_numpy(np.concatenate([b.observations for b in batches]))
        mask = torch.from_numpy(np.concatenate([b.masks for b in batches]))
        actions = torch.from_numpy(np.concatenate([b.actions for b in batches]))
        evaluated = torch.from_numpy(np.concatenate([b.evaluated for b in batches]))
        scaled = torch.from_numpy(advantages / eta).float()
        with torch.no_grad():
            old = torch.log_softmax(self.policy.masked_logits(obs, mask), dim=1)
            target = torch.softmax(old.gather(1, actions).masked_fill(~evaluated, MASKED_LOGIT) + scaled, dim=1)
        losses, entropies = [], []
        for _ in range(config.epochs_per_iteration):
            for index in minibatches(self.rng, len(actions), config.minibatch_size):
                log_probs = torch.log_softmax(self.policy.masked_logits(obs[index], mask[index]), dim=1)
                among = log_probs.gather(1, actions[index]).masked_fill(~evaluated[index], MASKED_LOGIT)
                fit = -(target[index] * torch.log_softmax(among, dim=1)).sum(dim=1).mean()
                kl = (old[index].exp() * (old[index] - log_probs)).sum(dim=1).mean()
                loss = fit + config.kl_weight * kl
                self.policy_optimizer.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                torch.nn.utils.clip_grad_norm_(self.policy.parameters(), 1.0)
                self.policy_optimizer.step()
                losses.append(float(loss.detach()))
                entropies.append(float(-(log_probs.exp() * log_probs).sum(dim=1).mean().detach()))
        return float(np.mean(losses)), float(np.mean(entropies))

    def update_perturbed(self, batches: list[PerturbationBatch]) -> tuple[float, float]:
        """Policy steps on the sampled slots' decisions with their exact advantages (not re-centred: the greedy
        continuation is already the baseline, and a slot that changed nothing must push nothing). Returns policy
        loss and entropy."""
        advantages = np.concatenate([b.advantages for b in batches])
        if not advantages.size or not np.any(advantages):
            return 0.0, float("nan")
        return self.policy_steps(
            np.concatenate([b.observations for b in batches]),
            np.concatenate([b.masks for b in batches]),
            np.concatenate([b.actions for b in batches]),
            advantages.astype(np.float32),
            centre=False,
        )

    def validation_tasks(self) -> list[EpisodeTask]:
        policy = self.numpy_policy()
        whole = replace(self.env, max_slots=max(self.env.max_slots, self.config.validation_max_slots))
        return [
            EpisodeTask(policy, whole, self.config.validation, seed, seed, greedy=True, record=False, world=self.world)
            for seed in self.config.validation_seeds
        ]

    # -- learning ------------------------------------------------------------------------------------------------

    def update(self, episodes: list[Episode]) -> tuple[float, float, float, float]:
        """One learner step on fresh episodes (plus replay). Returns mean return, policy loss, value loss, entropy."""
        config = self.config
        fresh = [self._targets(episode) for episode in episodes]
        # exploratory decisions shape trajectories and returns, but their probability is not the policy's: the
        # policy gradient uses the policy's own decisions only
        own = np.concatenate([~episode.explored for episode in episodes])
        observations = np.concatenate([episode.observations for episode in episodes])[own]
        masks = np.concatenate([episode.masks for episode in episodes])[own]
        actions = np.concatenate([episode.actions for episode in episodes])[own]
        advantages = np.concatenate([f[0] for f in fresh])[own]
        returns = np.concatenate([f[1] for f in fresh])[own]
        starts = np.concatenate([f[2] for f in fresh])
        start_targets = np.concatenate([f[3] for f in fresh])
        if config.sibling_baseline and config.group_size > 1:
            advantages = sibling_advantages(episodes, config.gamma)[own]
        elif not config.value_baseline:  # ablation: the batch mean is the baseline
            advantages = returns - returns.mean()
        if len(actions) > config.max_samples_per_iteration:
            keep = self.rng.choice(len(actions), config.max_samples_per_iteration, replace=False)
            observations, masks, actions = observations[keep], masks[keep], actions[keep]
            advantages, returns = advantages[keep], returns[keep]
        if self.replay is not None and self.replay.size:
            old = self.replay.sample(int(len(actions) * config.replay.ratio), self.rng)
            baseline = self.values(old[0]) if config.value_baseline else returns.mean()
            old_advantages = old[3] - baseline  # re-baselined with today's value network
            batch = (
                np.concatenate([observations, old[0]]),
                np.concatenate([masks, old[1]]),
                np.concatenate([actions, old[2]]),
                np.concatenate([advantages, old_advantages]).astype(np.float32),
            )
        else:
            batch = (observations, masks, actions, advantages.astype(np.float32))
        if self.replay is not None:
            self.replay.add(observations, masks, actions, returns.astype(np.float32))
        value_loss = self.value_steps(starts, start_targets) if config.value_baseline else 0.0
        if self.updates < config.value_warmup_iterations and config.value_baseline:
            policy_loss, entropy = 0.0, float("nan")  # the critic learns first: a fresh critic's advantages are noise
        else:
            policy_loss, entropy = self.policy_steps(*batch)
        self.updates += 1
        return float(returns.mean()), policy_loss, value_loss, entropy

    def values(self, observations: np.ndarray) -> np.ndarray:
        """Value estimates in return units."""
        with torch.no_grad():
            normalised = self.value(torch.from_numpy(observations)).numpy()
        values: np.ndarray = self.scale.mean + self.scale.std * normalised.astype(np.float64)
        return values

    def _targets(self, episode: Episode) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per decision: advantage and return; per decision slot: its first observation and value target.

        Decisions of one slot form one allocation and share the slot's advantage. Slots the environment ran
        without a decision fold their (discounted) rewards into the preceding decision slot. A truncated episode
        is bootstrapped from the value of the state it was cut in.
        """
        config = self.config
        slots, first = np.unique(episode.slot_of, return_index=True)
        if len(slots) == 0:
            empty = np.zeros(0)
            return empty, empty, episode.observations[:0], empty
        rewards = episode.slot_rewards
        bounds = [*slots.tolist(), len(rewards)]
        gaps = np.diff(bounds)
        folded = np.array(
            [sum(config.gamma**m * rewards[bounds[k] + m] for m in range(gaps[k])) for k in range(len(slots))]
        )
        discounts = config.gamma**gaps
        starts = episode.observations[first]
        values = self.values(starts) if config.value_baseline else np.zeros(len(slots))
        tail = 0.0
        if episode.truncated and episode.final_observation is not None and config.value_baseline:
            tail = float(self.values(episode.final_observation[None])[0])
        next_values = np.append(values[1:], tail)
        if config.myopic:  # DL2's code: each decision gets its own slot's reward
            returns_slot = rewards[slots].astype(np.float64)
        else:
            returns_slot = np.zeros(len(slots))
            running = tail
            for k in range(len(slots) - 1, -1, -1):
                running = folded[k] + discounts[k] * running
                returns_slot[k] = running
        if config.myopic or config.gae_lambda >= 1.0:
            advantage_slot = returns_slot - values
            targets = returns_slot
        else:  # GAE over decision slots (Schulman et al. 2016); lambda = 1 is the Monte-Carlo case above
            deltas = folded + discounts * next_values - values
            advantage_slot = np.zeros(len(slots))
            running = 0.0
            for k in range(len(slots) - 1, -1, -1):
                running = deltas[k] + config.gae_lambda * discounts[k] * running
                advantage_slot[k] = running
            targets = advantage_slot + values
        self.scale.update(targets)
        index = np.searchsorted(slots, episode.slot_of)
        return advantage_slot[index], returns_slot[index], starts, targets

    def policy_steps(
        self,
        observations: np.ndarray,
        masks: np.ndarray,
        actions: np.ndarray,
        advantages: np.ndarray,
        centre: bool = True,
    ) -> tuple[float, float]:
        """`centre`: subtract the batch mean from the advantages before scaling them to unit deviation."""
        config = self.config
        obs = torch.from_numpy(observations)
        mask = torch.from_numpy(masks)
        act = torch.from_numpy(actions)
        shifted = advantages - advantages.mean() if centre else advantages
        adv = torch.from_numpy(shifted / (shifted.std() + 1e-8)).float()
        with torch.no_grad():
            old = torch.log_softmax(self.policy.masked_logits(obs, mask), dim=1).gather(1, act[:, None]).squeeze(1)
        losses, entropies = [], []
        for _ in range(config.epochs_per_iteration):
            for index in minibatches(self.rng, len(act), config.minibatch_size):
                log_probs_all = torch.log_softmax(self.policy.masked_logits(obs[index], mask[index]), dim=1)
                log_probs = log_probs_all.gather(1, act[index][:, None]).squeeze(1)
                entropy = -(log_probs_all.exp() * log_probs_all).sum(dim=1).mean()
                if not config.clip:
                    policy_loss = -(log_probs * adv[index]).mean()
                else:  # PPO-style clipping keeps several passes over one batch from overshooting
                    ratio = torch.exp(log_probs - old[index])
                    clipped = torch.clamp(ratio, 1 - config.clip, 1 + config.clip)
                    policy_loss = -torch.min(ratio * adv[index], clipped * adv[index]).mean()
                loss = policy_loss - config.entropy_weight * entropy
                self.policy_optimizer.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                torch.nn.utils.clip_grad_norm_(self.policy.parameters(), 1.0)
                self.policy_optimizer.step()
                losses.append(float(policy_loss.detach()))
                entropies.append(float(entropy.detach()))
        return float(np.mean(losses)), float(np.mean(entropies))

    def value_steps(self, observations: np.ndarray, targets: np.ndarray) -> float:
        obs = torch.from_numpy(observations)
        target = torch.from_numpy((targets - self.scale.mean) / self.scale.std).float()
        losses = []
        for _ in range(self.config.value_epochs):
            for index in minibatches(self.rng, len(target), self.config.minibatch_size):
                value_loss = torch.mean((self.value(obs[index]) - target[index]) ** 2)
                self.value_optimizer.zero_grad()
                value_loss.backward()  # type: ignore[no-untyped-call]
                torch.nn.utils.clip_grad_norm_(self.value.parameters(), 1.0)
                self.value_optimizer.step()
                losses.append(float(value_loss.detach()))
        return float(np.mean(losses)) if losses else 0.0

    # -- the loop ------------------------------------------------------------------------------------------------

    def train(self, pool: RolloutPool, on_iteration: Callable[[IterationStats], None] | None = None) -> TrainingState:
        config = self.config
        history: list[IterationStats] = []
        # the starting policy (e.g. the warm-up) competes too: RL must beat it on validation to replace it
        initial = self.validate(pool) if config.validate else math.nan
        best = (initial, -1, self._snapshot(self.policy), self._snapshot(self.value))
        self.initial_validation_jct_s = initial
        for iteration in range(config.iterations):
            started = time.perf_counter()
            stats = CREDITS[config.credit].iterate(self, pool, iteration)
            last = iteration == config.iterations - 1
            if not config.validate:
                best = (math.nan, iteration, self._snapshot(self.policy), self._snapshot(self.value))
            elif iteration % config.validate_every == config.validate_every - 1 or last:
                stats.validation_jct_s = self.validate(pool)
                if stats.validation_jct_s < best[0]:
                    best = (stats.validation_jct_s, iteration, self._snapshot(self.policy), self._snapshot(self.value))
            stats.seconds = time.perf_counter() - started
            history.append(stats)
            if on_iteration is not None:
                on_iteration(stats)
        return TrainingState(best[2], best[3], best[0], best[1], history)

    def validate(self, pool: RolloutPool) -> float:
        """Mean average JCT (seconds) of the greedy policy on the validation workloads (inf if one is cut short)."""
        results = [e.avg_jct_s for e in pool.run(self.validation_tasks())]
        return float(np.mean(results)) if all(math.isfinite(r) for r in results) else math.inf

    @staticmethod
    def _snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
        return {key: value.detach().clone() for key, value in module.state_dict().items()}


class ReturnsCredit:
    """Credit by returns: sampled episodes, each decision credited with its slot's return against the value network
    (or siblings on the same workload, or the batch mean), plus replay."""

    def iterate(self, trainer: ActorCritic, pool: RolloutPool, iteration: int) -> IterationStats:
        episodes = pool.run(trainer.training_tasks(iteration))
        mean_return, policy_loss, value_loss, entropy = trainer.update(episodes)
        finished = [e.avg_jct_s for e in episodes if math.isfinite(e.avg_jct_s)]
        return IterationStats(
            iteration=iteration,
            train_jct_s=float(np.mean(finished)) if finished else math.nan,
            mean_return=mean_return,
            policy_loss=policy_loss,
            value_loss=value_loss,
            entropy=entropy,
            decisions=sum(e.num_decisions for e in episodes),
            seconds=0.0,
        )


class PerturbationCredit:
    """Exact credit by perturbation: greedy runs with sampled slots changed, each change credited with the JCT it
    made against the greedy continuation (compatibility mode)."""

    def iterate(self, trainer: ActorCritic, pool: RolloutPool, iteration: int) -> IterationStats:
        batches = pool.run_perturbations(trainer.perturbation_tasks())
        policy_loss, entropy = trainer.update_perturbed(batches)
        advantages = np.concatenate([b.advantages for b in batches]) if batches else np.zeros(1)
        return IterationStats(
            iteration=iteration,
            train_jct_s=float(np.mean([b.greedy_avg_jct_s for b in batches])),
            mean_return=float(np.mean(advantages)),
            policy_loss=policy_loss,
            value_loss=0.0,
            entropy=entropy,
            decisions=sum(len(b.actions) for b in batches),
            seconds=0.0,
        )


class DeviationCredit:
    """Exact credit by deviation: at sampled states the alternatives are played out and the policy reweighted by
    their measured advantages (`update_deviations`)."""

    def iterate(self, trainer: ActorCritic, pool: RolloutPool, iteration: int) -> IterationStats:
        deviations = pool.run_deviations(trainer.deviation_tasks())
        policy_loss, entropy = trainer.update_deviations(deviations)
        measured = [b.advantages[:, 1:][b.evaluated[:, 1:]] for b in deviations]
        return IterationStats(
            iteration=iteration,
            train_jct_s=float(np.mean([b.greedy_avg_jct_s for b in deviations])),
            mean_return=float(np.mean(np.concatenate(measured))) if measured else 0.0,
            policy_loss=policy_loss,
            value_loss=0.0,
            entropy=entropy,
            decisions=sum(len(b.actions) for b in deviations),
            seconds=0.0,
        )


CREDITS: dict[str, ReturnsCredit | PerturbationCredit | DeviationCredit] = {
    "returns": ReturnsCredit(),
    "perturbation": PerturbationCredit(),
    "deviation": DeviationCredit(),
}
"""The credit strategies by `RLConfig.credit`."""


def sibling_advantages(episodes: list[Episode], gamma: float) -> np.ndarray:
    """Per decision (episodes concatenated): the discounted return-to-go of its slot minus the mean, over the
    other episodes on the same workload, of their return-to-go at that slot (0 after an episode ended, when
    nothing is left to wait for). An episode without siblings gets 0 (no comparison, no gradient)."""
    returns = [slot_returns(episode.slot_rewards, gamma, myopic=False) for episode in episodes]
    groups: dict[str, list[int]] = {}
    for index, episode in enumerate(episodes):
        groups.setdefault(episode.workload, []).append(index)
    parts = []
    for index, episode in enumerate(episodes):
        siblings = [j for j in groups[episode.workload] if j != index]
        own = returns[index][episode.slot_of]
        if not siblings:
            parts.append(np.zeros(len(own)))
            continue
        baseline = np.zeros(len(own))
        for j in siblings:
            other = returns[j]
            inside = episode.slot_of < len(other)
            baseline[inside] += other[episode.slot_of[inside]]
        parts.append(own - baseline / len(siblings))
    return np.concatenate(parts) if parts else np.zeros(0)


def learn_from_feedback(trainer: ActorCritic, batch: object, steps: int = 1) -> tuple[float, float, float]:
    """Advantage-weighted steps on logged decisions (`dl2.rl.feedback.FeedbackBatch`): the value network
    learns the logged returns, and the logged actions are made likelier where they did better than it expected
    (the logged behaviour's probabilities are unknown). Returns policy loss, value loss, entropy of the last
    step."""
    from dl2.rl.feedback import FeedbackBatch

    assert isinstance(batch, FeedbackBatch)
    if len(batch) == 0:
        return 0.0, 0.0, 0.0
    trainer.scale.update(batch.returns.astype(np.float64))
    policy_loss = value_loss = entropy = 0.0
    for _ in range(steps):
        starts = batch.observations[batch.slot_starts]
        value_loss = trainer.value_steps(starts, batch.returns[batch.slot_starts].astype(np.float64))
        advantages = batch.returns.astype(np.float64) - trainer.values(batch.observations)
        # the clip (if any) acts as a trust region around the current policy, which suits logged data too
        policy_loss, entropy = trainer.policy_steps(
            batch.observations, batch.masks, batch.actions, advantages.astype(np.float32)
        )
    if trainer.replay is not None:
        trainer.replay.add(batch.observations, batch.masks, batch.actions, batch.returns)
    return policy_loss, value_loss, entropy
