"""Options and helpers shared by the `dl2` subcommands."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from dl2.core import Dl2Error, InputError, Workload
from dl2.schedulers.placement import Placer
from dl2.schedulers.registry import COMPAT_SCHEDULERS, PLACERS, SCHEDULERS, make_scheduler
from dl2.sim.config import Mode, RescaleCost, RescaleKind, SimConfig
from dl2.sim.run import SchedulerBuilder


class UsageError(Dl2Error):
    """A command-line value that makes no sense (reported as one line, exit status 2)."""


def add_workload_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workload",
        "-w",
        required=True,
        metavar="NAME_OR_FILE",
        help="a workload name (see `dl2 workloads`), a CSV in the common trace schema, or a JSON reference file",
    )


def add_sim_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mode", choices=[m.value for m in Mode], default=Mode.REALISTIC.value, help="simulator fidelity"
    )
    parser.add_argument(
        "--placer",
        default=None,
        help=f"realistic-mode placement: {', '.join(sorted(PLACERS))} or a Harmony placer folder (models/harmony-...); "
        "default: load-balance for heuristics, a trained policy's own placer for a model folder",
    )
    parser.add_argument("--slot-s", type=float, default=None, help="scheduling interval (default: the workload's)")
    parser.add_argument(
        "--rescale",
        choices=[k.value for k in RescaleKind],
        default=None,
        help="rescaling cost (realistic default: hot)",
    )
    parser.add_argument("--speed-noise", type=float, default=None, help="per-slot speed noise e: x(1+e U(-1,1))")
    parser.add_argument("--epoch-error", type=float, default=None, help="declared-epoch error e (DL2 §6.4)")
    parser.add_argument("--no-interference", action="store_true", help="turn co-location interference off")


def check_seed(seed: int) -> int:
    if seed < 0:
        raise UsageError(f"seeds must be non-negative integers, got {seed}")
    return seed


def console() -> Any:
    """A rich console; wide when stdout is not a terminal, so piped tables are not squeezed to 80 columns."""
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 200)


def sim_config(args: argparse.Namespace, seed: int) -> SimConfig:
    check_seed(seed)
    mode = Mode(args.mode)
    config = SimConfig.for_mode(mode, seed)
    overrides: dict[str, Any] = {}
    if args.slot_s is not None:
        if not (math.isfinite(args.slot_s) and args.slot_s > 0):
            raise UsageError(f"--slot-s must be a positive number of seconds, got {args.slot_s}")
        overrides["slot_s"] = args.slot_s
    if mode is Mode.COMPAT:
        extra = [
            flag
            for flag, value in (
                ("--rescale", args.rescale),
                ("--speed-noise", args.speed_noise),
                ("--epoch-error", args.epoch_error),
            )
            if value is not None
        ]
        if extra or args.no_interference:
            raise UsageError(f"{', '.join(extra) or '--no-interference'} only apply to --mode realistic")
    else:
        if args.rescale is not None:
            overrides["rescale"] = RescaleCost(kind=RescaleKind(args.rescale))
        for name in ("speed_noise", "epoch_error"):
            value = getattr(args, name)
            if value is not None:
                if not 0 <= value < 1:
                    raise UsageError(f"--{name.replace('_', '-')} must be in [0, 1), got {value}")
                overrides[name] = value
        if args.no_interference:
            overrides["interference"] = False
    return replace(config, **overrides)


def scheduler_builder(
    name: str, placer: str | None, mode: Mode, greedy: bool = True, seed: int = 0
) -> SchedulerBuilder:
    """A builder for a heuristic by name or a trained policy by model folder, placing with `placer` (a name or a
    Harmony placer folder; None: the default). Checked now, so a typo fails before any work."""
    from dl2.rl.model_io import is_model_dir

    make_placer = placer_factory(placer)
    if is_model_dir(name):
        from dl2.rl.learned import LearnedScheduler

        LearnedScheduler.from_dir(name)  # fail now on a broken model, not after loading workloads
        return lambda speed, compat: LearnedScheduler.from_dir(
            name, greedy=greedy, seed=seed, compat=compat, placer=make_placer() if make_placer else None
        )
    if name not in SCHEDULERS:
        raise UsageError(f"unknown scheduler '{name}'; known: {', '.join(SCHEDULERS)}, or a model folder")
    if mode is Mode.COMPAT and name not in COMPAT_SCHEDULERS:
        raise UsageError(
            f"scheduler '{name}' has no compatibility-mode version; use one of {', '.join(COMPAT_SCHEDULERS)}"
        )
    return lambda speed, compat: make_scheduler(name, speed, compat, make_placer() if make_placer else "load-balance")


def placer_factory(name: str | None) -> Callable[[], Placer] | None:
    """Fresh placers of a name or a Harmony placer folder (loaded once); None for None."""
    if name is None:
        return None
    if name in PLACERS:
        return PLACERS[name]
    from dl2.placement.model_files import folder_kind

    kind = folder_kind(name)
    if kind == "placer":
        from dl2.placement.policy import HarmonyPlacer

        loaded = HarmonyPlacer.from_dir(name)
        return lambda: HarmonyPlacer(loaded.policy, loaded.config, name=loaded.name)
    if kind is not None:
        raise UsageError(f"{name} is a Harmony {kind} folder, not a placer")
    raise UsageError(f"unknown placer '{name}'; known: {', '.join(sorted(PLACERS))}, or a Harmony placer folder")


def load(name_or_path: str, seed: int) -> tuple[Workload, ...]:
    from dl2.workload.registry import load_workloads

    return load_workloads(name_or_path, seed=seed)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON next to `path` and rename it into place, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(temporary, 0o666 & ~umask)  # mkstemp makes it private; the result is an ordinary file
    try:
        with os.fdopen(handle, "w") as stream:
            json.dump(strict_json(data), stream, indent=2, sort_keys=True, allow_nan=False)
            stream.write("\n")
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def strict_json(data: Any) -> Any:
    """`data` with every NaN or infinite float replaced by None: JSON has no such numbers, and other tools'
    parsers (DVC, jq, browsers) reject the `NaN`/`Infinity` that Python writes by default."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: strict_json(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [strict_json(value) for value in data]
    return data


def print_json(data: Any) -> None:
    json.dump(strict_json(data), sys.stdout, sort_keys=True, allow_nan=False)
    sys.stdout.write("\n")


__all__ = ["InputError", "UsageError"]
