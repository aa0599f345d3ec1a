"""A real elastic job resized 1 -> 2 -> 1 workers: torchrun agents on loopback (c10d rendezvous, gloo), each its
own process group as a pod is, training `examples/elastic_digits.py` with a tiny model. After each resize the
workers run at the new world size and go on from the latest checkpoint: the step never goes back more than one
checkpoint interval."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
EVERY_STEPS = 5
TORCHRUN = Path(sys.executable).with_name("torchrun")

pytestmark = pytest.mark.slow


class Job:
    """Agents of one elastic job, started and stopped as the operator creates and deletes pods."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.agents: list[subprocess.Popen[bytes]] = []

    def start_agent(self) -> None:
        host = int(not self.agents)
        command = [
            str(TORCHRUN),
            *("--nnodes", "1:2", "--nproc-per-node", "1", "--max-restarts", "5", "--monitor-interval", "0.5"),
            *("--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{self.port}", "--rdzv-id", "test"),
            # the first agent alone hosts the store, as worker 0's pod does (torch's default keep-alive: with
            # 1 s x 2 on two busy cores the second agent formed a job of its own)
            *("--rdzv-conf", f"last_call_timeout=1,is_host={host}"),
            str(ROOT / "examples" / "elastic_digits.py"),
            *("--checkpoint-dir", str(self.directory / "checkpoints"), "--log-dir", str(self.directory / "events")),
            *("--every-steps", str(EVERY_STEPS), "--hidden", "16", "--max-steps", "1000000"),
        ]
        environ = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
        with (self.directory / f"agent-{len(self.agents)}.log").open("wb") as log:
            self.agents.append(
                subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environ, start_new_session=True)
            )

    def stop_agent(self, process: subprocess.Popen[bytes]) -> None:
        for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
            try:
                process.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                continue

    def steps(self) -> list[dict[str, Any]]:
        events = []
        for path in (self.directory / "events").glob("worker-*.jsonl"):
            lines = path.read_text().splitlines()
            events += [json.loads(line) for line in lines if line.endswith("}")]
        return sorted((e for e in events if e["event"] in ("step", "resume")), key=lambda e: e["t"])

    def wait_for(self, world: int, since_t: float, steps: int, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.agents[0].poll() is not None:
                pytest.fail((self.directory / "agent-0.log").read_text()[-3000:])
            done = {
                e["step"] for e in self.steps() if e["event"] == "step" and e["world"] == world and e["t"] > since_t
            }
            if len(done) >= steps:
                return
            time.sleep(0.2)
        logs = "\n".join(p.read_text()[-1500:] for p in sorted(self.directory.glob("agent-*.log")))
        pytest.fail(f"{steps} steps at world size {world} did not come in {timeout_s} s:\n{logs}")


def test_a_job_resized_1_2_1_goes_on_from_its_checkpoint(tmp_path: Path) -> None:
    job = Job(tmp_path)
    try:
        job.start_agent()
        job.wait_for(world=1, since_t=0.0, steps=2 * EVERY_STEPS)
        grown = time.time()
        job.start_agent()  # the operator creates a second pod
        job.wait_for(world=2, since_t=grown, steps=2 * EVERY_STEPS)
        shrunk = time.time()
        job.stop_agent(job.agents[1])  # and deletes it
        job.wait_for(world=1, since_t=shrunk, steps=EVERY_STEPS)
    finally:
        for agent in reversed(job.agents):
            job.stop_agent(agent)

    events = job.steps()
    steps = [e for e in events if e["event"] == "step" and e["rank"] == 0]
    worlds = [e["world"] for e in steps]
    assert [w for i, w in enumerate(worlds) if i == 0 or w != worlds[i - 1]] == [1, 2, 1]
    resumes = [e for e in events if e["event"] == "resume" and e["rank"] == 0]
    assert len(resumes) == 3 and resumes[0]["step"] == 0
    for resume in resumes[1:]:
        before = max(e["step"] for e in steps if e["t"] < resume["t"])
        after = min(e["step"] for e in steps if e["t"] > resume["t"])
        assert resume["step"] % EVERY_STEPS == 0
        # lost at most one interval: a whole one when the stop fell between a step that ends an interval and its
        # checkpoint (seen once: step 1210 logged, resumed from 1205)
        assert before - EVERY_STEPS <= resume["step"] <= before
        assert after == resume["step"] + 1  # and went on from the checkpoint
    for previous, step in itertools.pairwise(steps):
        assert step["step"] == previous["step"] + 1 or previous["step"] - EVERY_STEPS < step["step"] <= previous["step"]
