"""Writing results: one JSON form of anything dl2 reports, and files that appear whole or not at all.

Readers (DVC, jq, browsers, a controller that crashes mid-write) never see half a file: everything is written
next to its destination and renamed into place.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def to_json(value: Any) -> Any:
    """`value` as plain JSON data: dataclasses and mappings as objects (string keys), sequences as lists, enums
    as their values, NumPy scalars as numbers, NaN and infinities as null (JSON has no such numbers, and other
    tools reject the `NaN` Python writes by default), anything else as its string."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, enum.Enum):
        return to_json(value.value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: to_json(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(key): to_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_json(item) for item in value]
    if hasattr(value, "item") and callable(value.item):  # a NumPy scalar
        return to_json(value.item())
    return str(value)


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` next to `path` and rename it into place (an ordinary file, the umask's permissions)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(temporary, 0o666 & ~umask)  # mkstemp makes it private; the result is an ordinary file
    try:
        with os.fdopen(handle, "w") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    """`data` as indented JSON (`to_json`), written atomically."""
    write_text_atomic(path, json.dumps(to_json(data), indent=2, sort_keys=True, allow_nan=False) + "\n")


def print_json(data: Any) -> None:
    """`data` as one line of JSON on stdout (what scripts parse)."""
    json.dump(to_json(data), sys.stdout, sort_keys=True, allow_nan=False)
    sys.stdout.write("\n")
