"""`params.yaml`: one section per stage, each read through a definition made once.

The `warmup` section is the library's `WarmUpConfig` (`dl2.rl.config.WARMUP_KEYS`: the keys of `dl2 train-sl`'s
flags) and `finetune` holds the library's `RLConfig` and `EnvConfig` (the keys of `dl2 train-rl`'s flags) beside
the stage's own settings, so a default, a description and a check are the same whichever door a value comes
through; the other sections are the pipeline's own configurations below. Source, mode and validation workloads
come from the `workloads` section, the network's shape from the warm-up. DVC reads the same file (each stage
declares the sections it uses, so `dvc exp run -S warmup.epochs=3` reruns exactly what depends on it).
`profile: smoke` (or `--smoke`) merges the `smoke:` section over the others. A bad value is one line naming the
file, the key, the value and what is allowed; unknown keys and unknown sections are errors (a typo in
`-S warmup.epoch=3` must not be ignored), and so is a key given twice in one mapping (YAML would keep the last:
a second `profile: smoke` at the end of the file would silently turn the full run into the smoke run).
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from annotated_types import Ge, Gt, Le, Lt, MinLen

from dl2.config import ConfigError, Keys, build, config, merge, refuse
from dl2.core import Dl2Error, InputError
from dl2.core.inputs import read_text
from dl2.core.limits import MAX_TASKS_PER_JOB, MAX_TIME_S
from dl2.env.config import EnvConfig
from dl2.rl.config import (
    RL_KEYS,
    WARMUP_KEYS,
    RLConfig,
    TwinLearningConfig,
    WarmUpConfig,
    check_source,
    check_training,
)
from pipelines.tracking import ROOT

DEFAULT_PATH = ROOT / "params.yaml"
Variant = Literal["full", "no-exploration", "no-replay", "no-value-baseline"]
ABLATION_VARIANTS: tuple[Variant, ...] = ("full", "no-exploration", "no-replay", "no-value-baseline")
"""RL components that `ablate` can switch off (DL2 §6.5), `full` being none."""
Seed = Annotated[int, Ge(0), Lt(2**63)]
Count = Annotated[int, Ge(0), Le(1_000_000)]


class ParamsError(Dl2Error):
    """params.yaml (or an override) that does not fit the schema; reported as one line."""


@config
class DataParams:
    traces: tuple[str, ...] = ("philly", "alibaba_gpu2023")
    """Folders under data/traces that are ingested, validated and versioned."""
    feedback: str = "data/feedback"
    """Folder of decision logs (one sub-folder of segments or one .jsonl file per cluster), relative to the
    repository; fine-tuning learns from every log in it (the simulated cluster's and the collected ones). It may
    be empty."""
    incoming: str = "work/decisions"
    """Live decision logs that controllers append to (not versioned): a folder relative to the repository, or the
    object-storage URL `dl2 serve --decision-log` writes to (`s3://bucket/prefix`); `pipelines.collect` moves what
    they gain into `data/feedback/clusters`, validated."""


@config
class ValidateParams:
    max_gpus: Annotated[int, Ge(1), Le(MAX_TASKS_PER_JOB)] = 512
    """Largest plausible GPU count of one job (the shipped traces reach 32)."""
    max_duration_s: Annotated[float, Gt(0), Le(MAX_TIME_S)] = 5_184_000.0
    """Longest plausible run time of one job, 60 days (the shipped traces reach about 30)."""
    job_types: tuple[str, ...] = ("unknown", "LS", "BE", "Burstable", "Guaranteed")
    """Known job classes besides the catalogue's model names (which are always allowed)."""
    statuses: tuple[str, ...] = ("unknown", "succeeded", "failed", "running", "killed")
    """Known final job statuses."""
    max_progress_ratio: Annotated[float, Gt(0), Le(1_000)] = 2.0
    """Decision logs: epochs done over declared epochs at most this (declared epochs may err, DL2 §6.4)."""
    sample_rows: Annotated[int, Ge(1), Le(1000)] = 5
    """Rows shown per failed expectation in the report."""


@config
class WorkloadsParams:
    mode: Literal["compat", "realistic"] = "compat"
    """Simulator mode the policy is trained for: 'compat' (the authors' setting) or 'realistic'."""
    train_source: str = "authors-small"
    """Workload source of warm-up, RL and simulated feedback (`dl2.workload.source`); validation uses it too."""
    validation_seeds: Annotated[tuple[Seed, ...], MinLen(1)] = (5000, 5001)
    """Workloads of `train_source` that select checkpoints; disjoint from every training seed."""
    test: str = "dl2-official-small"
    """Held-out workloads (a workload name or a source), never trained or selected on."""
    test_seeds: Annotated[tuple[Seed, ...], MinLen(1)] = (0,)
    """Seeds of the test workloads (a source: one workload per seed; a name: the simulation seeds)."""

    def __post_init__(self) -> None:
        check_source("train_source", self.train_source)
        check_source("test", self.test)


@config
class FeedbackParams:
    episodes: Count = 2
    """Workloads of the training source on which a simulated cluster logs its decisions."""
    seed_offset: Seed = 20_000
    """Their seeds start here (disjoint from warm-up, RL, validation and test seeds)."""
    incumbent: str = "drf"
    """The heuristic the simulated cluster runs (and applies in shadow mode)."""
    log_mode: Literal["shadow", "canary", "active"] = "shadow"
    """'shadow' (the incumbent's decisions are applied), 'canary' or 'active' (the warm-up policy's are)."""


@config
class FinetuneParams:
    """The `finetune` stage: RL (the library's `RLConfig`, as `dl2 train-rl`), the environment's reward and
    episode length (`EnvConfig`), and what only the pipeline decides."""

    rl: RLConfig = field(default_factory=RLConfig)
    """RL settings (the workloads come from the `workloads` section, the network from the warm-up)."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """Reward and episode length (window, packing and placer come from the warm-up model)."""
    workers: Annotated[int, Ge(0), Le(1024)] = 2
    """Rollout processes (0: in the learner's process)."""
    feedback_steps: Count = 2
    """Advantage-weighted steps on the logged feedback after RL (kept only if they do not validate worse)."""
    init: str = ""
    """Model folder to start from, relative to the repository; empty: the warm-up."""


FINETUNE_KEYS = Keys(
    FinetuneParams,
    {
        "workers": "workers",
        "feedback_steps": "feedback_steps",
        "init": "init",
        "reward": "env.reward",
        "episode_slots": "env.max_slots",
        **{
            key.name: "rl." + ".".join(key.path)
            for key in RL_KEYS.without("source", "validation_source", "validation_seeds", "hidden", "network")
        },
    },
)
"""The flat keys of the `finetune` section: `dl2 train-rl`'s flags, less what other sections set, plus the
stage's own."""
WARMUP_SECTION_KEYS = WARMUP_KEYS.without("source", "mode")
"""The flat keys of the `warmup` section: `dl2 train-sl`'s flags, less source and mode (the `workloads` section)."""


@config
class OnlineParams:
    """The `online` stage's learning beyond the feedback steps (`finetune.feedback_steps`)."""

    learn_in_twin: bool = True
    """Re-warm the policy in each collected cluster log's calibrated twin (`dl2.rl.in_twin`), kept only if the
    twin finds it faster; realistic-mode policies only (the twin plays realistic mode)."""
    twin: TwinLearningConfig = field(default_factory=TwinLearningConfig)
    """How the challenger learns in the twin and how the twin compares it with the running policy."""


@config
class HarmonyParams:
    """The `harmony` stage: Harmony's speed model and placer refit from the collected cluster logs
    (`dl2.placement.refit`, as `dl2 refit-harmony`)."""

    speed_model: str = "models/harmony-speed-philly"
    """The deployed speed-model folder the refit starts from, relative to the repository (or absolute)."""
    placer: str = "models/harmony-placer-philly"
    """The deployed placer folder the retraining starts from, relative to the repository (or absolute)."""
    epochs: Annotated[int, Ge(1), Le(10_000)] = 30
    """Speed model: passes over each log's steady samples."""
    iterations: Annotated[int, Ge(1), Le(100_000)] = 24
    """Placer: RL episodes in the refit speed model's world, per log."""
    validation_seeds: Annotated[tuple[Seed, ...], MinLen(1)] = (2_000, 2_001)
    """Placer: the log's workloads (its jobs, resampled) that validate each retrained placer."""
    seed: Seed = 0
    """Seeds both trainings."""


@config
class EvaluateParams:
    baselines: tuple[str, ...] = ("drf", "optimus", "srpt-knee")
    """Heuristics the policy is compared with on the test workloads (with the teacher and the incumbents)."""
    champion: str = ""
    """Model folder of the current champion to compare with (empty: none; `--champion` overrides)."""
    stall_slots: Annotated[int, Ge(1), Le(10_000_000)] = 500
    """A run in which no job progresses for this many slots is stopped and its scheduler reported unsafe."""
    workers: Annotated[int, Ge(1), Le(1024)] = 2
    """Processes running the test workloads (of the evaluation, the ablation's variants and the gate)."""


@config
class AblateParams:
    variants: tuple[Variant, ...] = ABLATION_VARIANTS
    """RL variants (`full` or `no-<component>`), each trained from the warm-up and tested."""
    seeds: Annotated[tuple[Seed, ...], MinLen(1)] = (0, 1, 2, 3, 4)
    """Training seeds per variant (the confidence interval is over them)."""
    iterations: Annotated[int, Ge(1), Le(1_000_000)] = 4
    """RL iterations per variant and seed."""
    episodes_per_iteration: Annotated[int, Ge(1), Le(1_000_000)] = 2
    """Episodes per RL iteration of each variant (smaller than fine-tuning's: ablations compare, not ship)."""
    test_workloads: Count = 0
    """Test workloads each variant and seed runs on (the first ones of `workloads.test`; 0: all)."""
    value_warmup: Count = 1
    """Iterations of each variant in which only the critic learns: `iterations - value_warmup` policy updates,
    and replay needs at least two of them to replay anything."""
    epochs: Annotated[int, Ge(1), Le(1000)] = 1
    """Passes over each iteration's decisions (fewer than fine-tuning's: the ablation compares components)."""
    samples_per_iteration: Annotated[int, Ge(1), Le(100_000_000)] = 20_000
    """Fresh decisions each update uses (a random subset of the iteration's)."""


@config
class PromoteParams:
    incumbent: Annotated[tuple[str, ...], MinLen(1)] = ("drf",)
    """The scheduler(s) the cluster runs today: with no champion yet, the challenger must beat each of them (list
    the best heuristic too to require that)."""
    margin: Annotated[float, Ge(0), Le(1)] = 0.0
    """The challenger must beat what it replaces (the champion, else every incumbent) by this fraction."""
    max_slowdown_p99: Annotated[float, Ge(1), Le(1_000)] = 1.5
    """Safety: p99 JCT at most this multiple of what it replaces."""


@config
class ClusterParams:
    enabled: bool = True
    """Run the closed loop on a local Kubernetes cluster after the gate (`pipelines.cluster_loop`)."""
    workload: str = "philly"
    """The workload whose first jobs and nodes the local cluster runs (realistic mode)."""
    jobs: Annotated[int, Ge(1), Le(10_000)] = 30
    """Jobs of the workload the cluster runs (the first ones by arrival)."""
    nodes: Annotated[int, Ge(1), Le(4096)] = 4
    """Nodes of the workload's cluster the local cluster has (the first ones)."""
    seed: Seed = 0
    """Seed of the workload and of the simulated cluster."""
    incumbent: str = "drf"
    """What the cluster runs without dl2: the controller's fallback and the loop's reference."""
    truth: str = ""
    """How the cluster's jobs really behave against the catalogue that the policies read (`dl2.truth`: a scenario
    such as speed-shift, seed-N or drawn-N); empty: as the catalogue says. Only the cluster twin reads it."""


SECTIONS: dict[str, type] = {
    "data": DataParams,
    "validate": ValidateParams,
    "workloads": WorkloadsParams,
    "feedback": FeedbackParams,
    "online": OnlineParams,
    "harmony": HarmonyParams,
    "evaluate": EvaluateParams,
    "ablate": AblateParams,
    "promote": PromoteParams,
    "cluster": ClusterParams,
}
"""Sections that are the pipeline's own configurations (`warmup` and `finetune` are the library's)."""


@dataclass(frozen=True, slots=True)
class Params:
    profile: str = "full"
    """'full' or 'smoke' (the `smoke` section is merged over the others)."""
    data: DataParams = field(default_factory=DataParams)
    validate: ValidateParams = field(default_factory=ValidateParams)
    workloads: WorkloadsParams = field(default_factory=WorkloadsParams)
    warmup: WarmUpConfig = field(default_factory=WarmUpConfig)
    feedback: FeedbackParams = field(default_factory=FeedbackParams)
    finetune: FinetuneParams = field(default_factory=FinetuneParams)
    online: OnlineParams = field(default_factory=OnlineParams)
    harmony: HarmonyParams = field(default_factory=HarmonyParams)
    evaluate: EvaluateParams = field(default_factory=EvaluateParams)
    ablate: AblateParams = field(default_factory=AblateParams)
    promote: PromoteParams = field(default_factory=PromoteParams)
    cluster: ClusterParams = field(default_factory=ClusterParams)
    raw: Mapping[str, Any] = field(default_factory=dict)
    """Each section as params.yaml spells it (flat keys) after merging: what MLflow runs log as parameters."""

    def section(self, name: str) -> dict[str, Any]:
        """One section as params.yaml spells it, every key with its value in effect (JSON-ready)."""
        from dl2.io import to_json

        if name == "warmup":
            return to_json(WARMUP_SECTION_KEYS.values(self.warmup))  # type: ignore[no-any-return]
        if name == "finetune":
            return to_json(FINETUNE_KEYS.values(self.finetune))  # type: ignore[no-any-return]
        return to_json(getattr(self, name))  # type: ignore[no-any-return]


def load(path: Path | str | None = None, smoke: bool = False, overrides: Sequence[str] = ()) -> Params:
    """Read params.yaml (default: the repository's), merge the smoke profile when `profile: smoke` or `smoke` is
    set, then apply `key.sub=value` overrides (last, so that `--smoke --set warmup.epochs=3` means 3)."""
    location = Path(path) if path is not None else DEFAULT_PATH
    try:
        raw = parse_yaml(read_text(location), str(location)) or {}
    except InputError as error:
        raise ParamsError(str(error)) from None
    if not isinstance(raw, dict):
        raise ParamsError(f"{location}: expected a mapping of sections")
    return from_mapping(raw, smoke, str(location), overrides)


class _StrictLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML: no types installed (no types-PyYAML)
    """The safe loader, refusing a key given twice in one mapping (YAML itself keeps the last silently)."""


def _strict_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (line {key_node.start_mark.line + 1})", key_node.start_mark
            )
        seen.add(key)
    mapping: dict[Any, Any] = loader.construct_mapping(node, deep=True)
    return mapping


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _strict_mapping)


def parse_yaml(text: str, where: str) -> Any:
    """A YAML document (safe types only); invalid or too deeply nested YAML, or a key given twice in one mapping,
    is an InputError."""
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.constructor.ConstructorError as error:
        raise InputError(where, str(error.problem)) from None
    except yaml.YAMLError as error:
        raise InputError(where, f"not valid YAML ({str(error).splitlines()[0]})") from None
    except RecursionError:
        raise InputError(where, "not valid YAML (nested too deeply)") from None


def from_mapping(
    raw: Mapping[str, Any], smoke: bool = False, where: str = "params", overrides: Sequence[str] = ()
) -> Params:
    data = copy.deepcopy(dict(raw))
    _check_sections(data, where)
    profile_overrides = data.pop("smoke", None) or {}
    if smoke:
        data["profile"] = "smoke"
    profile = data.get("profile", "full")
    if profile not in ("full", "smoke"):
        raise ParamsError(f"{where}: profile: {profile!r} is not allowed (full or smoke)")
    if profile == "smoke":
        if not isinstance(profile_overrides, dict):
            raise ParamsError(f"{where}: smoke: expected a mapping of section overrides")
        data = merge(data, profile_overrides)
    for override in overrides:
        _apply_override(data, override)
    try:
        return _build(data, profile, where)
    except ConfigError as error:
        raise ParamsError(str(error)) from None


def _section(data: Mapping[str, Any], name: str, where: str) -> dict[str, Any]:
    value = data.get(name, {})
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ParamsError(f"{where}: {name}: expected a mapping of keys, got {value!r}")
    return dict(value)


KNOWN_SECTIONS = ("profile", *SECTIONS, "warmup", "finetune", "smoke")


def _check_sections(data: Mapping[str, Any], where: str) -> None:
    unknown = [key for key in data if key not in KNOWN_SECTIONS]
    if unknown:
        raise ParamsError(f"{where}: {unknown[0]}: unknown section (known: {', '.join(KNOWN_SECTIONS)})")


def _build(data: Mapping[str, Any], profile: str, where: str) -> Params:
    sections: dict[str, Any] = {
        name: build(cls, _section(data, name, where), f"{where}: {name}") for name, cls in SECTIONS.items()
    }
    w = sections["workloads"]
    base_warmup = WarmUpConfig(source=w.train_source, mode=w.mode)
    warmup = WARMUP_SECTION_KEYS.build(_section(data, "warmup", where), f"{where}: warmup", base=base_warmup)
    rl = RLConfig(train_source=w.train_source, validation_seeds=w.validation_seeds)
    base_finetune = FinetuneParams(rl=rl, env=EnvConfig())
    finetune = FINETUNE_KEYS.build(_section(data, "finetune", where), f"{where}: finetune", base=base_finetune)
    finetune = replace(finetune, rl=replace(finetune.rl, network=warmup.supervised.network))
    try:
        check_training(w.mode, finetune.rl)
    except ConfigError as error:
        raise ParamsError(f"{where}: finetune: {error}") from None
    _check_schedulers(sections, warmup, where)
    _check_truth(sections["cluster"].truth, where)
    flat = {name: _section(data, name, where) for name in (*SECTIONS, "warmup", "finetune")}
    return Params(profile=profile, warmup=warmup, finetune=finetune, raw=flat, **sections)


def _check_schedulers(sections: Mapping[str, Any], warmup: WarmUpConfig, where: str) -> None:
    """The heuristics named in the pipeline's sections exist in the mode."""
    from dl2.schedulers.registry import check_scheduler

    mode = sections["workloads"].mode
    named = {
        "evaluate.baselines": sections["evaluate"].baselines,
        "promote.incumbent": sections["promote"].incumbent,
        "feedback.incumbent": (sections["feedback"].incumbent,),
        "cluster.incumbent": (sections["cluster"].incumbent,),
    }
    for key, names in named.items():
        for name in names:
            try:
                check_scheduler(key, name, mode)
            except ConfigError as error:
                raise ParamsError(f"{where}: {error}") from None
    if warmup.observation.packed and mode != "compat":
        raise ParamsError(f"{where}: {refuse('warmup.packed', True, 'packed requests are a compat-mode option')}")


def _check_truth(name: str, where: str) -> None:
    """The cluster's truth exists (asked of the twin: the lifecycle never reads a truth itself)."""
    if not name:
        return
    from testbed.twin import truth_of

    try:
        truth_of(name)
    except ConfigError as error:
        raise ParamsError(f"{where}: cluster.{error}") from None


def _apply_override(raw: dict[str, Any], override: str) -> None:
    key, sep, text = override.partition("=")
    if not sep or not key.strip():
        raise ParamsError(f"override {override!r}: expected key.sub=value")
    try:
        value = parse_yaml(text, f"override {override!r}")
    except InputError as error:
        raise ParamsError(str(error)) from None
    node = raw
    parts = key.strip().split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ParamsError(f"override {override!r}: {part} is not a section")
    node[parts[-1]] = value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every stage takes."""
    parser.add_argument("--params", type=Path, default=None, help="params file (default: the repository's)")
    parser.add_argument("--smoke", action="store_true", help="the smoke profile: tiny budgets (about a minute)")
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
