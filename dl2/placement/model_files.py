"""Harmony's model folders: the speed model (`speed.pt`) and the placer (`policy.pt`, and `critic.pt` for further
training), each with `config.json` and a model card. Weights are state dicts loaded with `weights_only=True`;
folders are written atomically by `dl2.nn.state_io.write_model_dir`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dl2.core import InputError

KINDS = {"speed-model": "speed.pt", "placer": "policy.pt"}
"""What a folder holds, by the weights file that identifies it."""


def folder_kind(path: str | Path) -> str | None:
    """'speed-model' or 'placer' for a Harmony model folder, None for anything else."""
    directory = Path(path)
    if not (directory / "config.json").is_file():
        return None
    try:
        data = json.loads((directory / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    kind = data.get("kind") if isinstance(data, dict) else None
    return kind if kind in KINDS and (directory / KINDS[kind]).is_file() else None


def read_config(directory: Path, kind: str) -> dict[str, Any]:
    """The folder's `config.json`, checked to be of `kind`."""
    path = directory / "config.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(str(directory), f"not a {kind} folder (no config.json)") from None
    except json.JSONDecodeError as error:
        raise InputError(str(path), f"not valid JSON ({error.msg})") from None
    if not isinstance(data, dict) or data.get("kind") != kind:
        found = data.get("kind") if isinstance(data, dict) else None
        raise InputError(str(path), f"not a {kind} folder (kind {found!r})", field="kind")
    return data
