"""Model folders of state dicts: written atomically, read back as tensors only.

Weights are loaded with `torch.load(weights_only=True)`: a model file can hold tensors only, never code.
A folder is written under a temporary name and renamed into place; an existing folder is never overwritten
unless asked, and then it is kept as `<name>.previous` first (a trained model is never lost). The DL2 policy's
folders (`dl2.rl.model_io`) and Harmony's (`dl2.placement.model_files`) are both written and read here.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from dl2.core import InputError


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


def load_weights(path: Path) -> dict[str, Any]:
    """The state dict in the file at `path` (tensors only); InputError for a missing, corrupt or foreign file."""
    import torch

    if not path.is_file():
        raise InputError(str(path), "missing")
    try:
        state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # a corrupt or foreign file: report it, never execute it
        raise InputError(str(path), f"cannot load weights ({type(error).__name__}: {error})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise InputError(str(path), "expected a state dict of tensors")
    return state
