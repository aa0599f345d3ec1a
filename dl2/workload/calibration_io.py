"""A calibration as a JSON file: what a model folder's `calibration.json` holds, so that the world a policy looks ahead
in travels with it from the twin that calibrated it to the controller that runs it.

    write_calibration(folder / CALIBRATION_FILE, calibration)
    calibration = read_calibration(folder / CALIBRATION_FILE)  # InputError naming the file and field if malformed

Every field of `Calibration` and `TypeCalibration` is kept, so a calibration read back is equal to the one written
and a speed model built on it plays the same floats.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from dl2.core import InputError
from dl2.io import write_text_atomic
from dl2.workload.accelerators import ACCELERATOR_TYPES
from dl2.workload.calibration import Calibration, TypeCalibration, TypeKey

CALIBRATION_FILE = "calibration.json"
FORMAT = "dl2-calibration/1"


def calibration_to_json(calibration: Calibration) -> dict[str, Any]:
    """The calibration as a JSON object (types in key order, and written with sorted keys, so the same calibration
    writes the same bytes)."""
    return {
        "format": FORMAT,
        "interference_scale": calibration.interference_scale,
        "co_located_records": calibration.co_located_records,
        "by_demand": calibration.by_demand,
        "mixed_type_records": calibration.mixed_type_records,
        "seen": [list(key) for key in sorted(calibration.seen)],
        "types": [
            {"key": list(key), **asdict(entry)}  # every field of `TypeCalibration`, as `calibration_from_json` reads
            for key, entry in sorted(calibration.types.items())
        ],
    }


def write_calibration(path: Path, calibration: Calibration) -> None:
    """Writes `path` whole or not at all."""
    write_text_atomic(path, calibration_bytes(calibration).decode())


def calibration_bytes(calibration: Calibration) -> bytes:
    """The file's content: what `write_calibration` writes, and a model folder holds (`save_model`'s `files`)."""
    return (json.dumps(calibration_to_json(calibration), indent=2, sort_keys=True, allow_nan=False) + "\n").encode()


def read_calibration(path: Path) -> Calibration:
    """The calibration `path` holds; `InputError` naming the file and the field for anything malformed."""
    where = str(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(where, f"not a readable JSON file: {error}") from None
    return calibration_from_json(data, where)


def calibration_from_json(data: Any, where: str) -> Calibration:
    if not isinstance(data, dict):
        raise InputError(where, "expected a JSON object")
    if data.get("format") != FORMAT:
        raise InputError(where, f"expected {FORMAT!r}, got {data.get('format')!r:.60}", field="format")
    types = _list(data, "types", where)
    calibrated: dict[TypeKey, TypeCalibration] = {}
    for index, item in enumerate(types):
        field = f"types[{index}]"
        if not isinstance(item, dict):
            raise InputError(where, "expected an object", field=field)
        key = _key(item.get("key"), where, f"{field}.key")
        if key in calibrated:
            raise InputError(where, f"type {list(key)} appears twice", field=f"{field}.key")
        factors = item.get("factors")
        if not isinstance(factors, list) or len(factors) != 4:
            raise InputError(where, "expected 4 positive numbers", field=f"{field}.factors")
        speedups = _mapping(item.get("speedups", {}), where, f"{field}.speedups", _positive)
        unknown = sorted(set(speedups) - set(ACCELERATOR_TYPES))
        if unknown:
            raise InputError(where, f"{unknown[0]!r:.60} is not an accelerator type", field=f"{field}.speedups")
        calibrated[key] = TypeCalibration(
            factors=(
                _positive(factors[0], where, f"{field}.factors[0]"),
                _positive(factors[1], where, f"{field}.factors[1]"),
                _positive(factors[2], where, f"{field}.factors[2]"),
                _positive(factors[3], where, f"{field}.factors[3]"),
            ),
            records=_count(item.get("records"), where, f"{field}.records"),
            jobs=_count(item.get("jobs"), where, f"{field}.jobs"),
            held_out_error=_optional_error(item.get("held_out_error"), where, f"{field}.held_out_error"),
            catalogue_error=_optional_error(item.get("catalogue_error"), where, f"{field}.catalogue_error"),
            held_out=_choice(item.get("held_out", ""), ("", "jobs", "later slots"), where, f"{field}.held_out"),
            speedups=speedups,
            accelerator_records={
                name: int(count)
                for name, count in _mapping(
                    item.get("accelerator_records", {}), where, f"{field}.accelerator_records", _count
                ).items()
            },
        )
    by_demand = data.get("by_demand")
    if not isinstance(by_demand, bool):
        raise InputError(where, "expected true or false", field="by_demand")
    return Calibration(
        types=calibrated,
        interference_scale=_positive(data.get("interference_scale"), where, "interference_scale", zero=True),
        co_located_records=_count(data.get("co_located_records"), where, "co_located_records"),
        by_demand=by_demand,
        seen=frozenset(_key(key, where, f"seen[{i}]") for i, key in enumerate(_list(data, "seen", where))),
        mixed_type_records=_count(data.get("mixed_type_records", 0), where, "mixed_type_records"),
    )


def _list(data: dict[str, Any], field: str, where: str) -> list[Any]:
    value = data.get(field)
    if not isinstance(value, list):
        raise InputError(where, "expected a list", field=field)
    return value


def _key(value: Any, where: str, field: str) -> TypeKey:
    """(label, worker GPUs, worker cores, worker memory, PS memory)."""
    if not (isinstance(value, list) and len(value) == 5 and isinstance(value[0], str) and value[0]):
        raise InputError(where, "expected [label, worker GPUs, cores, memory, PS memory]", field=field)
    demands = [_number(part, where, f"{field}[{i + 1}]") for i, part in enumerate(value[1:])]
    if any(part < 0 for part in demands):
        raise InputError(where, "a demand is never negative", field=field)
    return (value[0], demands[0], demands[1], demands[2], demands[3])


def _number(value: Any, where: str, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(where, f"expected a finite number, got {value!r:.60}", field=field)
    return float(value)


def _positive(value: Any, where: str, field: str, zero: bool = False) -> float:
    number = _number(value, where, field)
    if number < 0 or (number == 0 and not zero):
        raise InputError(
            where, f"expected a {'non-negative' if zero else 'positive'} number, got {value!r:.60}", field=field
        )
    return number


def _count(value: Any, where: str, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(where, f"expected a count (a whole number from 0), got {value!r:.60}", field=field)
    return value


def _optional_error(value: Any, where: str, field: str) -> float | None:
    return None if value is None else _positive(value, where, field, zero=True)


def _choice(value: Any, allowed: tuple[str, ...], where: str, field: str) -> str:
    if value not in allowed:
        raise InputError(where, f"expected one of {list(allowed)}, got {value!r:.60}", field=field)
    return str(value)


def _mapping(value: Any, where: str, field: str, check: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InputError(where, "expected an object", field=field)
    return {str(name): check(item, where, f"{field}.{name}") for name, item in value.items()}
