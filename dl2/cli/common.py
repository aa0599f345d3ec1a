"""Options and helpers shared by the `dl2` subcommands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dl2.core import Dl2Error, InputError, Workload
from dl2.schedulers.registry import PLACERS
from dl2.sim.config import SIM_KEYS, SimConfig
from dl2.sim.config import sim_config as build_sim_config

if TYPE_CHECKING:
    from dl2.truth.model import Truth


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
    """The simulator's settings (`dl2.sim.config.SIM_KEYS`: defaults and checks from `SimConfig`, shown for the
    realistic preset; compatibility mode fixes the realism knobs) and the realistic-mode placer (a heuristic's
    name or a Harmony placer folder)."""
    SIM_KEYS.add_arguments(parser, defaults=SIM_KEYS.values(SimConfig.realistic()), fill=("mode",))
    parser.add_argument(
        "--placer",
        default=None,
        type=placer_argument,
        help=f"realistic-mode placement: {', '.join(sorted(PLACERS))} or a Harmony placer folder (models/harmony-...); "
        "default: load-balance for heuristics, a trained policy's own placer for a model folder",
    )


def add_truth_option(parser: argparse.ArgumentParser) -> None:
    """`--truth`: play a cluster whose jobs depart from the catalogue (`dl2.truth`)."""
    from dl2.truth.scenarios import MIXED_SCENARIOS, SCENARIOS

    known = ", ".join([*SCENARIOS, *MIXED_SCENARIOS])
    parser.add_argument(
        "--truth",
        default=None,
        type=truth_argument,
        metavar="TRUTH",
        help=f"run the cluster on a truth unlike the catalogue the policies read: {known}, seed-N "
        "or drawn-N for one drawn from a seed (drawn-N: every departure; realistic mode; default: the catalogue)",
    )


def truth_argument(text: str) -> Truth:
    """A truth by name (argparse refuses anything else with one line)."""
    from dl2.config import ConfigError
    from dl2.truth.scenarios import truth_named

    try:
        return truth_named(text)
    except ConfigError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def placer_argument(text: str) -> str:
    """A placer's name or a folder (a Harmony placer, checked when loaded); anything else is refused by argparse."""
    if text in PLACERS or Path(text).is_dir():
        return text
    raise argparse.ArgumentTypeError(
        f"invalid choice: {text!r} (choose from {', '.join(sorted(PLACERS))}, or a Harmony placer folder)"
    )


def check_seed(seed: int) -> int:
    if not 0 <= seed < 2**63:
        raise UsageError(f"seeds must be integers from 0 to 2**63 - 1, got {seed}")
    return seed


def check_range(flag: str, value: float, low: float, high: float) -> None:
    """A numeric flag within [low, high] (NaN is outside every range)."""
    if not low <= value <= high:
        raise UsageError(f"{flag} must be from {low:g} to {high:g}, got {value:g}")


def check_out_folder(path: Path) -> None:
    """An output folder that can be written: absent, or a folder (a file there is refused, not replaced)."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {path} is a file; name a folder (it is created if missing)")


def console() -> Any:
    """A rich console; wide when stdout is not a terminal, so piped tables are not squeezed to 80 columns."""
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 200)


def sim_config(args: argparse.Namespace, seed: int) -> SimConfig:
    """The run's simulator configuration: the mode's preset with the flags given over it."""
    check_seed(seed)
    return build_sim_config(SIM_KEYS.from_args(args), seed, spelling=lambda key: key.flag)


def load(name_or_path: str, seed: int) -> tuple[Workload, ...]:
    from dl2.workload.registry import load_workloads

    return load_workloads(name_or_path, seed=seed)


__all__ = ["InputError", "UsageError"]
