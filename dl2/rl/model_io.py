"""Model folders: `policy.pt` (+ `value.pt`) state dicts, `config.json` and a `MODEL_CARD.md`.

Weights are loaded with `torch.load(weights_only=True)`: a model file can hold tensors only, never code.
A folder is written under a temporary name and renamed into place; an existing folder is never overwritten
unless asked, and then it is kept as `<name>.previous` first (a trained model is never lost).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import field
from pathlib import Path
from typing import Any, Literal

from dl2.config import ConfigError, build, config, refuse
from dl2.core import InputError
from dl2.env.decision import action_count
from dl2.env.observation import ObservationConfig
from dl2.io import to_json
from dl2.rl.config import NetworkConfig
from dl2.schedulers.registry import check_placer

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

    def __post_init__(self) -> None:
        check_placer("placer", self.placer)
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
        fields = {name: data[name] for name in ("observation", "network", "mode", "placer")}
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
) -> Path:
    weights = (
        {"policy.pt": policy_state} if value_state is None else {"policy.pt": policy_state, "value.pt": value_state}
    )
    document = {**config.to_json_dict(), "metadata": metadata or {}}
    return write_model_dir(directory, weights, document, card, overwrite=overwrite)


def write_model_dir(
    directory: Path,
    weights: dict[str, dict[str, Any]],
    document: dict[str, Any],
    card: str = "",
    files: dict[str, bytes] | None = None,
    overwrite: bool = False,
) -> Path:
    """A model folder: each state dict of `weights` under its file name, `document` as `config.json`, the card
    and any other `files`, written under a temporary name and renamed into place (see the module docstring)."""
    import torch

    directory = Path(directory)
    if directory.exists() and not overwrite:
        raise FileExistsError(f"{directory} exists; choose another folder or allow overwriting")
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}."))
    try:
        for name, state in weights.items():
            torch.save(state, staging / name)
        (staging / "config.json").write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
        if card:
            (staging / "MODEL_CARD.md").write_text(card)
        for name, content in (files or {}).items():
            (staging / name).write_bytes(content)
        staging.chmod(0o755)
        if directory.exists():
            backup = directory.with_name(directory.name + ".previous")
            if backup.exists():
                shutil.rmtree(backup)
            directory.rename(backup)
        staging.rename(directory)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return directory


def load_config(directory: Path) -> tuple[PolicyConfig, dict[str, Any]]:
    path = Path(directory) / "config.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(str(directory), "not a model folder (no config.json)") from None
    except json.JSONDecodeError as error:
        raise InputError(str(path), f"not valid JSON ({error.msg})") from None
    return PolicyConfig.from_json_dict(data, str(path)), dict(data.get("metadata", {}))


def load_state(directory: Path, name: str = "policy.pt") -> dict[str, Any]:
    import torch

    path = Path(directory) / name
    if not path.is_file():
        raise InputError(str(path), "missing")
    try:
        state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # a corrupt or foreign file: report it, never execute it
        raise InputError(str(path), f"cannot load weights ({type(error).__name__}: {error})") from None
    return state


def model_card(title: str, metadata: dict[str, Any]) -> str:
    """A model folder's card: its title and the facts of `config.json` (history aside) for people to read."""
    summary = {k: v for k, v in metadata.items() if k not in ("history", "initial_metadata")}
    facts = json.dumps(summary, indent=2, default=str)
    return f"# {title}\n\nWritten by `dl2`; `config.json` holds the same facts as JSON.\n\n```json\n{facts}\n```\n"
