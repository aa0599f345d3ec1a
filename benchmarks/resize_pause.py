"""What a resize costs an elastic PyTorch job, measured: real torchrun elastic agents on loopback, resized 1 -> 2
-> 3 -> 1 workers.

Each agent is a separate process group, as each worker pod is: `torchrun --nnodes 1:3 --nproc-per-node 1` with a
c10d rendezvous on 127.0.0.1, training `examples/elastic_digits.py` (an MLP on scikit-learn's digits, DDP over
gloo, checkpoints through `dl2.report.elastic`). To scale up the harness starts one more agent (the operator
creating a pod); to scale down it sends SIGTERM to the newest agents' process groups (the operator deleting the
highest-index pods; the first agent hosts the rendezvous store, as worker 0 does under the training operator).

The pause of a resize runs from that action to the first training step completed at the new world size (the
workers log every step's wall-clock time). Its parts: until the restarted workers' processes began (the agents
notice, stop their workers, meet again at the rendezvous and spawn), and from there to the first step (Python,
torch and the data loaded, the process group, the checkpoint loaded, DDP's first step). Also: the checkpoint's
size, the time to save it (rank 0, fsynced) and to load it, and the steps lost (trained since the last
checkpoint, trained again after the resize; at most the checkpoint interval).

    .venv/bin/python benchmarks/resize_pause.py [--hidden 256 2048] [--every-steps 25] [--out resize_pause.json]

About 3 minutes on two busy cores at the defaults. `--keep DIR` keeps each run's agent logs and worker events.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import environment, print_table, write_json

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "elastic_digits.py"
TORCHRUN = Path(sys.executable).with_name("torchrun")
AGENT_ENVIRONMENT = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
"""One thread a worker (workers share the cores); the rendezvous store not shared with the workers' bootstrap,
without which an agent that joins a running job waits forever for the master address (torch 2.13: the old rank-0
agent does not publish it again for the new round), and the join fails after 60 s."""
WORLDS = (1, 2, 3, 1)
"""The world sizes in turn: each change is one resize."""


@dataclass
class Options:
    """The command line."""

    hidden: list[int]
    """Hidden widths, one run each (the checkpoint's size: 256 about 1 MB, 2048 about 52 MB with Adam's state)."""
    every_steps: int
    """Checkpoint interval in steps: the most steps a resize may lose."""
    steps_per_phase: int
    """Steps trained at each world size before the next resize (at least one checkpoint interval)."""
    last_call_s: int
    """The rendezvous's `last_call_timeout`: how long it waits for more agents once it has enough (torch: 30 s)."""
    keep_alive_s: int
    """Seconds between an agent's heartbeats to the rendezvous (`keep_alive_interval`; torch: 5)."""
    keep_alive_attempts: int
    """Heartbeats missed before the rendezvous drops an agent (`keep_alive_max_attempt`; torch: 3): a deleted
    pod's agent holds the next round this long."""
    monitor_interval_s: float
    """How often an agent checks its workers and the rendezvous (`--monitor-interval`)."""
    phase_timeout_s: float
    """Most seconds one phase may take before the run fails."""
    keep: Path | None
    out: str


@dataclass
class Run:
    """One run's agents and where their workers log."""

    directory: Path
    port: int
    options: Options
    hidden: int
    agents: list[subprocess.Popen[bytes]] = field(default_factory=list)
    offsets: dict[Path, int] = field(default_factory=dict)
    seen: list[dict[str, Any]] = field(default_factory=list)

    def start_agent(self) -> None:
        index = len(self.agents)
        command = [
            str(TORCHRUN),
            "--nnodes",
            "1:3",
            "--nproc-per-node",
            "1",
            "--max-restarts",
            "20",
            "--monitor-interval",
            str(self.options.monitor_interval_s),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            f"127.0.0.1:{self.port}",
            "--rdzv-id",
            "resize-pause",
            "--rdzv-conf",
            f"last_call_timeout={self.options.last_call_s},keep_alive_interval={self.options.keep_alive_s},"
            f"keep_alive_max_attempt={self.options.keep_alive_attempts},"
            # the first agent alone hosts the rendezvous store, as worker 0's pod does in a cluster (on loopback
            # every agent matches the endpoint and tries to; all but the first would fall back to a client)
            f"is_host={int(index == 0)}",
            str(SCRIPT),
            "--checkpoint-dir",
            str(self.directory / "checkpoints"),
            "--log-dir",
            str(self.directory / "events"),
            "--every-steps",
            str(self.options.every_steps),
            "--max-steps",
            "1000000",
            "--hidden",
            str(self.hidden),
        ]
        log = (self.directory / f"agent-{index}.log").open("wb")
        environ = {**os.environ, **AGENT_ENVIRONMENT}
        # a session of its own: the agent and its workers are one process group, as a pod's processes are
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=environ, start_new_session=True
        )
        log.close()
        self.agents.append(process)

    def stop_agents(self, processes: list[subprocess.Popen[bytes]], grace_s: float = 10.0) -> None:
        """SIGTERM to each agent's process group at once, SIGKILL after `grace_s` (as the kubelet deletes pods)."""
        for process in processes:
            if process.poll() is None:
                _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for process in processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            _signal_group(process, signal.SIGKILL)  # workers the agent left behind, if any
            process.wait()

    def stop_all(self) -> None:
        self.stop_agents(self.agents)

    def events(self) -> list[dict[str, Any]]:
        """Every worker's events so far, in time order (each file read on from where the last call stopped)."""
        for path in sorted((self.directory / "events").glob("worker-*.jsonl")):
            with path.open("rb") as handle:
                handle.seek(self.offsets.get(path, 0))
                text = handle.read()
            complete = text[: text.rfind(b"\n") + 1]  # a line still being written waits for the next call
            self.offsets[path] = self.offsets.get(path, 0) + len(complete)
            self.seen.extend(json.loads(line) for line in complete.splitlines() if line.strip())
        self.seen.sort(key=lambda event: event["t"])
        return self.seen

    def check_first_agent(self) -> None:
        first = self.agents[0]
        if first.poll() is not None:
            tail = (self.directory / "agent-0.log").read_text()[-3000:]
            raise RuntimeError(f"the first agent exited ({first.returncode}):\n{tail}")


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for_steps(run: Run, world: int, since_t: float, steps: int) -> list[dict[str, Any]]:
    """Poll the workers' events until `steps` steps were completed at `world` workers after `since_t`; the events."""
    deadline = time.monotonic() + run.options.phase_timeout_s
    while time.monotonic() < deadline:
        run.check_first_agent()
        events = run.events()
        done = [e for e in events if e["event"] == "step" and e["world"] == world and e["t"] > since_t]
        if len({e["step"] for e in done}) >= steps:
            return events
        time.sleep(0.2)
    raise TimeoutError(f"{steps} steps at world size {world} did not come in {run.options.phase_timeout_s} s")


def measure_resize(events: list[dict[str, Any]], old: int, new: int, action_t: float, since_t: float) -> dict[str, Any]:
    """One resize's pause, its parts and the steps it lost, from the workers' events."""
    after = [e for e in events if e["t"] > action_t and e["world"] == new]
    first_step_t = min(e["t"] for e in after if e["event"] == "step")
    starts = [e for e in after if e["event"] == "start"]
    resumes = [e for e in after if e["event"] == "resume" and e["t"] <= first_step_t]
    old_steps = [
        e["step"] for e in events if e["event"] == "step" and e["world"] == old and since_t < e["t"] < first_step_t
    ]
    resumed = max(e["step"] for e in resumes)
    workers_began = max(e["started"] for e in starts)
    loads = [e["load_s"] for e in resumes if e["load_s"] is not None]
    return {
        "resize": f"{old} -> {new}",
        "pause_s": first_step_t - action_t,
        "to_workers_started_s": workers_began - action_t,
        "workers_to_first_step_s": first_step_t - workers_began,
        "load_s": max(loads) if loads else None,
        "last_step_before": max(old_steps),
        "resumed_at_step": resumed,
        "steps_lost": max(old_steps) - resumed,
        "first_step_t": first_step_t,
    }


def one_run(options: Options, hidden: int, directory: Path) -> dict[str, Any]:
    """Start one agent, resize through `WORLDS`, stop; the resizes measured and the checkpoints' sizes and times."""
    directory.mkdir(parents=True, exist_ok=True)
    run = Run(directory, free_port(), options, hidden)
    resizes: list[dict[str, Any]] = []
    try:
        began = time.time()
        run.start_agent()
        events = wait_for_steps(run, WORLDS[0], began, options.steps_per_phase)
        since_t = began
        for old, new in itertools.pairwise(WORLDS):
            action_t = time.time()
            if new > old:
                for _ in range(new - old):
                    run.start_agent()
            else:
                run.stop_agents(run.agents[new:old])
            events = wait_for_steps(run, new, action_t, options.steps_per_phase)
            resize = measure_resize(events, old, new, action_t, since_t)
            since_t = resize.pop("first_step_t")
            resizes.append(resize)
    finally:
        run.stop_all()
    saves = [e for e in events if e["event"] == "save"]
    loads = [e["load_s"] for e in events if e["event"] == "resume" and e["load_s"] is not None]
    steps = [e for e in events if e["event"] == "step" and e["rank"] == 0]
    return {
        "hidden": hidden,
        "checkpoint_bytes": saves[-1]["bytes"],
        "save_s_median": statistics.median(e["save_s"] for e in saves),
        "load_s_median": statistics.median(loads),
        "saves": len(saves),
        "step_s_median": statistics.median(b["t"] - a["t"] for a, b in itertools.pairwise(steps)),
        "resizes": resizes,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, nargs="+", default=[256, 2048], help="hidden widths, a run each")
    parser.add_argument("--every-steps", type=int, default=25, help="checkpoint interval, steps")
    parser.add_argument("--steps-per-phase", type=int, default=60, help="steps at each world size")
    parser.add_argument("--last-call-s", type=int, default=1, help="rendezvous last_call_timeout, whole s (torch: 30)")
    parser.add_argument("--keep-alive-s", type=int, default=5, help="rendezvous keep_alive_interval (torch: 5)")
    parser.add_argument("--keep-alive-attempts", type=int, default=3, help="keep_alive_max_attempt (torch: 3)")
    parser.add_argument("--monitor-interval-s", type=float, default=0.5, help="torchrun --monitor-interval")
    parser.add_argument("--phase-timeout-s", type=float, default=120.0)
    parser.add_argument("--keep", type=Path, help="keep agent logs, worker events and checkpoints here")
    parser.add_argument("--out", default="resize_pause.json", help="file name under benchmarks/results/")
    options = Options(**vars(parser.parse_args(argv)))
    if options.steps_per_phase < options.every_steps:
        parser.error("--steps-per-phase must be at least --every-steps (a checkpoint in every phase)")
    runs = []
    with tempfile.TemporaryDirectory(prefix="resize-pause-") as scratch:
        base = options.keep or Path(scratch)
        for hidden in options.hidden:
            runs.append(one_run(options, hidden, base / f"hidden-{hidden}"))
    rows = [
        [
            str(run["hidden"]),
            f"{run['checkpoint_bytes'] / 1e6:.1f}",
            f"{run['save_s_median']:.3f}",
            f"{run['load_s_median']:.3f}",
            resize["resize"],
            f"{resize['pause_s']:.1f}",
            f"{resize['to_workers_started_s']:.1f}",
            f"{resize['workers_to_first_step_s']:.1f}",
            f"{resize['steps_lost']}",
        ]
        for run in runs
        for resize in run["resizes"]
    ]
    columns = ["hidden", "ckpt MB", "save s", "load s", "resize", "pause s", "to restart s", "restart to step s"]
    print_table(
        f"Resize pause: torchrun elastic on loopback, gloo, checkpoint every {options.every_steps} steps",
        [*columns, "steps lost"],
        rows,
    )
    settings = {key: value for key, value in vars(options).items() if key not in ("keep", "out")}
    path = write_json(options.out, {**settings, "worlds": list(WORLDS), "runs": runs, "environment": environment()})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
