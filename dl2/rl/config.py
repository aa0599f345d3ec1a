"""The DL2 policy's configurations, torch-free: network shape, supervised warm-up, RL, exploration and replay.

Each is defined once here (`dl2.config`: default, docstring and checks per field), and `dl2 train-sl`/`train-rl`
flags, params.yaml's `warmup` and `finetune` sections and the library read the same definitions through the flat
views `WARMUP_KEYS` and `RL_KEYS` (with `dl2.env.config.ENV_KEYS` for the environment's settings).
"""

from __future__ import annotations

from dataclasses import field
from typing import Annotated, Literal

from annotated_types import Ge, Gt, Le, Lt, MinLen

from dl2.config import ConfigError, Count, Keys, Positive, Probability, Seed, Width, config, refuse
from dl2.env.observation import ObservationConfig
from dl2.schedulers.registry import check_placer, check_scheduler
from dl2.workload.source import source_problem

MASKED_LOGIT = -1e9
"""Logit of an impossible action (masked out of the softmax)."""
KINDS = ("per-job", "per-job-local", "mlp")
NetworkKind = Literal["per-job", "per-job-local", "mlp"]
Credit = Literal["returns", "perturbation", "deviation"]


@config
class NetworkConfig:
    """Shape of the policy and value networks."""

    hidden: Annotated[tuple[Width, ...], MinLen(1)] = (64, 64)
    """Widths of the hidden layers (ReLU); DL2's code used 2 x 160 (or 1 x 120 in its experiments)."""
    kind: NetworkKind = "per-job"
    """'per-job' (shared per-job scorer), 'per-job-local' (its encoder sees only the job; fastest inference) or
    'mlp' (DL2's flat network)."""


@config
class SupervisedConfig:
    """Warm-up hyper-parameters."""

    epochs: Annotated[int, Ge(1), Le(10_000)] = 10
    """Passes over the demonstrations."""
    batch_size: Annotated[int, Ge(1), Le(1_000_000)] = 256
    """Mini-batch size (DL2: 256)."""
    learning_rate: Annotated[float, Gt(0), Le(1)] = 1e-3
    """Adam step size (DL2's code: 5e-3)."""
    network: NetworkConfig = field(default_factory=NetworkConfig)
    """Policy network shape."""
    seed: Seed = 0
    """Seeds weight initialisation and mini-batch order."""
    label_smoothing: Annotated[float, Ge(0), Lt(1)] = 0.0
    """Share of each target spread over the state's possible actions; 0.1 keeps the actions a teacher never
    takes within reach of the RL that follows (plain cross-entropy drives them hundreds of logits below its
    choice)."""


@config
class WarmUpConfig:
    """What the supervised warm-up (DL2 §4.2) imitates, on which workloads."""

    teacher: str = "optimus"
    """A heuristic scheduler of the mode (drf, fifo, srtf, optimus, optimus-fitted, tiresias, srpt-knee-fill,
    speedup-hull-marginal, ...), `rollout:<heuristic>` (rollout policy improvement over its variants),
    `rollout:<heuristic>+<another>...` (over those heuristics; `dl2.rl.rollout_teacher`), or, in realistic mode,
    a search over candidates, `lookahead:A+B...` or `lookahead-fitted:A+B...` (`dl2.rl.lookahead`; a model folder
    among them makes the warm-up expert iteration: the network learns the decisions of the search it is part of)."""
    source: str = "authors-small"
    """Workload source of the demonstrations (`dl2.workload.source`)."""
    mode: Literal["compat", "realistic"] = "compat"
    """Simulator mode."""
    episodes: Count = 12
    """Workloads the teacher is recorded on (0: DAgger rounds only, continuing a given model)."""
    seed_offset: Seed = 100
    """Their seeds are seed_offset, seed_offset + 1, ..."""
    held_out_seed: Seed = 999
    """Workload whose demonstrations measure imitation accuracy (never trained on)."""
    record_every: Annotated[int, Ge(1), Le(10_000)] = 2
    """Record every n-th slot (consecutive slots look alike)."""
    dagger_rounds: Count = 2
    """Rounds of DAgger after imitating the teacher's own runs: the student drives on fresh workloads, the
    teacher labels what it sees, and training continues on all data so far (0: plain behaviour cloning)."""
    dagger_episodes: Count = 4
    """Workloads per DAgger round."""
    dagger_max_slots: Positive = 3_000
    """A DAgger workload is cut after this many slots (a poor student can take far longer than its teacher)."""
    observation: ObservationConfig = field(default_factory=lambda: ObservationConfig(window=40))
    """What the policy sees (its window J)."""
    placer: str = "load-balance"
    """Realistic-mode placer of the policy's decisions."""
    supervised: SupervisedConfig = field(default_factory=SupervisedConfig)
    """The supervised training itself."""
    workers: Annotated[int, Ge(1), Le(1024)] = 2
    """Processes recording workloads in parallel, then threads training on them (the recordings do not depend
    on it)."""

    def __post_init__(self) -> None:
        if is_search_teacher(self.teacher):
            check_search_teacher(self.teacher, self.mode)
        else:
            check_scheduler("teacher", self.teacher, self.mode, rollout=True)
        check_source("source", self.source)
        check_placer("placer", self.placer)
        if self.observation.packed and self.mode != "compat":
            raise refuse("observation.packed", True, "packed requests are a compat-mode option")


@config
class ExplorationConfig:
    """Job-aware exploration schedule (DL2 §4.3)."""

    enabled: bool = True
    """Job-aware exploration (ablation: off)."""
    epsilon_start: Probability = 0.1
    """Probability of an exploratory action at the start of training."""
    epsilon_end: Probability = 0.0
    """... and at the end (linear annealing over the iterations)."""
    stop_probability: Probability = 0.05
    """Chance that an exploratory action is stop."""

    def epsilon(self, progress: float) -> float:
        if not self.enabled:
            return 0.0
        return self.epsilon_start + (self.epsilon_end - self.epsilon_start) * min(max(progress, 0.0), 1.0)


@config
class ReplayConfig:
    enabled: bool = True
    """Experience replay (ablation: off)."""
    capacity: Positive = 200_000
    """Decisions kept (the oldest are dropped first)."""
    ratio: Annotated[float, Ge(0), Le(100)] = 0.5
    """Replayed decisions per fresh decision in each update."""


@config
class RLConfig:
    """Online RL hyper-parameters (DL2 §4.3)."""

    iterations: Annotated[int, Ge(0), Le(1_000_000)] = 100
    """Learner iterations."""
    episodes_per_iteration: Positive = 4
    """Episodes collected per iteration (spread over the workers)."""
    train_source: str = "authors-small"
    """Where training workloads come from (`dl2.workload.source`)."""
    train_seed_offset: Seed = 10_000
    """Training workload seeds are offset + episode number (validation and test use other seeds)."""
    validation_source: str | None = None
    """Validation workloads' source (none: the training source)."""
    validation_seeds: Annotated[tuple[Seed, ...], MinLen(1)] = (5_000, 5_001, 5_002, 5_003)
    """Validation workloads (checkpoint selection); never the test workloads."""
    validate: bool = True
    """Validate on the validation workloads and keep the best checkpoint (the starting policy competes); off:
    nothing is validated and the policy after the last iteration is the result (ablations)."""
    validate_every: Positive = 5
    """Iterations between validations."""
    validation_max_slots: Positive = 20_000
    """Validation episodes are cut here (a policy that never finishes a workload scores inf), never earlier than
    the training episodes."""
    learning_rate: Annotated[float, Gt(0), Le(1)] = 3e-4
    """Policy step size (Adam)."""
    value_learning_rate: Annotated[float, Gt(0), Le(1)] = 1e-3
    """Value network step size (Adam)."""
    entropy_weight: Annotated[float, Ge(0), Le(100)] = 0.01
    """Entropy bonus weight."""
    gamma: Probability = 0.99
    """Discount per slot."""
    gae_lambda: Probability = 0.95
    """GAE lambda over decision slots (1: Monte-Carlo returns, REINFORCE with the value baseline)."""
    value_epochs: Positive = 4
    """Passes of value regression over each iteration's slot-start states."""
    value_warmup_iterations: Count = 2
    """Iterations in which only the value network learns (its first estimates would make noise advantages)."""
    myopic: bool = False
    """Each slot's own reward as the return (DL2's code) instead of the discounted sum."""
    value_baseline: bool = True
    """The value network as the baseline (ablation: off, then the batch mean)."""
    group_size: Positive = 1
    """Episodes played on each training workload per iteration (different sampling seeds)."""
    sibling_baseline: bool = False
    """With `group_size` > 1: a decision's advantage is its slot's return-to-go minus the mean return-to-go at
    the same slot of the other episodes on the same workload (leave-one-out, as RLOO and GRPO do across
    samples). Workload difficulty, the largest source of variance in returns, then cancels out; the value
    network still learns (replay and truncated episodes use it)."""
    exploration: ExplorationConfig = field(default_factory=ExplorationConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    minibatch_size: Positive = 1024
    """Decisions per gradient step."""
    epochs_per_iteration: Annotated[int, Ge(1), Le(1_000)] = 2
    """Passes over each iteration's data."""
    max_samples_per_iteration: Positive = 40_000
    """Fresh decisions used per iteration (a random subset when episodes hold more)."""
    clip: Annotated[float, Ge(0), Le(10)] = 0.2
    """PPO-style ratio clip of the policy update (0: plain REINFORCE)."""
    network: NetworkConfig = field(default_factory=NetworkConfig)
    """Network shape of a policy trained from scratch (a policy it continues keeps its own)."""
    seed: Seed = 0
    credit: Credit = "returns"
    """Where a decision's advantage comes from: 'returns' (DL2 §4.3: its slot's discounted return against the
    baseline), or in compatibility mode 'perturbation' (one slot sampled, the rest greedy, the exact difference
    in total JCT; `dl2.rl.perturbation`) or 'deviation' (one decision replaced by each of a few other actions,
    the run finished by a continuation policy; `dl2.rl.deviation`). With either of the last two every iteration
    plays `episodes_per_iteration` training workloads greedily; the value network, replay and job-aware
    exploration are not used."""
    perturbation_probability: Annotated[float, Gt(0), Le(1)] = 0.05
    """'perturbation' and 'deviation': chance that a slot with a decision is sampled."""
    alternatives: Annotated[int, Ge(1), Le(10_000)] = 6
    """'deviation': other actions tried in place of each deviated decision."""
    continuation: str = "policy"
    """'deviation': who finishes each compared run, 'policy' (exact policy iteration) or a compat heuristic's
    name (e.g. 'drf': its cost-to-go, AggreVaTe, about 20x cheaper)."""
    temperature: Annotated[float, Gt(0), Le(1_000)] = 1.0
    """'deviation': the advantages' scale in the reweighting, in units of their deviation (smaller: bolder)."""
    kl_weight: Annotated[float, Ge(0), Le(1_000)] = 1.0
    """'deviation': weight of KL(old policy || new policy) on the deviated states (the trust region)."""

    def __post_init__(self) -> None:
        if self.sibling_baseline and self.group_size < 2:
            raise refuse("sibling_baseline", True, "needs group_size of at least 2: episodes to compare")
        if self.episodes_per_iteration % self.group_size:
            raise refuse(
                "episodes_per_iteration",
                self.episodes_per_iteration,
                f"a multiple of group_size, {self.group_size}",
            )
        if self.continuation != "policy":
            check_scheduler("continuation", self.continuation, "compat", extra=("policy",))
        check_source("train_source", self.train_source)
        if self.validation_source is not None:
            check_source("validation_source", self.validation_source)

    @property
    def validation(self) -> str:
        """The validation workloads' source."""
        return self.validation_source or self.train_source


SEARCH_TEACHERS = ("lookahead:", "lookahead-fitted:")
"""Prefixes of a teacher that searches over candidates (`dl2.resolve`)."""


def is_search_teacher(teacher: str) -> bool:
    return teacher.startswith(SEARCH_TEACHERS)


def check_search_teacher(teacher: str, mode: str) -> None:
    """Refuse (ConfigError naming `teacher`) a search that cannot be built: compat mode (a search simulates the
    cluster's interference), fewer than two candidates, a base that is no heuristic, a candidate that is neither a
    heuristic nor a folder (a model folder is loaded, and checked, when the teacher is made)."""
    from pathlib import Path

    from dl2.rl.fitted_lookahead import fitted_candidate_names
    from dl2.schedulers.registry import SCHEDULERS

    if mode != "realistic":
        raise refuse("teacher", teacher, "a search teacher plays realistic mode")
    candidates = fitted_candidate_names(teacher)
    if len(candidates) < 2 or candidates[0] not in SCHEDULERS:
        raise refuse("teacher", teacher, "a search over two or more candidates, the first a heuristic: lookahead:A+B")
    unknown = [name for name in candidates if name not in SCHEDULERS and not Path(name).is_dir()]
    if unknown:
        raise refuse("teacher", teacher, f"{unknown[0]!r} is neither a heuristic nor a model folder")


def check_source(key: str, source: str) -> None:
    """Refuse (ConfigError naming `key`) a workload source that names nothing (`dl2.workload.source`)."""
    problem = source_problem(source)
    if problem is not None:
        raise refuse(key, source, problem)


def check_training(mode: str, rl: RLConfig, key: str = "credit") -> None:
    """Rules across the environment and RL: exact credits need the deterministic compatibility mode."""
    if rl.credit != "returns" and mode != "compat":
        raise ConfigError(f"{key}: {rl.credit!r} is not allowed (exact credit needs mode compat, got {mode})")


WARMUP_KEYS = Keys(
    WarmUpConfig,
    {
        "teacher": "teacher",
        "source": "source",
        "mode": "mode",
        "episodes": "episodes",
        "record_every": "record_every",
        "dagger_rounds": "dagger_rounds",
        "dagger_episodes": "dagger_episodes",
        "dagger_max_slots": "dagger_max_slots",
        "window": "observation.window",
        "packed": "observation.packed",
        "placer": "placer",
        "workers": "workers",
        "epochs": "supervised.epochs",
        "batch_size": "supervised.batch_size",
        "learning_rate": "supervised.learning_rate",
        "label_smoothing": "supervised.label_smoothing",
        "seed": "supervised.seed",
        "hidden": "supervised.network.hidden",
        "network": "supervised.network.kind",
    },
)
"""The warm-up's settings: `dl2 train-sl` flags and params.yaml's `warmup` section (less source and mode, which
the `workloads` section sets)."""

RL_KEYS = Keys(
    RLConfig,
    {
        "iterations": "iterations",
        "episodes_per_iteration": "episodes_per_iteration",
        "source": "train_source",
        "validation_source": "validation_source",
        "validation_seeds": "validation_seeds",
        "validate": "validate",
        "validate_every": "validate_every",
        "validation_max_slots": "validation_max_slots",
        "learning_rate": "learning_rate",
        "entropy_weight": "entropy_weight",
        "gamma": "gamma",
        "myopic": "myopic",
        "value_baseline": "value_baseline",
        "value_warmup": "value_warmup_iterations",
        "group_size": "group_size",
        "sibling_baseline": "sibling_baseline",
        "exploration": "exploration.enabled",
        "epsilon": "exploration.epsilon_start",
        "replay": "replay.enabled",
        "clip": "clip",
        "epochs": "epochs_per_iteration",
        "minibatch_size": "minibatch_size",
        "seed": "seed",
        "credit": "credit",
        "perturbation_probability": "perturbation_probability",
        "alternatives": "alternatives",
        "continuation": "continuation",
        "temperature": "temperature",
        "kl_weight": "kl_weight",
        "hidden": "network.hidden",
        "network": "network.kind",
    },
)
"""RL's settings: `dl2 train-rl` flags and params.yaml's `finetune` section (less the workload and network keys,
which the `workloads` section and the warm-up set)."""


@config
class TwinLearningConfig:
    """How a challenger learns in a cluster's calibrated twin, and how the twin judges it."""

    workloads: Annotated[int, Ge(1), Le(1_000)] = 4
    """The twin's workloads (the cluster's jobs, resampled) every policy is run on: the teachers' trial and the
    first batch of the paired comparison of the challenger with the running policy."""
    max_workloads: Annotated[int, Ge(1), Le(1_000)] = 4
    """The most workloads the paired comparison runs (`dl2.rl.in_twin.sequential_difference`): while its interval
    straddles zero with the challenger ahead, another batch of `workloads`. At `workloads` or below (the default)
    the comparison has a fixed size: more workloads made the twin's verdicts less favourable to challengers that
    the truth then found faster (docs/results.md, "A sequential gate")."""
    episodes: Count = 6
    """Workloads the teacher is recorded on."""
    dagger_rounds: Count = 1
    """DAgger rounds after imitating the teacher's runs."""
    epochs: Annotated[int, Ge(1), Le(1_000)] = 6
    """Supervised epochs per training."""
    seed: Seed = 1_000
    """The first of the twin's workloads compared on (the teacher records from `seed_offset` on, elsewhere)."""
    lookahead: tuple[str, ...] = ()
    """Heuristics the challenger looks ahead with (`PolicyConfig.lookahead`, `dl2.rl.lookahead`), e.g.
    (optimus, speedup-hull); the twin judges it as it will run, inside them. Empty: as the running policy does."""
    lookahead_horizon_slots: Annotated[int, Ge(0), Le(1_000)] = 0
    """Its what-if runs' horizon (`PolicyConfig.lookahead_horizon_slots`): slots the base decides every one of
    before deciding ever less often; 0: every slot to the end."""
    lookahead_fit: bool = False
    """Whether the challenger's lookahead looks ahead in a world corrected per job from each job's progress
    (`PolicyConfig.lookahead_fit`); with no `lookahead` named, as the running policy does."""
    rollout: bool = False
    """Teach with the rollout teacher over the speed-reading heuristics (`rollout:<best>+<others>`,
    `dl2.rl.rollout_teacher`; the best pair's heuristic its base, its placement the placement) instead of the best
    heuristic alone. The teacher is better than either heuristic in the twin (per slot it acts as the one whose
    continuation ends sooner), but its students are not: they imitate it less well (held-out accuracy 0.71 against
    0.92) and played no better on the loop benchmark's weeks (docs/results.md, "Rollout teachers and lookahead")."""
    placers: tuple[str, ...] = ("load-balance", "tetris", "binpack", "isolate", "isolate-strict")
    """Placements tried in the twin with each teacher, beside the running policy's own (`PLACERS` names): the
    challenger learns from the best teacher-and-placement pair there and places as it does (the cluster places
    alike). Placement, not allocation, is most of what a cluster's interference makes worth changing
    (docs/results.md, "Placement against allocation")."""

    def __post_init__(self) -> None:
        for name in self.placers:
            check_placer("placers", name)
        for name in self.lookahead:
            check_scheduler("lookahead", name, "realistic")
