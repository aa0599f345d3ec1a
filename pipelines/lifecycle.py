"""`python -m pipelines.lifecycle [--smoke]`: the whole model lifecycle on the embedded defaults (what `make demo`
runs), telling the user what it does at each step.

1. DVC: `dvc init` on a fresh clone without `.dvc/`, and the local remote `work/dvc-remote`.
2. `dvc repro`: ingest and validate the traces (Great Expectations), choose the workloads, warm up, simulate
   cluster feedback, fine-tune, evaluate, ablate, report, and the heuristics on a week of Philly. DVC alone
   decides what is stale: a second run skips every stage whose code, parameters and inputs are unchanged.
3. `dvc push`: traces, models and feedback to the remote.
4. Register the fine-tuned model as `challenger` (its evaluation and ablation as metrics of its logged model).
5. The promotion gate against the champion, or the incumbent scheduler when there is none; a promoted model is
   confirmed by a separate process that loads `models:/dl2-policy@champion`.
6. The final table (champion, incumbent, every heuristic) and where to look.

`--smoke` runs the same in a sandbox copy of the repository (`work/smoke/repo`, its own DVC state and MLflow
store) with the smoke profile: about two minutes, and this checkout is not touched.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from dl2.core import Dl2Error
from pipelines import params as params_module
from pipelines.params import Params
from pipelines.stage import Layout, StageFailed
from pipelines.tracking import ROOT

REMOTE = "local"
REMOTE_DIR = "work/dvc-remote"
"""The local DVC remote, relative to the repository (ignored by git with the rest of work/)."""
SMOKE_ROOT = ROOT / "work" / "smoke" / "repo"
STEPS = 6


def say(text: str) -> None:
    print(text, flush=True)


def environment() -> dict[str, str]:
    """The environment of DVC's stage commands: this interpreter's folder first on PATH, so `python -m
    pipelines.<stage>` in dvc.yaml runs with the project's packages even when the venv is not activated."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.setdefault("GX_ANALYTICS_ENABLED", "false")
    env.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    env.setdefault("DVC_NO_ANALYTICS", "1")
    return env


def dvc(*arguments: str, capture: bool = False) -> str:
    """Run `dvc` in the repository; its output streams to the terminal unless captured. Failure: StageFailed."""
    command = [sys.executable, "-m", "dvc", *arguments]
    done = subprocess.run(command, cwd=ROOT, env=environment(), text=True, capture_output=capture, check=False)
    if done.returncode != 0:
        detail = (done.stderr or done.stdout or "").strip().splitlines()[-1:] if capture else []
        raise StageFailed(f"lifecycle: `dvc {' '.join(arguments)}` failed (exit {done.returncode}) {' '.join(detail)}")
    return done.stdout if capture else ""


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


def registry_lines() -> list[str]:
    """Versions of dl2-policy, their aliases and the figures their logged models carry."""
    from pipelines import registry

    versions = registry.list_versions()
    if not versions:
        return ["  (no registered versions)"]
    lines = []
    for v in versions:
        figures = registry.model_metrics(v.version)
        shown = ", ".join(f"{k} {figures[k]:.0f}" for k in ("test.avg_jct_s", "test.p99_jct_s") if k in figures)
        lines.append(f"  v{v.version}  aliases: {', '.join(v.aliases) or '-'}  {shown or 'no evaluation'}")
    return lines


def gate(params: Params, layout: Layout) -> None:
    """Register the fine-tuned model as challenger, then the promotion gate, with its table."""
    from pipelines import promote, register

    step(4, "Register the fine-tuned model as challenger (MLflow registry, metrics on its logged model)")
    result = register.run(params, layout)
    created = "new version" if result.summary["created"] else "already registered"
    say(f"  dl2-policy v{result.summary['version']} ({created}, {result.summary['metrics']} metrics)")
    step(5, "Promotion gate: the challenger against what it would replace, on the held-out workloads")
    try:
        outcome = promote.run(params, layout)
    finally:
        decision = layout.reports / "promotion.json"
        if decision.is_file() and "scores" in (document := json.loads(decision.read_text())):
            say("\n".join(promote.report_lines(document)))
    say(promote.outcome_line(outcome))


def store_uri() -> str:
    """The MLflow store as `mlflow ui` takes it (from the repository)."""
    from pipelines.tracking import store_dir

    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Layout().relative(store_dir())}/mlflow.db"


def finish(layout: Layout, started: float, store: str) -> None:
    step(6, "Where things stand")
    say("Registry (dl2-policy):")
    for line in registry_lines():
        say(line)
    say("\nWhere to look:")
    say(f"  mlflow ui --backend-store-uri {store}   # runs, ablation child runs, datasets, the registry")
    say("  dvc metrics show; dvc plots show            # JCT tables; learning curves and JCT CDFs (dvc_plots/)")
    say("  dvc exp run -S warmup.epochs=3; dvc exp show  # an experiment with other parameters")
    say(f"  {layout.relative(layout.reports / 'summary.md')}, {layout.relative(layout.reports / 'promotion.json')}")
    say(f"  Data Docs: {layout.relative(layout.gx_dir)}; the heuristics on Philly: reports/philly/compare.png")
    say(f"\nlifecycle finished in {time.perf_counter() - started:.0f} s")


def full(params: Params) -> None:
    started = time.perf_counter()
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    layout, store = Layout(ROOT), store_uri()  # before MLflow, which exports the URI it is pointed at
    step(1, "DVC: repository and local remote")
    say("  " + ("; ".join(ensure_dvc()) or "already set up") + f" (remote {REMOTE_DIR})")
    clock = step(2, "dvc repro: validate traces, workloads, warm-up, feedback, fine-tune, evaluate, ablate, report")
    dvc("repro")
    say(f"  dvc repro done in {time.perf_counter() - clock:.0f} s")
    step(3, "dvc push: data, models and feedback to the remote")
    dvc("push", "-q")
    say(f"  pushed to {REMOTE_DIR}; dvc.lock records every input and output hash")
    say(dvc("metrics", "show", "--precision", "4", capture=True).rstrip())
    gate(params, layout)
    finish(layout, started, store)


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
    try:
        if args.smoke:
            return smoke()
        full(params_module.load())
    except StageFailed as failure:
        print(str(failure), file=sys.stderr)
        return 1
    except Dl2Error as error:
        print(f"lifecycle: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(cli())
