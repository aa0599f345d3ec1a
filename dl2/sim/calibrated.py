"""A twin calibrated from a cluster's decision log: the world its records say the jobs run in.

`dl2.workload.calibration` fits per-type speed factors and an interference scale from a log's steady records
(split by demand, so a model the catalogue lacks, submitted under a catalogue label, gets its own); the world is
the catalogue's realistic speed model with those factors and the profiled interference with that scale. A
policy fine-tuned there (`dl2 train-rl --calibrate-from LOG`, `ActorCritic(world=...)`) learns the speeds the
cluster showed rather than the catalogue's, on the cluster's own jobs when its source is `records:LOG`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dl2.core import InputError
from dl2.core.log_format import read_log
from dl2.sim.run import World, catalogue_speed, interference_model
from dl2.workload.calibration import CalibratedSpeedModel, Calibration, calibrate


def calibrated_world(log: Path) -> tuple[World, Calibration]:
    """The world a decision log (a folder of segments or one .jsonl file) calibrates, and its calibration."""
    records = read_log(log)
    if not records:
        raise InputError(str(log), "the decision log has no records to calibrate from")
    catalogue = catalogue_speed()
    profiled = interference_model()
    calibration = calibrate(records, catalogue, profiled, by_demand=True)
    return World(CalibratedSpeedModel(catalogue, calibration), calibration.interference(profiled)), calibration


def calibration_summary(calibration: Calibration) -> dict[str, Any]:
    """What a model trained in the world records of it: each kept type's factors and errors, the interference."""
    return {
        "interference_scale": calibration.interference_scale,
        "co_located_records": calibration.co_located_records,
        "types_seen": len(calibration.seen),
        "types_kept": {
            "/".join(str(part) for part in key): {
                "factors": list(entry.factors),
                "records": entry.records,
                "jobs": entry.jobs,
                "held_out_error": entry.held_out_error,
                "catalogue_error": entry.catalogue_error,
            }
            for key, entry in sorted(calibration.types.items(), key=lambda item: str(item[0]))
        },
    }


def calibration_text(summary: dict[str, Any]) -> str:
    """What a calibration measured (`dl2.sim.calibrated.calibration_summary`): the steady records it had, the
    interference scale, and each recalibrated type's factors."""
    labels = {  # a type's label-wide calibration (the per-demand ones under it are finer versions of it)
        key.split("/")[0]: entry
        for key, entry in (summary.get("types_kept") or {}).items()
        if key.endswith("/0.0/0.0/0.0/0.0")
    }
    factors = "; ".join(
        f"{label} compute time x{entry['factors'][0]:.2f}, communication x{entry['factors'][1]:.2f}"
        for label, entry in labels.items()
    )
    scale = summary.get("interference_scale", 1.0)
    return (
        f"interference x{scale:.2f} the profiled ({summary.get('co_located_records', 0)} co-located records); "
        f"{len(labels)} job types recalibrated" + (f": {factors}" if factors else "")
    )
