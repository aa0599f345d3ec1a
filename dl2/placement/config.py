"""Harmony's configurations, torch-free: the speed model's shape, its logged data and training, the placer's shape
and its training.

Each is defined once here (`dl2.config`: default, docstring and checks per field); `dl2 train-speed-model` and
`dl2 train-placer` make their flags from the flat views `SPEED_KEYS` and `PLACER_KEYS`, so a value meets the
same default and check from the command line as from the library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Annotated, Any

from annotated_types import Ge, Gt, Le, MinLen

from dl2.config import Keys, Probability, Seed, Width, config, refuse
from dl2.core import InputError
from dl2.placement.features import JOB_FEATURES, NUM_TYPES, SERVER_FEATURES
from dl2.schedulers.registry import PLACERS, check_scheduler

SPEED_FORMAT = "dl2-speed-model/1"
PLACER_FORMAT = "dl2-placer/1"
SERVER_INPUTS = 6 + NUM_TYPES + 2
"""Placer input per candidate server: own workers and PS there (shares), the other jobs there by type, their
count, none, free GPU, CPU and memory fractions, and the flag of the 'leave unplaced' row."""
JOB_INPUTS = NUM_TYPES + 8
"""Placer input of the job: type, architecture, role, targets, shares already held, servers used, neighbours."""
LOGGED_PLACERS = (*PLACERS, "mixed")
"""Placers whose runs the speed model's logs may come from ('mixed': `dl2.placement.mixing.MixedPlacer`)."""
Widths = Annotated[tuple[Width, ...], MinLen(1)]


@config
class SpeedModelConfig:
    """Shape of the speed-prediction network and the scale of its target."""

    encoder: Widths = (64, 64)
    """Hidden widths of the per-server encoder (ReLU)."""
    head: Widths = (128, 64)
    """Hidden widths of the head (ReLU); its output is one number."""
    target_mean: float = 0.0
    """Mean of log throughput over the training samples (the network predicts standardised values)."""
    target_std: Annotated[float, Gt(0)] = 1.0
    """Their standard deviation."""

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "format": SPEED_FORMAT,
            "encoder": list(self.encoder),
            "head": list(self.head),
            "target_mean": self.target_mean,
            "target_std": self.target_std,
            "job_features": JOB_FEATURES,
            "server_features": SERVER_FEATURES,
        }

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any], where: str) -> SpeedModelConfig:
        if data.get("format") != SPEED_FORMAT:
            raise InputError(where, f"not a speed model (format {data.get('format')!r}, expected {SPEED_FORMAT!r})")
        if data.get("job_features") != JOB_FEATURES or data.get("server_features") != SERVER_FEATURES:
            raise InputError(where, "the model was trained on another feature encoding")
        try:
            return cls(
                tuple(int(w) for w in data["encoder"]),
                tuple(int(w) for w in data["head"]),
                float(data["target_mean"]),
                float(data["target_std"]),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise InputError(where, f"malformed speed-model configuration ({error})") from None


@config
class SpeedData:
    """The realistic-mode runs whose logs the speed model learns from, and those it is measured on."""

    sources: Annotated[tuple[str, ...], MinLen(1)] = ("synthetic-philly@1500",)
    """Workload sources (`dl2.workload.source`)."""
    seeds: Annotated[tuple[Seed, ...], MinLen(1)] = (100, 101, 102, 103)
    """Training workload seeds."""
    held_out_seeds: Annotated[tuple[Seed, ...], MinLen(1)] = (200, 201)
    """Held-out workload seeds (never trained on)."""
    schedulers: Annotated[tuple[str, ...], MinLen(1)] = ("drf", "optimus-fitted", "optimus", "tiresias")
    """Allocation policies of the logged runs."""
    placers: Annotated[tuple[str, ...], MinLen(1)] = ("load-balance", "binpack", "tetris", "mixed")
    """Placers of the logged runs ('mixed': a seeded random mix of the heuristics)."""
    every: Annotated[int, Ge(1), Le(10_000)] = 2
    """Sample every n-th slot of a run (consecutive slots are near copies)."""

    def __post_init__(self) -> None:
        if set(self.seeds) & set(self.held_out_seeds):
            raise refuse("held_out_seeds", self.held_out_seeds, "seeds that are not training seeds")
        for name in self.schedulers:
            check_scheduler("schedulers", name, "realistic")
        for name in self.placers:
            if name not in LOGGED_PLACERS:
                raise refuse("placers", name, f"placers: {', '.join(LOGGED_PLACERS)}")


@config
class PredictorTraining:
    """Supervised training of the speed model."""

    epochs: Annotated[int, Ge(1), Le(10_000)] = 12
    """Passes over the training samples."""
    batch_size: Annotated[int, Ge(1), Le(1_000_000)] = 512
    """Jobs per minibatch."""
    learning_rate: Annotated[float, Gt(0), Le(1)] = 2e-3
    """Adam's; decayed by cosine to a tenth over the epochs."""
    weight_decay: Annotated[float, Ge(0), Le(1)] = 1e-5
    """Adam's weight decay."""
    seed: Seed = 0
    """Seeds weight initialisation and minibatch order."""
    network: SpeedModelConfig = field(default_factory=SpeedModelConfig)
    """Widths (its target scale is set from the training samples)."""


@config
class SpeedModelRun:
    """What `dl2 train-speed-model` does: log the data, then train."""

    data: SpeedData = field(default_factory=SpeedData)
    """The logged runs."""
    training: PredictorTraining = field(default_factory=PredictorTraining)
    """The supervised training."""


@config
class PlacerConfig:
    """Shape of the placement policy."""

    hidden: Widths = (64, 32)
    """Hidden widths of the per-server scorer (ReLU)."""
    skip: bool = False
    """Whether the policy may leave a job's remaining tasks of a role unplaced (`dl2.placement.policy`). Off by
    default: the allocation policy's counts are then held exactly (Harmony places what the allocation decides)."""

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "format": PLACER_FORMAT,
            "hidden": list(self.hidden),
            "skip": self.skip,
            "server_inputs": SERVER_INPUTS,
            "job_inputs": JOB_INPUTS,
        }

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any], where: str) -> PlacerConfig:
        if data.get("format") != PLACER_FORMAT:
            raise InputError(where, f"not a placer (format {data.get('format')!r}, expected {PLACER_FORMAT!r})")
        if data.get("server_inputs") != SERVER_INPUTS or data.get("job_inputs") != JOB_INPUTS:
            raise InputError(where, "the placer was trained on another input encoding")
        try:
            return cls(tuple(int(w) for w in data["hidden"]), bool(data["skip"]))
        except (KeyError, TypeError, ValueError) as error:
            raise InputError(where, f"malformed placer configuration ({error})") from None


@config
class PlacerTraining:
    """Hyper-parameters of the placer's training (`dl2.placement.training`)."""

    iterations: Annotated[int, Ge(1), Le(1_000_000)] = 60
    """RL episodes (one workload each), after the imitation ones (`imitation_iterations`)."""
    source: str = "synthetic-philly@1500"
    """Training and validation workloads (`dl2.workload.source`)."""
    train_seed_offset: Seed = 20_000
    """Training workload of iteration i: seed offset + i."""
    validation_seeds: Annotated[tuple[Seed, ...], MinLen(1)] = (21_000, 21_001)
    """Validation workloads (never the test workloads)."""
    schedulers: Annotated[tuple[str, ...], MinLen(1)] = ("drf", "optimus-fitted")
    """Allocation policies the placer learns under, in turn."""
    validate_every: Annotated[int, Ge(1), Le(1_000_000)] = 4
    """Iterations between validations (and after the last)."""
    epsilon_start: Probability = 0.3
    """Chance that a job's placement follows a heuristic, at the start (linear annealing)."""
    epsilon_end: Probability = 0.02
    """... and at the end."""
    explorers: Annotated[tuple[str, ...], MinLen(1)] = ("load-balance", "binpack")
    """Heuristic placers (`dl2.schedulers.registry.PLACERS`) that exploration follows, one drawn per job."""
    imitate: str = ""
    """A heuristic placer whose decisions the policy first learns to copy, supervised (as DL2's warm-up copies a
    scheduler); empty: no warm-up. The RL iterations then start from the copy."""
    imitation_iterations: Annotated[int, Ge(0), Le(1_000_000)] = 0
    """Episodes of that warm-up (each followed by gradient steps, like an RL iteration), before the RL ones."""
    dagger: bool = False
    """From the warm-up's second episode on, the policy places every job and the heuristic labels each of its
    decisions (DAgger, Ross et al. 2011, as DL2's warm-up rounds): the copy learns the heuristic's choice in the
    states its own mistakes lead to, which the heuristic's own episodes never show it (a full cluster left
    fragmented, say). Those episodes train the actor only: their rewards belong to the policy's choices."""
    learning_rate: Annotated[float, Gt(0), Le(1)] = 3e-3
    """Adam's, for the actor."""
    critic_learning_rate: Annotated[float, Gt(0), Le(1)] = 1e-3
    """Adam's, for the critic."""
    temperature: Annotated[float, Gt(0), Le(1_000)] = 0.005
    """alpha: the entropy bonus, in units of reward (a placement's reward is of order one)."""
    minibatch_size: Annotated[int, Ge(1), Le(1_000_000)] = 1024
    """Fresh decisions per gradient step."""
    updates_per_iteration: Annotated[int, Ge(1), Le(1_000_000)] = 60
    """Gradient steps after each episode."""
    replay: bool = True
    """Experience replay (ablation: off)."""
    replay_capacity: Annotated[int, Ge(1), Le(100_000_000)] = 100_000
    """Decisions kept for replay."""
    replay_ratio: Annotated[float, Ge(0), Le(100)] = 1.0
    """Replayed decisions per fresh decision in each minibatch."""
    network: PlacerConfig = field(default_factory=PlacerConfig)
    """The policy's shape."""
    seed: Seed = 0
    """Seeds the networks, exploration and sampling."""

    def __post_init__(self) -> None:
        for name in self.schedulers:
            check_scheduler("schedulers", name, "realistic")
        for name in self.explorers:
            if name not in PLACERS:
                raise refuse("explorers", name, f"placers: {', '.join(PLACERS)}")
        if self.imitation_iterations and self.imitate not in PLACERS:
            raise refuse("imitate", self.imitate, f"placers: {', '.join(PLACERS)} (imitation_iterations > 0)")


SPEED_KEYS = Keys(
    SpeedModelRun,
    {
        "source": "data.sources",
        "seeds": "data.seeds",
        "held_out_seeds": "data.held_out_seeds",
        "schedulers": "data.schedulers",
        "placers": "data.placers",
        "every": "data.every",
        "epochs": "training.epochs",
        "batch_size": "training.batch_size",
        "learning_rate": "training.learning_rate",
        "encoder": "training.network.encoder",
        "head": "training.network.head",
        "seed": "training.seed",
    },
)
"""`dl2 train-speed-model`'s settings."""

PLACER_KEYS = Keys(
    PlacerTraining,
    {
        "source": "source",
        "schedulers": "schedulers",
        "iterations": "iterations",
        "validation_seeds": "validation_seeds",
        "validate_every": "validate_every",
        "skip": "network.skip",
        "hidden": "network.hidden",
        "epsilon": "epsilon_start",
        "explorers": "explorers",
        "imitate": "imitate",
        "imitation_iterations": "imitation_iterations",
        "dagger": "dagger",
        "updates_per_iteration": "updates_per_iteration",
        "replay": "replay",
        "learning_rate": "learning_rate",
        "temperature": "temperature",
        "seed": "seed",
    },
)
"""`dl2 train-placer`'s settings."""
