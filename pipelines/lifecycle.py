"""`python -m pipelines.lifecycle [--smoke]`: the whole model lifecycle on the embedded defaults (what `make demo`
runs), telling the user what it does at each step.

1. DVC: `dvc init` on a fresh clone without `.dvc/`, and the local remote `work/dvc-remote`.
2. `dvc repro report`: ingest and validate the traces (Great Expectations), choose the workloads, warm up,
   simulate cluster feedback, fine-tune, learn from collected cluster records (`online`), evaluate, ablate,
   report. DVC alone decides what is stale: a second run skips every stage whose code, parameters and inputs
   are unchanged. (`dvc repro` alone also runs the heuristics on a week of Philly.)
3. `dvc push`: traces, models and feedback to the remote.
4. Register the fine-tuned model as `challenger` (its evaluation and ablation as metrics of its logged model).
5. The promotion gate against the champion, or the incumbent scheduler when there is none; a promoted model is
   confirmed by a separate process that loads `models:/dl2-policy@champion`.
6. The closed loop on a local Kubernetes cluster (`pipelines.cluster_loop`): the champion in shadow mode on a
   Philly slice (`dl2 serve` records every decision), a fine-tune on those records, the gate (confirmed by the
   controller's SchedulerPolicy handshake), then the champion in active mode; its JCTs next to `dl2 simulate`'s
   and the incumbent's.
7. The registry and where to look.

`--smoke` runs the same in a sandbox copy of the repository (`work/smoke/repo`, its own DVC state and MLflow
store) with the smoke profile: about two minutes, and this checkout is not touched.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from pipelines import cluster_loop
from pipelines import params as params_module
from pipelines.params import Params
from pipelines.stage import Layout, exit_status
from pipelines.steps import (
    TARGETS,
    dvc,
    finetune_line,
    gate,
    harmony_line,
    learn_from_cluster,
    online_line,
    register_challenger,
    say,
)
from pipelines.tracking import ROOT

REMOTE = "local"
REMOTE_DIR = "work/dvc-remote"
"""The local DVC remote, relative to the repository (ignored by git with the rest of work/)."""
SMOKE_ROOT = ROOT / "work" / "smoke" / "repo"
STEPS = 7


def ensure_dvc(root: Path = ROOT) -> list[str]:
    """Initialise DVC and its local remote where missing (idempotent); returns what was done."""
    done = []
    if not (root / ".dvc" / "config").is_file():
        dvc("init", *(() if (root / ".git").exists() else ("--no-scm",)), "-q")
        dvc("config", "core.analytics", "false")
        done.append("dvc init")
    if REMOTE not in dvc("remote", "list", capture=True).split():
        dvc("remote", "add", "-d", REMOTE, REMOTE_DIR)  # DVC stores it relative to .dvc/
        done.append(f"remote '{REMOTE}' -> {REMOTE_DIR}")
    (root / REMOTE_DIR).mkdir(parents=True, exist_ok=True)
    return done


def step(number: int, title: str) -> float:
    say(f"\n== {number}/{STEPS} {title} ==")
    return time.perf_counter()


REGISTRY_FIGURES = {
    "test.avg_jct_s": "test avg",
    "test.p99_jct_s": "p99",
    "gate.cluster_twin.vs_champion": "in the cluster's twin vs the champion",
    "cluster.shadow_avg_jct_h": "cluster: shadow",
    "cluster.active_avg_jct_h": "active",
    "cluster.simulated_avg_jct_h": "simulated",
    "cluster.asked_sizes_avg_jct_h": "asked sizes",
}
"""The figures of each version's logged model the last step shows (test: the held-out workloads; cluster: the
loop's slice), in this order."""


def registry_lines(mode: str) -> list[str]:
    """Versions of dl2-policy, their aliases and the figures their logged models carry, in the report unit."""
    from dl2.sim.metrics import report_unit
    from pipelines import registry

    versions = registry.list_versions()
    if not versions:
        return ["  (no registered versions)"]
    scale, unit = report_unit(mode)
    lines = []
    for v in versions:
        figures = registry.model_metrics(v.version)
        shown = ", ".join(
            f"{label} {figures[key] / scale:.2f} {unit}"
            if key.endswith("_s")
            else f"{label} {figures[key]:.2f} h"
            if key.endswith("_h")
            else f"{label} {figures[key]:+.1%}"
            for key, label in REGISTRY_FIGURES.items()
            if key in figures
        )
        lines.append(f"  v{v.version}  aliases: {', '.join(v.aliases) or '-'}  {shown or 'no evaluation'}")
    return lines


def store_uri() -> str:
    """The MLflow store as `mlflow ui` takes it (from the repository)."""
    from pipelines.tracking import store_dir

    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Layout().relative(store_dir())}/mlflow.db"


def finish(layout: Layout, started: float, store: str, mode: str) -> None:
    step(7, "Where things stand")
    say("Registry (dl2-policy):")
    for line in registry_lines(mode):
        say(line)
    say("\nWhere to look:")
    say(f"  mlflow ui --backend-store-uri {store}   # runs, ablation child runs, datasets, the registry")
    say("  dvc metrics show; dvc plots show            # JCT tables; learning curves and JCT CDFs (dvc_plots/)")
    say("  dvc exp run -S warmup.epochs=3; dvc exp show  # an experiment with other parameters")
    say(f"  {layout.relative(layout.reports / 'summary.md')}, {layout.relative(layout.reports / 'promotion.json')}")
    say(f"  Data Docs: {layout.relative(layout.gx_dir)}; the heuristics on a Philly week: dvc repro philly")
    say(f"\nlifecycle finished in {time.perf_counter() - started:.0f} s")


def full(params: Params) -> None:
    started = time.perf_counter()
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    layout, store = Layout(ROOT), store_uri()  # before MLflow, which exports the URI it is pointed at
    step(1, "DVC: repository and local remote")
    say("  " + ("; ".join(ensure_dvc()) or "already set up") + f" (remote {REMOTE_DIR})")
    clock = step(2, "dvc repro: traces, workloads, warm-up, feedback, fine-tune, online, harmony, evaluate, ablate")
    dvc("repro", *TARGETS)
    say(f"  dvc repro done in {time.perf_counter() - clock:.0f} s")
    step(3, "dvc push: data, models and feedback to the remote")
    dvc("push", "-q")
    say(f"  pushed to {REMOTE_DIR}; dvc.lock records every input and output hash")
    say(dvc("metrics", "show", "--precision", "4", capture=True).rstrip())
    say(finetune_line(layout, params.workloads.mode))
    say(online_line(layout, params.workloads.mode))
    say(harmony_line(layout))
    step(4, "Register the fine-tuned model as challenger (MLflow registry, metrics on its logged model)")
    register_challenger(params, layout)
    step(5, "Promotion gate: the challenger against what it would replace, on the held-out workloads")
    gate(params, layout)
    step(6, "The loop on a local Kubernetes cluster: shadow, learn from its records, gate, active")
    cluster_loop.run(params, layout, learn_from_cluster(params, layout))
    finish(layout, started, store, params.workloads.mode)


def smoke() -> int:
    """The same lifecycle in a sandbox copy with the smoke profile (its own process: its code, its store)."""
    from pipelines import sandbox

    say(f"smoke run in a sandbox copy of the repository: {Layout(ROOT).relative(SMOKE_ROOT)}")
    root = sandbox.make(SMOKE_ROOT)
    command = [sys.executable, "-m", "pipelines.lifecycle"]
    return subprocess.run(command, cwd=root, env=sandbox.environment(root), check=False).returncode


def cli(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.lifecycle", description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="the smoke profile, in a sandbox copy (work/smoke)")
    args = parser.parse_args(argv)
    cluster_loop.exit_on_sigterm()
    return exit_status("lifecycle", smoke if args.smoke else lambda: full(params_module.load()))


if __name__ == "__main__":
    raise SystemExit(cli())
