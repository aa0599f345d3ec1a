"""Model folders: `policy.pt` (+ `value.pt`) state dicts, `config.json`, a `MODEL_CARD.md`, and for a policy whose
lookahead runs in a world a cluster's records calibrated, that world (`calibration.json`,
`dl2.workload.calibration_io`).

Folders are written and weights read by `dl2.nn.state_io` (atomically; tensors only, never code); this module
adds what a DL2 policy's folder means: its configuration and the weight shapes that configuration needs.
"""

from __future__ import annotations

import json
from dataclasses import field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from annotated_types import Ge, Le

from dl2.config import ConfigError, build, config, refuse
from dl2.core import InputError
from dl2.core.inputs import read_json
from dl2.env.config import EnvConfig
from dl2.env.decision import action_count
from dl2.env.observation import ObservationConfig
from dl2.io import to_json
from dl2.nn.state_io import load_weights, write_model_dir
from dl2.rl.config import NetworkConfig, RLConfig
from dl2.schedulers.registry import check_placer, check_scheduler
from dl2.sim.calibrated import calibration_text
from dl2.sim.metrics import interval_text
from dl2.workload.calibration_io import CALIBRATION_FILE

FORMAT = "dl2-policy/1"


@config
class PolicyConfig:
    """Everything needed to rebuild and run a policy (a model folder's `config.json`)."""

    observation: ObservationConfig = field(default_factory=ObservationConfig)
    """What the policy sees."""
    network: NetworkConfig = field(default_factory=NetworkConfig)
    """Its network's shape (the weights must match it)."""
    mode: Literal["compat", "realistic"] = "compat"
    """Simulator mode the policy was trained for."""
    placer: str = "load-balance"
    """Placer of its targets in realistic mode."""
    lookahead: tuple[str, ...] = ()
    """Heuristics (realistic mode) that propose beside the policy at every slot, the allocation whose what-if run
    ends soonest applied, the first of them deciding those runs' later slots (`dl2.rl.lookahead`); empty: the
    policy decides alone."""
    lookahead_horizon_slots: Annotated[int, Ge(0), Le(1_000)] = 0
    """The slots of a what-if run in which the first heuristic decides every slot; past them it decides ever less
    often (`LookaheadScheduler`'s sparse continuation: gaps of `SPARSE_GROWTH`, its square, ...), every job keeping
    what it holds in between. 0: every slot to the end (exact, and at a thousand active jobs several seconds a
    decision: docs/results.md, "What a decision costs at Philly scale, and who decides")."""
    lookahead_fit: bool = False
    """Whether the lookahead's world is corrected per job as each job's own progress accumulates, its heuristics
    reading each job's fitted speed (`dl2.rl.fitted_lookahead`); False: the world is the same for every job of a
    type. What the correction adds: `benchmarks/learned_parts.py`."""

    def __post_init__(self) -> None:
        check_placer("placer", self.placer)
        for name in self.lookahead:
            check_scheduler("lookahead", name, "realistic")
        if self.lookahead and self.mode != "realistic":
            raise refuse("lookahead", list(self.lookahead), "a lookahead plays realistic mode")
        if self.lookahead_fit and not self.lookahead:
            raise refuse("lookahead_fit", True, "only a lookahead's world is fitted per job: name its heuristics")
        if self.observation.packed and self.mode != "compat":
            raise refuse("observation.packed", True, "packed requests are a compat-mode option")

    @property
    def input_size(self) -> int:
        return self.observation.size

    @property
    def num_actions(self) -> int:
        return action_count(self.observation.window)

    def to_json_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = to_json(self)
        return {"format": FORMAT, **data, "input_size": self.input_size, "num_actions": self.num_actions}

    @classmethod
    def from_json_dict(cls, data: Any, where: str = "config.json") -> PolicyConfig:
        """The configuration a model folder's `config.json` holds, checked like any other (one line naming the
        field when something is off); its recorded sizes must agree with it."""
        if not isinstance(data, dict):
            raise InputError(where, f"expected a JSON object, got {type(data).__name__}")
        if data.get("format") != FORMAT:
            raise InputError(
                where, f"not a dl2 policy (format {data.get('format')!r}, expected {FORMAT!r})", field="format"
            )
        missing = [name for name in ("observation", "network", "mode", "placer") if name not in data]
        if missing:
            raise InputError(where, "missing", field=missing[0])
        known = ("observation", "network", "mode", "placer", "lookahead", "lookahead_horizon_slots", "lookahead_fit")
        fields = {name: data[name] for name in known if name in data}
        try:
            config = build(cls, fields)
        except ConfigError as error:
            raise InputError(where, str(error)) from None
        for name in ("input_size", "num_actions"):
            if name in data and data[name] != getattr(config, name):
                raise InputError(where, f"{data[name]!r} disagrees with the configuration ({getattr(config, name)})",
                                 field=name)  # fmt: skip
        return config


def is_model_dir(path: str | Path) -> bool:
    return (Path(path) / "config.json").is_file() and (Path(path) / "policy.pt").is_file()


def save_model(
    directory: Path,
    config: PolicyConfig,
    policy_state: dict[str, Any],
    value_state: dict[str, Any] | None = None,
    card: str = "",
    metadata: dict[str, Any] | None = None,
    overwrite: bool = False,
    files: dict[str, bytes] | None = None,
) -> Path:
    """`files`: others the folder holds, by name (`calibration.json`, the world its lookahead runs in)."""
    weights = (
        {"policy.pt": policy_state} if value_state is None else {"policy.pt": policy_state, "value.pt": value_state}
    )
    document = {**config.to_json_dict(), "metadata": metadata or {}}
    return write_model_dir(directory, weights, document, card, files, overwrite=overwrite)


def load_config(directory: Path) -> tuple[PolicyConfig, dict[str, Any]]:
    folder = Path(directory)
    if not folder.is_dir():
        raise InputError(str(directory), "model folder not found" if not folder.exists() else "not a model folder")
    path = folder / "config.json"
    if not path.is_file():
        raise InputError(str(directory), "not a model folder (no config.json)")
    data = read_json(path)
    config = PolicyConfig.from_json_dict(data, str(path))
    metadata = data.get("metadata", {})
    if not isinstance(metadata, dict):
        raise InputError(str(path), f"expected a JSON object, got {type(metadata).__name__}", field="metadata")
    return config, dict(metadata)


def load_state(directory: Path, name: str = "policy.pt", config: PolicyConfig | None = None) -> dict[str, Any]:
    """A network's weights (tensors only); with `config`, checked against the shapes it needs (`weight_shapes`),
    so that a folder whose `config.json` disagrees with its weights is refused when it is loaded, not when its
    first decision multiplies mismatched matrices."""
    path = Path(directory) / name
    state = load_weights(path)
    if config is not None:
        check_weights(state, weight_shapes(config, "value" if name == "value.pt" else "policy"), str(path))
    return state


def weight_shapes(config: PolicyConfig, role: Literal["policy", "value"] = "policy") -> dict[str, tuple[int, ...]]:
    """The parameter shapes of the networks `config` describes (`dl2.rl.networks`: Linear layers of each
    `nn.Sequential` at indices 0, 2, 4, ..., ReLUs between), computed without torch."""
    shape = config.observation.shape
    hidden = config.network.hidden
    shapes: dict[str, tuple[int, ...]] = {}

    def linear(prefix: str, inputs: int, outputs: int) -> None:
        shapes[f"{prefix}.weight"] = (outputs, inputs)
        shapes[f"{prefix}.bias"] = (outputs,)

    def sequential(prefix: str, sizes: list[int]) -> None:
        for index in range(len(sizes) - 1):
            linear(f"{prefix}.{2 * index}", sizes[index], sizes[index + 1])

    outputs = config.num_actions if role == "policy" else 1
    if config.network.kind == "mlp":
        sequential("trunk", [shape.size, *hidden])
        linear("head", hidden[-1], outputs)
        return shapes
    width = hidden[-1]
    encoder_inputs = shape.job_features + (shape.global_features if config.network.kind == "per-job" else 0)
    sequential("jobs.encoder", [encoder_inputs, *hidden])
    sequential("jobs.context", [width + shape.global_features, width])
    if role == "policy":
        sequential("job_head", [2 * width, width, 3])
        linear("stop_head", width, 1)
    else:
        linear("head", width, 1)
    return shapes


def check_weights(state: dict[str, Any], expected: dict[str, tuple[int, ...]], where: str) -> None:
    """InputError naming the first parameter that is missing, unexpected or of another shape."""
    for key, needed in expected.items():
        if key not in state:
            raise InputError(where, f"weights do not match config.json: no {key} (network {needed})")
        actual = tuple(state[key].shape)
        if actual != needed:
            raise InputError(where, f"weights do not match config.json: {key} is {list(actual)}, the configured "
                             f"network needs {list(needed)}")  # fmt: skip
    unexpected = sorted(set(state) - set(expected))
    if unexpected:
        raise InputError(where, f"weights do not match config.json: unexpected {unexpected[0]}")


def model_card(title: str, metadata: dict[str, Any]) -> str:
    """A model folder's card: its title, what it learned from (in words), and the facts of `config.json` (history
    aside) for people to read."""
    summary = {k: v for k, v in metadata.items() if k not in ("history", "initial_metadata")}
    facts = json.dumps(summary, indent=2, default=str)
    learned = "".join(f"- {line}\n" for line in learned_from(metadata))
    lineage = f"## What it learned from\n\n{learned}\n" if learned else ""
    return (
        f"# {title}\n\n{lineage}## Facts\n\nWritten by `dl2`; `config.json` holds the same facts as JSON.\n\n"
        f"```json\n{facts}\n```\n"
    )


def learned_from(metadata: dict[str, Any]) -> list[str]:
    """What a model learned from, oldest first, as its metadata records it: the warm-up's teacher and workloads,
    RL, the decision logs of the feedback steps, the cluster records and calibrated twins of the online stage."""
    lines: list[str] = []
    initial = metadata.get("initial_metadata")
    if isinstance(initial, dict):
        lines += learned_from(initial)
    warm = metadata.get("warm_up")
    if isinstance(warm, dict):
        lines.append(
            f"warm-up: imitated `{warm.get('teacher')}` on {warm.get('episodes')} `{warm.get('source')}` workloads "
            f"({warm.get('mode')} mode) and {warm.get('dagger_rounds', 0)} DAgger round(s)"
        )
    rl = metadata.get("rl")
    if metadata.get("kind") == "rl" and isinstance(rl, dict):
        best = metadata.get("best_iteration", -1)
        chosen = (
            f"iteration {best} validated best" if best is not None and best >= 0 else "no checkpoint validated better"
        )
        lines.append(
            f"RL (`{rl.get('credit')}` credit, {rl.get('iterations')} iterations) from "
            f"`{metadata.get('initialised_from')}`: {chosen}"
        )
    for key, what in (("feedback", "feedback steps"), ("online", "steps on cluster records")):
        steps = metadata.get(key)
        if isinstance(steps, dict) and steps.get("logs"):
            logs = ", ".join(f"`{log.get('log')}` ({log.get('decisions')} decisions)" for log in steps["logs"])
            lines.append(f"{what} on {logs}: {'kept' if steps.get('kept') else 'not kept'}")
    if lookahead := metadata.get("lookahead"):
        horizon = metadata.get("lookahead_horizon_slots")
        played = f", its what-if runs decided every slot for {horizon} and sparsely after" if horizon else ""
        world = ""
        if source := metadata.get("lookahead_calibrated_from"):
            world = f", in the world `{CALIBRATION_FILE}` holds (calibrated from `{source}`)"
        if metadata.get("lookahead_fit"):
            world += (" corrected" if world else ", in a world corrected") + " per job as the jobs progress"
        lines.append(
            f"runs inside a lookahead over {', '.join(f'`{name}`' for name in lookahead)} and itself "
            f"(`dl2.rl.lookahead`){played}{world}"
        )
    for verdict in metadata.get("online_twin") or ():
        if isinstance(verdict, dict) and isinstance(verdict.get("predicted_difference"), dict):
            placer, running = verdict.get("placer"), verdict.get("running_placer")
            placing = f", placing with `{placer}` (it started from `{running}`)" if placer and placer != running else ""
            lines.append(
                f"re-warmed in the twin calibrated from `{verdict.get('log')}` on `{verdict.get('teacher')}` reading "
                f"the calibrated speeds{placing}: {interval_text(verdict['predicted_difference'])} against the policy "
                f"it started from in the twin, {'kept' if verdict.get('kept') else 'not kept'}"
            )
            calibration = verdict.get("calibration")
            if isinstance(calibration, dict) and calibration:
                lines.append(f"what the records showed the twin: {calibration_text(calibration)}")
            off_policy = verdict.get("off_policy")
            if isinstance(off_policy, dict) and "difference" in off_policy:
                lines.append(
                    f"off-policy from the same records (doubly robust, progress per slot): "
                    f"{off_policy['difference']:+.1%} [{off_policy['low']:+.1%}, {off_policy['high']:+.1%}]"
                )
    return lines


def continuing(loaded: PolicyConfig, env: EnvConfig, rl: RLConfig, where: str) -> tuple[EnvConfig, RLConfig]:
    """The configuration of RL that continues the model `loaded` (read from `where`): the model brings its
    observation window and packing, its placer and its network, which its weights only fit; the rest (reward,
    episodes, learning rate) is the training's own. A model of another mode than the training's is refused."""
    if loaded.mode != env.sim.mode.value:
        raise InputError(where, f"a {loaded.mode}-mode model; this training is in {env.sim.mode.value} mode")
    return replace(env, observation=loaded.observation, placer=loaded.placer), replace(rl, network=loaded.network)
