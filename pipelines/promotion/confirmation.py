"""The deployment's confirmation: does a scheduler run the deployed version?

Until a controller answers (`dl2.kube.promotion.confirm_hook` does in the cluster loop), a separate process loads
`models:/dl2-policy@champion` exactly as a scheduler would (download, then `dl2.rl.lookahead.load_policy`) and
simulates a few jobs of the first test workload, within a timeout.

    python -m pipelines.promotion.confirmation VERSION WORKLOAD SEED MODE   # what `confirm` runs
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pipelines import registry, tracking
from pipelines.registry import CHAMPION, NAME
from pipelines.stage import StageFailed

CONFIRM_TIMEOUT_S = 300.0
"""How long the confirmation check may take (it loads MLflow and the model, then simulates a few jobs)."""
CONFIRM_JOBS = 10
"""Jobs of the first test workload that the confirmation check simulates."""

Confirm = Callable[[int, Mapping[str, Any], float], tuple[bool, str]]
"""(version, the gate's settings, timeout_s) -> (confirmed, detail): does the scheduler run the deployed version?"""


def confirm(version: int, gate: Mapping[str, Any], timeout_s: float = CONFIRM_TIMEOUT_S) -> tuple[bool, str]:
    """Does a scheduler run the deployed version? (Without a cluster: a separate process loads
    `models:/dl2-policy@champion` as a scheduler would and simulates a few jobs of the first workload of the
    gate's test set, `gate` as `pipelines.promote.gate_settings` records it.) Returns (confirmed, detail)."""
    workload = [gate["test"], str(gate["test_seeds"][0]), gate["mode"]]
    command = [sys.executable, "-m", "pipelines.promotion.confirmation", str(version), *workload]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tracking.ROOT), os.environ.get("PYTHONPATH")])),
    }
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, cwd=tracking.ROOT, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return False, f"no confirmation within {timeout_s:g} s"
    seconds = time.monotonic() - started
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return False, f"check failed (exit {done.returncode}): {lines[-1] if lines else 'no output'}"
    return True, f"{done.stdout.strip().splitlines()[-1]} ({seconds:.1f} s)"


def check_deployed(version: int, source: str, seed: int, mode: str, jobs: int = CONFIRM_JOBS) -> str:
    """What the confirmation process runs: resolve `champion`, download it, load it and simulate `jobs` jobs."""
    from dl2.core import Workload
    from dl2.rl.learned import LearnedScheduler
    from dl2.rl.lookahead import load_policy
    from dl2.sim.config import Mode, SimConfig
    from dl2.sim.run import run_one
    from dl2.workload.source import workload

    deployed = registry.alias(CHAMPION)
    if deployed is None or deployed.version != version:
        found = "unset" if deployed is None else f"version {deployed.version}"
        raise StageFailed(f"{NAME}@{CHAMPION} is {found}, expected version {version}")
    with tempfile.TemporaryDirectory(prefix="dl2-confirm-") as scratch:
        folder = registry.download(deployed.version, Path(scratch) / f"{NAME}-v{deployed.version}")
        LearnedScheduler.from_dir(folder)  # fails on a broken model before any simulation
        test = workload(source, seed)
        short = Workload(f"{test.name}/first-{jobs}", test.cluster, test.jobs[:jobs], test.slot_s, test.source)
        result = run_one(
            short,
            lambda speed, compat: load_policy(folder, compat=compat),
            SimConfig.for_mode(Mode(mode), seed),
        )
    finished = sum(1 for _ in result.jobs)
    return f"confirmed {NAME} v{version}: {finished}/{short.num_jobs} jobs of {short.name} finished"


def cli(argv: Sequence[str] | None = None) -> int:
    """`VERSION WORKLOAD SEED MODE`: the check `confirm` runs in its own process; prints one line, exits 0 when the
    version is confirmed."""
    from dl2.core import Dl2Error

    version, source, seed, mode = list(sys.argv[1:] if argv is None else argv)
    try:
        print(check_deployed(int(version), source, int(seed), mode))
    except (Dl2Error, ValueError) as error:
        print(f"confirm: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(cli())
