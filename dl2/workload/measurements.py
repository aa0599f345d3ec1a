"""The DL2 authors' testbed speed measurements (`speed_measurements.txt`).

One Python tuple per line: (model, sync_mode, total_batch, num_ps, num_workers, [per-worker speed ...],
[per-PS CPU util ...], [per-worker CPU/step time ...]). The job's speed is the sum of the per-worker speeds.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from dl2.core import InputError
from dl2.paths import reference_dir
from dl2.workload.catalogue import CATALOGUE


@dataclass(frozen=True, slots=True)
class SpeedMeasurement:
    model: str
    num_ps: int
    num_workers: int
    speed: float
    """Sum of the per-worker speeds (0 for the authors' failed runs)."""


def parse_measurements(path: Path) -> tuple[SpeedMeasurement, ...]:
    """Read and validate the measurement file; errors name the line and field."""
    rows: list[SpeedMeasurement] = []
    lines = path.read_text().splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = ast.literal_eval(line)
        except (SyntaxError, ValueError) as error:
            raise InputError(str(path), f"not a Python tuple literal ({error})", row=number) from None
        if not isinstance(record, tuple) or len(record) < 6:
            raise InputError(str(path), "expected a tuple of at least 6 items", row=number)
        model, _mode, _batch, num_ps, num_workers, speeds = record[:6]
        if model not in CATALOGUE:
            raise InputError(str(path), f"unknown model '{model}'", row=number, field="model")
        for field, value in (("num_ps", num_ps), ("num_workers", num_workers)):
            if not isinstance(value, int) or value < 1:
                raise InputError(str(path), f"must be a positive integer, got {value!r}", row=number, field=field)
        if not isinstance(speeds, list) or len(speeds) != num_workers:
            raise InputError(str(path), "expected one speed per worker", row=number, field="speeds")
        rows.append(SpeedMeasurement(model, num_ps, num_workers, float(sum(speeds))))
    if not rows:
        raise InputError(str(path), "no measurements")
    return tuple(rows)


@cache
def load_measurements(path: Path | None = None) -> tuple[SpeedMeasurement, ...]:
    return parse_measurements(path or reference_dir() / "speed_measurements.txt")


def measurements_of(model: str, include_failed: bool) -> list[SpeedMeasurement]:
    """One model's rows; `include_failed=False` drops the nine zero-speed failed runs."""
    return [row for row in load_measurements() if row.model == model and (include_failed or row.speed > 0)]
