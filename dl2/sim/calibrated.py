"""A twin calibrated from a cluster's decision log: the world its records say the jobs run in.

`dl2.workload.calibration` fits per-type speed factors and an interference scale from a log's steady records
(split by demand, so a model the catalogue lacks, submitted under a catalogue label, gets its own); the world is
the catalogue's realistic speed model with those factors (on a cluster of several accelerator types, with each job
type's fitted speedups per type, which the simulator plays through `dl2.workload.accelerated_speed`) and the
profiled interference with that scale. A policy fine-tuned there (`dl2 train-rl --calibrate-from LOG`,
`ActorCritic(world=...)`) learns the speeds the cluster showed rather than the catalogue's, on the cluster's own
jobs when its source is `records:LOG`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dl2.core import InputError
from dl2.core.log_format import read_log
from dl2.sim.run import World, catalogue_speed, interference_model
from dl2.workload.calibration import LABEL_WIDE, CalibratedSpeedModel, Calibration, calibrate


def calibrated_world(log: Path) -> tuple[World, Calibration]:
    """The world a decision log (a folder of segments or one .jsonl file) calibrates, and its calibration."""
    records = read_log(log)
    if not records:
        raise InputError(str(log), "the decision log has no records to calibrate from")
    calibration = calibrate(records, catalogue_speed(), interference_model(), by_demand=True)
    return world_of(calibration), calibration


def world_of(calibration: Calibration) -> World:
    """The catalogue's speeds and profiled interference with `calibration` on them."""
    profiled = interference_model()
    return World(CalibratedSpeedModel(catalogue_speed(), calibration), calibration.interference(profiled))


def calibration_summary(calibration: Calibration) -> dict[str, Any]:
    """What a model trained in the world records of it: each kept type's factors and errors (and, on a cluster of
    several accelerator types, its speedups per type and the records of each), the interference."""
    summary: dict[str, Any] = {
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
                "held_out": entry.held_out,
            }
            | (
                {"accelerator_speedups": entry.speedups, "accelerator_records": entry.accelerator_records}
                if entry.speedups
                else {}  # a homogeneous cluster's summary reads as before types
            )
            for key, entry in sorted(calibration.types.items(), key=lambda item: str(item[0]))
        },
    }
    if calibration.mixed_type_records:
        summary["mixed_type_records"] = calibration.mixed_type_records
    return summary


def calibration_text(summary: dict[str, Any]) -> str:
    """What a calibration measured (`dl2.sim.calibrated.calibration_summary`): the steady records it had, the
    interference scale, and each recalibrated type's factors: a label's own where it was kept (the per-demand
    ones under it are finer versions of it), else each of its demand signatures that was."""
    kept = summary.get("types_kept") or {}
    labels = {key.split("/")[0] for key in kept if key.endswith(LABEL_WIDE_SUFFIX)}
    said = {
        _type_name(key): entry
        for key, entry in kept.items()
        if key.endswith(LABEL_WIDE_SUFFIX) or key.split("/")[0] not in labels
    }
    factors = "; ".join(
        f"{name} compute time x{entry['factors'][0]:.2f}, communication x{entry['factors'][1]:.2f}"
        + _per_accelerator(entry)
        for name, entry in said.items()
    )
    scale = summary.get("interference_scale", 1.0)
    return (
        f"interference x{scale:.2f} the profiled ({summary.get('co_located_records', 0)} co-located records); "
        f"{len(said)} job types recalibrated" + (f": {factors}" if factors else "")
    )


def _per_accelerator(entry: dict[str, Any]) -> str:
    """A kept type's computation time on each accelerator type over the catalogue's there (factor / speedup);
    nothing where its records ran on one type."""
    speedups = entry.get("accelerator_speedups") or {}
    times = ", ".join(
        f"{'reference' if name == '' else name} x{entry['factors'][0] / speedups.get(name, 1.0):.2f}"
        for name in entry.get("accelerator_records", speedups)
    )
    return f" (compute time on {times})" if speedups else ""


LABEL_WIDE_SUFFIX = "".join(f"/{part}" for part in LABEL_WIDE)
"""How a label's own key ends in `calibration_summary` (which joins a key's parts with '/')."""


def _type_name(key: str) -> str:
    """`vgg-16/0.0/0.0/0.0/0.0` -> `vgg-16`; a demand signature `vgg-16/1.0/4.0/24.0/4.0` -> `vgg-16 (1 GPU, 4
    CPU, 24 GB, PS 4 GB)`."""
    if key.endswith(LABEL_WIDE_SUFFIX):
        return key.split("/")[0]
    label, gpu, cpu, mem_gb, ps_mem_gb = key.split("/")
    return f"{label} ({float(gpu):g} GPU, {float(cpu):g} CPU, {float(mem_gb):g} GB, PS {float(ps_mem_gb):g} GB)"
