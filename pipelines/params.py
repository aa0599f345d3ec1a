"""`params.yaml` as frozen dataclasses: one section per stage, a docstring under every field.

DVC reads the same file (each stage declares the sections it uses, so `dvc exp run -S warmup.epochs=3` reruns
exactly what depends on it). `profile: smoke` (or `--smoke`) merges the `smoke:` section over the others so the
whole pipeline runs in about a minute. Unknown keys inside a known section are an error (a typo in
`-S warmup.epoch=3` must not be silently ignored); unknown top-level sections are kept in `Params.extra` for
stages that live elsewhere.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dl2.core import Dl2Error
from pipelines.tracking import ROOT

DEFAULT_PATH = ROOT / "params.yaml"
ABLATION_VARIANTS = ("full", "no-exploration", "no-replay", "no-value-baseline")
"""RL components that `ablate` can switch off (DL2 §6.5), `full` being none."""
CREDITS = ("returns", "perturbation", "deviation")
"""RL credits of `finetune.credit` (`dl2.rl.actor_critic.RLConfig.credit`)."""


class ParamsError(Dl2Error):
    """params.yaml (or an override) that does not fit the schema; reported as one line."""


@dataclass(frozen=True, slots=True)
class DataParams:
    traces: tuple[str, ...] = ("philly", "alibaba_gpu2023")
    """Folders under data/traces that are ingested, validated and versioned."""
    feedback: str = "data/feedback"
    """Folder of decision logs (one sub-folder of segments or one .jsonl file per cluster), relative to the
    repository; fine-tuning learns from every log in it (the simulated cluster's and the collected ones). It may
    be empty."""
    incoming: str = "work/decisions"
    """Live decision logs that controllers append to (not versioned); `pipelines.collect` moves what they gain
    into `data/feedback/clusters`, validated."""


@dataclass(frozen=True, slots=True)
class ValidateParams:
    max_gpus: int = 512
    """Largest plausible GPU count of one job (the shipped traces reach 32)."""
    max_duration_s: float = 5_184_000.0
    """Longest plausible run time of one job, 60 days (the shipped traces reach about 30)."""
    job_types: tuple[str, ...] = ("unknown", "LS", "BE", "Burstable", "Guaranteed")
    """Known job classes besides the catalogue's model names (which are always allowed)."""
    statuses: tuple[str, ...] = ("unknown", "succeeded", "failed", "running", "killed")
    """Known final job statuses."""
    max_progress_ratio: float = 2.0
    """Decision logs: epochs done over declared epochs at most this (declared epochs may err, DL2 §6.4)."""
    sample_rows: int = 5
    """Rows shown per failed expectation in the report."""


@dataclass(frozen=True, slots=True)
class WorkloadsParams:
    mode: str = "compat"
    """Simulator mode the policy is trained for: 'compat' (the authors' setting) or 'realistic'."""
    train_source: str = "authors-small"
    """Workload source of warm-up, RL and simulated feedback (`dl2.rl.workload_source`); validation uses it too."""
    validation_seeds: tuple[int, ...] = (5000, 5001)
    """Workloads of `train_source` that select checkpoints; disjoint from every training seed."""
    test: str = "dl2-official-small"
    """Held-out workloads (a workload name or a source), never trained or selected on."""
    test_seeds: tuple[int, ...] = (0,)
    """Seeds of the test workloads (a source: one workload per seed; a name: the simulation seeds)."""


@dataclass(frozen=True, slots=True)
class WarmupParams:
    teacher: str = "srpt-knee"
    """Heuristic the policy imitates first (DL2 §4.2)."""
    episodes: int = 6
    """Workloads the teacher is recorded on."""
    dagger_rounds: int = 1
    """DAgger rounds after behaviour cloning."""
    dagger_episodes: int = 2
    """Workloads per DAgger round."""
    epochs: int = 6
    """Passes over the demonstrations per round."""
    window: int = 40
    """J: jobs the policy sees at once."""
    hidden: tuple[int, ...] = (64, 64)
    """Hidden layer widths."""
    network: str = "per-job"
    """'per-job', 'per-job-local' (the shipped compat models' network) or 'mlp' (DL2's flat network)."""
    learning_rate: float = 1e-3
    """Adam step size of the supervised training."""
    label_smoothing: float = 0.0
    """Share of each target spread over the other possible actions, in [0, 1); 0.1 keeps the actions the teacher
    never takes within reach of RL's exploration (`models/dl2-compat-drf`)."""
    packed: bool = False
    """Compat mode only: the policy decides counts against total capacity and the slot's requests are asked in
    an order the authors' placement packs (`models/dl2-compat-hull`)."""
    record_every: int = 2
    """The teacher's decisions are recorded every this many slots of each demonstration."""
    workers: int = 2
    """Processes recording demonstrations in parallel (the recordings do not depend on it)."""
    seed: int = 0
    """Seeds weights and mini-batch order."""


@dataclass(frozen=True, slots=True)
class FeedbackParams:
    episodes: int = 2
    """Workloads of the training source on which a simulated cluster logs its decisions."""
    seed_offset: int = 20_000
    """Their seeds start here (disjoint from warm-up, RL, validation and test seeds)."""
    incumbent: str = "drf"
    """The heuristic the simulated cluster runs (and applies in shadow mode)."""
    log_mode: str = "shadow"
    """'shadow' (the incumbent's decisions are applied), 'canary' or 'active' (the warm-up policy's are)."""


@dataclass(frozen=True, slots=True)
class FinetuneParams:
    iterations: int = 12
    """Learner iterations of online RL in the simulator."""
    episodes_per_iteration: int = 4
    """Episodes per iteration, spread over the workers."""
    workers: int = 2
    """Rollout processes (0: in the learner's process)."""
    reward: str = "jct"
    """'jct' (minus jobs in the system) or 'progress' (DL2's reward)."""
    validate_every: int = 4
    """Iterations between validations (checkpoint selection)."""
    feedback_steps: int = 2
    """Advantage-weighted steps on the logged feedback per run."""
    learning_rate: float = 3e-4
    """Policy step size (as `dl2 train-rl`)."""
    entropy_weight: float = 0.01
    """Entropy bonus weight."""
    gamma: float = 0.99
    """Discount per slot."""
    clip: float = 0.2
    """PPO-style ratio clip (0: plain REINFORCE)."""
    epochs: int = 2
    """Passes over each iteration's decisions."""
    seed: int = 0
    """Seeds the learner and the exploration."""
    init: str = ""
    """Model folder to start from; empty: the warm-up (`--init` overrides, e.g. with the champion)."""
    credit: str = "returns"
    """Where a decision's advantage comes from (as `dl2 train-rl --credit`): 'returns' (DL2 §4.3, with the value
    baseline, job-aware exploration and replay), or, in compat mode only, the exact credits 'perturbation' (one
    slot sampled, the rest greedy) and 'deviation' (one decision replaced by each of `alternatives` others, the
    run finished by `continuation`; `models/dl2-compat-drf-rl`). The logged-feedback steps use the value network,
    which the exact credits do not train: with them, `feedback_steps` is best 0."""
    perturbation_probability: float = 0.05
    """'perturbation' and 'deviation': chance that a slot with a decision is sampled."""
    alternatives: int = 6
    """'deviation': other actions tried in place of each deviated decision."""
    continuation: str = "policy"
    """'deviation': who finishes each compared run: 'policy' (the greedy policy) or a compat heuristic's name
    (e.g. 'drf': about 20x cheaper)."""
    temperature: float = 1.0
    """'deviation': the advantages' scale in the reweighting, in units of their deviation (smaller: bolder)."""
    kl_weight: float = 1.0
    """'deviation': weight of the KL penalty to the current policy (the trust region)."""
    minibatch_size: int = 1024
    """Decisions per gradient step."""
    max_slots: int = 1_500
    """Training episodes are cut after this many slots (a starving policy would otherwise run 3,000)."""
    value_warmup: int = 2
    """'returns': iterations in which only the value network learns (its first estimates are noise)."""
    validation_max_slots: int = 1_500
    """Validation runs that have not finished by then count as infinite JCT (the library default, 20,000, lets
    one starving checkpoint cost minutes)."""


@dataclass(frozen=True, slots=True)
class EvaluateParams:
    baselines: tuple[str, ...] = ("drf", "optimus", "srpt-knee")
    """Heuristics the policy is compared with on the test workloads."""
    champion: str = ""
    """Model folder of the current champion to compare with (empty: none; `--champion` overrides)."""
    stall_slots: int = 500
    """A run in which no job progresses for this many slots is stopped and its scheduler reported unsafe."""
    workers: int = 2
    """Processes running the test workloads (of the evaluation, the ablation's variants and the gate)."""


@dataclass(frozen=True, slots=True)
class AblateParams:
    variants: tuple[str, ...] = ABLATION_VARIANTS
    """RL variants (`full` or `no-<component>`), each trained from the warm-up and tested."""
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    """Training seeds per variant (the confidence interval is over them)."""
    iterations: int = 4
    """RL iterations per variant and seed."""
    episodes_per_iteration: int = 2
    """Episodes per RL iteration of each variant (smaller than fine-tuning's: ablations compare, not ship)."""
    test_workloads: int = 0
    """Test workloads each variant and seed runs on (the first ones of `workloads.test`; 0: all)."""
    value_warmup: int = 1
    """Iterations of each variant in which only the critic learns: `iterations - value_warmup` policy updates,
    and replay needs at least two of them to replay anything."""


@dataclass(frozen=True, slots=True)
class PromoteParams:
    incumbent: tuple[str, ...] = ("drf",)
    """The scheduler(s) the cluster runs today: with no champion yet, the challenger must beat each of them (list
    the best heuristic too to require that)."""
    margin: float = 0.0
    """The challenger must beat what it replaces (the champion, else every incumbent) by this fraction."""
    max_slowdown_p99: float = 1.5
    """Safety: p99 JCT at most this multiple of what it replaces."""


@dataclass(frozen=True, slots=True)
class Params:
    profile: str = "full"
    """'full' or 'smoke' (the `smoke` section is merged over the others)."""
    data: DataParams = field(default_factory=DataParams)
    validate: ValidateParams = field(default_factory=ValidateParams)
    workloads: WorkloadsParams = field(default_factory=WorkloadsParams)
    warmup: WarmupParams = field(default_factory=WarmupParams)
    feedback: FeedbackParams = field(default_factory=FeedbackParams)
    finetune: FinetuneParams = field(default_factory=FinetuneParams)
    evaluate: EvaluateParams = field(default_factory=EvaluateParams)
    ablate: AblateParams = field(default_factory=AblateParams)
    promote: PromoteParams = field(default_factory=PromoteParams)
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Top-level sections this schema does not know (other tools' settings), untouched."""

    def section(self, name: str) -> dict[str, Any]:
        """One section as plain JSON-ready data (for digests and MLflow params)."""
        return as_dict(getattr(self, name))


def as_dict(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: as_dict(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [as_dict(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): as_dict(v) for k, v in value.items()}
    return value


def load(path: Path | str | None = None, smoke: bool = False, overrides: Sequence[str] = ()) -> Params:
    """Read params.yaml (default: the repository's), merge the smoke profile when `profile: smoke` or `smoke` is
    set, then apply `key.sub=value` overrides (last, so that `--smoke --set warmup.epochs=3` means 3)."""
    location = Path(path) if path is not None else DEFAULT_PATH
    try:
        raw = yaml.safe_load(location.read_text()) or {}
    except FileNotFoundError:
        raise ParamsError(f"{location}: file not found") from None
    except yaml.YAMLError as error:
        raise ParamsError(f"{location}: not valid YAML ({error})") from None
    if not isinstance(raw, dict):
        raise ParamsError(f"{location}: expected a mapping of sections")
    return from_mapping(raw, smoke, str(location), overrides)


def from_mapping(
    raw: Mapping[str, Any], smoke: bool = False, where: str = "params", overrides: Sequence[str] = ()
) -> Params:
    data = copy.deepcopy(dict(raw))
    profile_overrides = data.pop("smoke", None) or {}
    if smoke:
        data["profile"] = "smoke"
    profile = data.get("profile", "full")
    if profile not in ("full", "smoke"):
        raise ParamsError(f"{where}: profile must be 'full' or 'smoke', got {profile!r}")
    if profile == "smoke":
        if not isinstance(profile_overrides, dict):
            raise ParamsError(f"{where}: 'smoke' must be a mapping of section overrides")
        data = _merge(data, profile_overrides)
    for override in overrides:
        _apply_override(data, override)
    known = {f.name for f in dataclasses.fields(Params)} - {"extra"}
    extra = {key: value for key, value in data.items() if key not in known}
    kwargs: dict[str, Any] = {"extra": extra}
    hints = typing.get_type_hints(Params)
    for name in known:
        if name in data:
            kwargs[name] = _coerce(data[name], hints[name], f"{where}: {name}")
    params = Params(**kwargs)
    _check(params, where)
    return params


def _merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(dict(merged[key]), value)
        else:
            merged[key] = value
    return merged


def _apply_override(raw: dict[str, Any], override: str) -> None:
    key, sep, text = override.partition("=")
    if not sep or not key.strip():
        raise ParamsError(f"override {override!r}: expected key.sub=value")
    value = yaml.safe_load(text)
    node = raw
    parts = key.strip().split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ParamsError(f"override {override!r}: {part} is not a section")
    node[parts[-1]] = value


def _coerce(value: Any, hint: Any, where: str) -> Any:
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, Mapping):
            raise ParamsError(f"{where}: expected a mapping, got {value!r}")
        hints = typing.get_type_hints(hint)
        names = {f.name for f in dataclasses.fields(hint)}
        unknown = sorted(set(value) - names)
        if unknown:
            raise ParamsError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        return hint(**{key: _coerce(item, hints[key], f"{where}.{key}") for key, item in value.items()})
    origin = typing.get_origin(hint)
    if origin is tuple:
        (item_type, _) = typing.get_args(hint)
        if isinstance(value, str | int | float):
            value = [value]  # `-S ablate.seeds=3` means (3,)
        if not isinstance(value, list | tuple):
            raise ParamsError(f"{where}: expected a list, got {value!r}")
        return tuple(_coerce(item, item_type, f"{where}[{i}]") for i, item in enumerate(value))
    if hint is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if hint in (int, str, bool) and type(value) is hint:
        return value
    if hint is str and value is None:
        return ""
    if origin is Mapping or hint is Mapping:
        return value
    raise ParamsError(f"{where}: expected {getattr(hint, '__name__', hint)}, got {value!r}")


def _check(params: Params, where: str) -> None:
    if params.workloads.mode not in ("compat", "realistic"):
        raise ParamsError(f"{where}: workloads.mode must be 'compat' or 'realistic'")
    unknown = [v for v in params.ablate.variants if v not in ABLATION_VARIANTS]
    if unknown:
        raise ParamsError(f"{where}: unknown ablation variant(s) {unknown}; known: {', '.join(ABLATION_VARIANTS)}")
    if params.feedback.log_mode not in ("shadow", "canary", "active"):
        raise ParamsError(f"{where}: feedback.log_mode must be shadow, canary or active")
    if params.finetune.reward not in ("jct", "progress"):
        raise ParamsError(f"{where}: finetune.reward must be 'jct' or 'progress'")
    _check_credit(params.finetune, params.workloads.mode, where)
    _check_schedulers(params, where)
    counts = {
        "warmup.episodes": params.warmup.episodes,
        "warmup.epochs": params.warmup.epochs,
        "warmup.window": params.warmup.window,
        "warmup.record_every": params.warmup.record_every,
        "finetune.episodes_per_iteration": params.finetune.episodes_per_iteration,
        "ablate.episodes_per_iteration": params.ablate.episodes_per_iteration,
        "finetune.validate_every": params.finetune.validate_every,
        "finetune.max_slots": params.finetune.max_slots,
        "finetune.validation_max_slots": params.finetune.validation_max_slots,
        "finetune.alternatives": params.finetune.alternatives,
        "finetune.minibatch_size": params.finetune.minibatch_size,
    }
    for name, value in counts.items():
        if value < 1:
            raise ParamsError(f"{where}: {name} must be at least 1, got {value}")
    if not params.workloads.validation_seeds or not params.workloads.test_seeds:
        raise ParamsError(f"{where}: workloads.validation_seeds and workloads.test_seeds must not be empty")
    if not params.warmup.hidden or min(params.warmup.hidden) < 1:
        raise ParamsError(f"{where}: warmup.hidden must list positive widths")
    if not 0.0 <= params.warmup.label_smoothing < 1.0:
        raise ParamsError(f"{where}: warmup.label_smoothing must be in [0, 1), got {params.warmup.label_smoothing}")
    if params.warmup.packed and params.workloads.mode != "compat":
        raise ParamsError(f"{where}: warmup.packed is a compat-mode option (realistic mode places by its placer)")


def _check_schedulers(params: Params, where: str) -> None:
    """Every heuristic named (teacher, baselines, incumbents, feedback incumbent) exists in the mode."""
    from dl2.schedulers.registry import COMPAT_SCHEDULERS, SCHEDULERS

    known = COMPAT_SCHEDULERS if params.workloads.mode == "compat" else tuple(SCHEDULERS)
    named = {
        "warmup.teacher": [params.warmup.teacher],
        "evaluate.baselines": list(params.evaluate.baselines),
        "promote.incumbent": list(params.promote.incumbent),
        "feedback.incumbent": [params.feedback.incumbent],
    }
    for key, names in named.items():
        unknown = [n for n in names if n not in known and not n.startswith("rollout:")]
        if unknown:
            raise ParamsError(
                f"{where}: {key}: unknown {params.workloads.mode}-mode scheduler(s) {', '.join(unknown)}; "
                f"known: {', '.join(known)}"
            )
    if not params.promote.incumbent:
        raise ParamsError(f"{where}: promote.incumbent must name at least one scheduler")
    if params.promote.margin < 0 or params.promote.max_slowdown_p99 < 1:
        raise ParamsError(f"{where}: promote.margin must be >= 0 and promote.max_slowdown_p99 >= 1")


def _check_credit(finetune: FinetuneParams, mode: str, where: str) -> None:
    from dl2.schedulers.registry import COMPAT_SCHEDULERS

    if finetune.credit not in CREDITS:
        raise ParamsError(f"{where}: finetune.credit must be one of {', '.join(CREDITS)}, got {finetune.credit!r}")
    if finetune.credit != "returns" and mode != "compat":
        raise ParamsError(f"{where}: finetune.credit {finetune.credit} needs workloads.mode compat (deterministic)")
    if finetune.continuation != "policy" and finetune.continuation not in COMPAT_SCHEDULERS:
        raise ParamsError(
            f"{where}: finetune.continuation must be 'policy' or one of {', '.join(COMPAT_SCHEDULERS)}, "
            f"got {finetune.continuation!r}"
        )
    if not 0.0 < finetune.perturbation_probability <= 1.0:
        raise ParamsError(f"{where}: finetune.perturbation_probability must be in (0, 1]")
    if not (finetune.temperature > 0 and finetune.kl_weight >= 0):
        raise ParamsError(f"{where}: finetune.temperature must be positive and finetune.kl_weight not negative")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every stage takes."""
    parser.add_argument("--params", type=Path, default=None, help="params file (default: the repository's)")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the smoke profile: tiny budgets (about a minute), outputs under work/smoke/",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one parameter, e.g. --set warmup.epochs=3 (repeatable)",
    )


def from_args(args: argparse.Namespace) -> Params:
    return load(args.params, args.smoke, args.overrides)
