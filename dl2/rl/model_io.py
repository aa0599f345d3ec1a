"""Model folders: `policy.pt` (+ `value.pt`) state dicts, `config.json` and a `MODEL_CARD.md`.

Weights are loaded with `torch.load(weights_only=True)`: a model file can hold tensors only, never code.
A folder is written under a temporary name and renamed into place; an existing folder is never overwritten
unless asked, and then it is kept as `<name>.previous` first (a trained model is never lost).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dl2.core import InputError
from dl2.env.decision import action_count
from dl2.env.observation import ObservationConfig
from dl2.rl.network_config import NetworkConfig

FORMAT = "dl2-policy/1"


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """Everything needed to rebuild and run a policy."""

    observation: ObservationConfig = field(default_factory=ObservationConfig)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    mode: str = "compat"
    """Simulator mode the policy was trained for ('compat' or 'realistic')."""
    placer: str = "load-balance"
    """Placer of its targets in realistic mode."""

    @property
    def input_size(self) -> int:
        return self.observation.size

    @property
    def num_actions(self) -> int:
        return action_count(self.observation.window)

    def to_json_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["network"]["hidden"] = list(self.network.hidden)
        return {"format": FORMAT, **data, "input_size": self.input_size, "num_actions": self.num_actions}

    @classmethod
    def from_json_dict(cls, data: dict[str, Any], where: str = "config.json") -> PolicyConfig:
        if data.get("format") != FORMAT:
            raise InputError(
                where, f"not a dl2 policy (format {data.get('format')!r}, expected {FORMAT!r})", field="format"
            )
        try:
            return cls(
                observation=ObservationConfig(**data["observation"]),
                network=NetworkConfig(
                    hidden=tuple(int(h) for h in data["network"]["hidden"]),
                    kind=str(data["network"].get("kind", "per-job")),
                ),
                mode=str(data["mode"]),
                placer=str(data["placer"]),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise InputError(where, f"malformed policy configuration ({error})") from None


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
