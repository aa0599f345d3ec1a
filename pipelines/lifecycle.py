"""`python -m pipelines.lifecycle [--smoke]`: the whole model lifecycle on the embedded defaults (what `make demo`
runs), telling the user what it does at each step.

Full run (the default): set up DVC if this is a fresh clone (`dvc init` when `.dvc/` is missing, the local remote
`work/dvc-remote`), ingest and validate the shipped traces (`dvc repro validate`), then `dvc repro` (workloads,
warm-up, simulated feedback, fine-tuning, evaluation, ablations, report), `dvc push` (the ingested traces and the
models go to the local remote), register the fine-tuned model as `challenger` and run the promotion gate. It
prints the comparison table, the registry state and where to look. A second run finds everything up to date:
DVC skips every stage, registration finds the same model digest and the gate replays its recorded decision.

`--smoke` runs the same stages in-process with the smoke profile under `work/smoke/` (own MLflow store unless
`MLFLOW_TRACKING_URI` is set), leaving the repository's DVC state alone: about two minutes, for a quick check.
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from dl2.core import Dl2Error
from pipelines import params as params_module
from pipelines.params import Params
from pipelines.stage import Layout, StageFailed, StageResult, use_smoke_root
from pipelines.tracking import ROOT

REMOTE = "local"
REMOTE_DIR = "work/dvc-remote"
"""The local DVC remote, relative to the repository (ignored by git with the rest of work/)."""
STAGES = ("ingest", "validate", "workloads", "warmup", "feedback", "finetune", "evaluate", "ablate", "report")
"""In-process order of the smoke run (the same as dvc.yaml's)."""


def shown(path: Path) -> str:
    """A path as the user should type it from the repository root."""
    return Layout().relative(path)


def say(text: str) -> None:
    print(text, flush=True)


def environment() -> dict[str, str]:
    """The environment of DVC's stage commands: this interpreter's folder first on PATH, so `python -m
    pipelines.<stage>` in dvc.yaml runs with the project's packages even when the venv is not activated."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.setdefault("GX_ANALYTICS_ENABLED", "false")
    env.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
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


def step(number: int, total: int, title: str) -> float:
    say(f"\n== {number}/{total} {title} ==")
    return time.perf_counter()


def registry_lines() -> list[str]:
    """Versions of dl2-policy and their aliases."""
    from pipelines import registry

    versions = registry.list_versions()
    if not versions:
        return ["  (no registered versions)"]
    return [f"  v{v.version}  aliases: {', '.join(v.aliases) or '-'}  digest {v.digest[:12]}" for v in versions]


def register_and_promote(params: Params, layout: Layout, number: int, total: int) -> None:
    """Register the fine-tuned model as challenger, then the gate (the other pipelines' stage functions)."""
    from pipelines import promote, register

    step(number, total, "Register the fine-tuned model as challenger (MLflow registry)")
    say(register.run(params, layout).line())
    step(number + 1, total, "Promotion gate: challenger vs champion and the best heuristic on held-out workloads")
    result = promote.run(params, layout)
    line = promote.outcome_line(result) if hasattr(promote, "outcome_line") else result.line()
    say(line)


def store_uri() -> str:
    """The MLflow store as `mlflow ui` takes it (read before any stage changes the environment)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{shown(_store())}/mlflow.db"


def finish(layout: Layout, started: float, smoke: bool, store: str) -> None:
    summary = layout.reports / "summary.md"
    say("\n== Comparison ==")
    text = summary.read_text() if summary.is_file() else f"(no {summary})"
    say("\n".join(line for line in text.splitlines() if not line.startswith("<!--")))
    say("Registry (dl2-policy):")
    for line in registry_lines():
        say(line)
    say("\nWhere to look:")
    say(f"  mlflow ui --backend-store-uri {store}     # runs, ablation child runs, the registry")
    if not smoke:
        say("  dvc metrics show; dvc plots show            # JCT tables; learning curves and JCT CDFs (dvc_plots/)")
        say("  dvc exp run -S warmup.epochs=3; dvc exp show  # an experiment with other parameters")
    say(f"  {shown(summary)}, {shown(layout.reports / 'metrics.json')}, Data Docs: {shown(layout.gx_dir)}")
    say(f"\nlifecycle finished in {time.perf_counter() - started:.0f} s")


def _store() -> Path:
    from pipelines.tracking import store_dir

    return store_dir()


def full(params: Params) -> None:
    started, total = time.perf_counter(), 6
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    layout, store = Layout(), store_uri()
    step(1, total, "DVC: repository and local remote")
    say("  " + ("; ".join(ensure_dvc()) or "already set up") + f" (remote {REMOTE_DIR})")
    clock = step(2, total, "Ingest and validate the shipped traces (dvc repro validate: Great Expectations)")
    dvc("repro", "validate")
    say(f"  done in {time.perf_counter() - clock:.0f} s; reports in reports/validation/, Data Docs in work/gx/")
    clock = step(3, total, "Experiment: workloads, warm-up, feedback, fine-tune, evaluate, ablate, report (dvc repro)")
    dvc("repro")
    say(f"  dvc repro done in {time.perf_counter() - clock:.0f} s")
    dvc("push", "-q")
    say(f"  data and models pushed to the DVC remote {REMOTE_DIR}")
    say(dvc("metrics", "show", "--precision", "4", capture=True).rstrip())
    step(4, total, "Versions")
    say("  dvc.lock records every input and output hash; MLflow runs carry git commit and data version")
    register_and_promote(params, layout, 5, total)
    finish(layout, started, smoke=False, store=store)


def smoke(params: Params) -> None:
    started = time.perf_counter()
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    layout = Layout(use_smoke_root())
    store = store_uri()
    total = len(STAGES) + 2
    for number, name in enumerate(STAGES, start=1):
        clock = step(number, total, f"{name} (smoke profile, in {shown(layout.root)}/)")
        module = importlib.import_module(f"pipelines.{name}")
        result: StageResult = module.run(params, layout)
        say(f"  {result.line()} [{time.perf_counter() - clock:.1f} s]")
    register_and_promote(params, layout, total - 1, total)
    finish(layout, started, smoke=True, store=store)


def cli(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.lifecycle", description=__doc__.split("\n\n")[0])
    params_module.add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        if not args.smoke and (args.overrides or args.params):
            raise params_module.ParamsError(
                "the full run reads params.yaml through DVC; change it there or run `dvc exp run -S key=value`"
            )
        params = params_module.from_args(args)
        (smoke if args.smoke else full)(params)
    except StageFailed as failure:
        print(str(failure), file=sys.stderr)
        return 1
    except Dl2Error as error:
        print(f"lifecycle: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(cli())
