"""An elastic training job that survives resizes: an MLP on scikit-learn's digits, DDP over gloo, under torchrun.

Run one agent per pod (here: per shell), each with the same rendezvous; start another to scale up, stop one to
scale down, and the workers restart at the new world size from the latest checkpoint:

    export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1   # else a joining agent hangs (torch 2.13; docs/reporting.md)
    .venv/bin/torchrun --nnodes 1:3 --nproc-per-node 1 --max-restarts 10 --rdzv-backend c10d \\
        --rdzv-endpoint 127.0.0.1:29400 --rdzv-id digits --rdzv-conf last_call_timeout=1 \\
        examples/elastic_digits.py --checkpoint-dir /tmp/digits --max-steps 20000

Progress goes to dl2 with `dl2.report.report_progress` (rank 0 only; outside a cluster, with no `DL2_JOB_NAME`,
it reports nothing). `--log-dir DIR` writes one JSON line per event (start, resume, step, save) with wall-clock
times to a file per worker process: what `benchmarks/resize_pause.py` reads to time each resize. The data is the
1,797 8x8 digits shipped with scikit-learn (nothing downloaded); without scikit-learn, generated data alike.
"""

from __future__ import annotations

import time

STARTED = time.time()  # before the imports: a restart's cost includes loading torch

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, TextIO  # noqa: E402

import torch  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from dl2.report import elastic, report_progress  # noqa: E402


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (torchrun passes it to every worker alike)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-dir", type=Path, required=True, help="shared by every worker")
    parser.add_argument("--every-steps", type=int, default=50, help="checkpoint interval, steps")
    parser.add_argument("--max-steps", type=int, default=2000)
    parser.add_argument("--hidden", type=int, default=256, help="hidden width (sets the checkpoint's size)")
    parser.add_argument("--batch-size", type=int, default=32, help="per worker")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per worker (workers share the cores)")
    parser.add_argument("--log-dir", type=Path, help="write each worker's events to DIR/worker-<pid>.jsonl")
    return parser.parse_args(argv)


def digits() -> tuple[torch.Tensor, torch.Tensor]:
    """The digits as (1797, 64) floats in [0, 1] and their labels; generated alike without scikit-learn."""
    try:
        from sklearn.datasets import load_digits  # type: ignore[import-untyped]
    except ImportError:
        generator = torch.Generator().manual_seed(0)
        labels = torch.randint(0, 10, (1797,), generator=generator)
        centres = torch.rand(10, 64, generator=generator)
        return (centres[labels] + 0.1 * torch.randn(1797, 64, generator=generator)).clamp(0, 1), labels
    data = load_digits()
    return torch.tensor(data.data, dtype=torch.float32) / 16.0, torch.tensor(data.target, dtype=torch.long)


def mlp(hidden: int) -> torch.nn.Module:
    """Two hidden layers of `hidden` units: the width sets the checkpoint's size (256: 1 MB, 2048: 52 MB with Adam)."""
    return torch.nn.Sequential(
        torch.nn.Linear(64, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, 10),
    )


class EventLog:
    """One JSON line per event, flushed at once (the process may be killed at any moment)."""

    def __init__(self, directory: Path | None, rank: elastic.ElasticRank) -> None:
        self.handle: TextIO | None = None
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            self.handle = (directory / f"worker-{os.getpid()}.jsonl").open("a")
        self.common = {"pid": os.getpid(), "rank": rank.rank, "world": rank.world_size, "restart": rank.restart_count}

    def __call__(self, event: str, **fields: Any) -> None:
        if self.handle is not None:
            self.handle.write(json.dumps({"event": event, "t": time.time(), **self.common, **fields}) + "\n")
            self.handle.flush()


def train(options: argparse.Namespace) -> None:
    """Train until `--max-steps`, going on from the latest checkpoint at whatever world size torchrun gives."""
    torch.set_num_threads(options.threads)
    features, labels = digits()
    imported = time.time()
    with elastic.process_group() as rank:
        log = EventLog(options.log_dir, rank)
        log("start", started=STARTED, imported=imported)
        torch.manual_seed(options.seed)
        model = mlp(options.hidden)
        optimizer = torch.optim.Adam(model.parameters(), lr=options.lr)
        checkpoints = elastic.Checkpointer(options.checkpoint_dir, options.every_steps, rank=rank.rank)
        state = checkpoints.resume(model, optimizer)
        log("resume", step=state.step, epoch=state.epoch, load_s=checkpoints.load_s)
        ddp = DistributedDataParallel(model)
        loss_fn = torch.nn.CrossEntropyLoss()
        num_samples = len(labels)
        while state.step < options.max_steps:
            for batch in elastic.batches(
                elastic.shard_indices(num_samples, rank, state, seed=options.seed), options.batch_size
            ):
                optimizer.zero_grad()
                loss = loss_fn(ddp(features[batch]), labels[batch])
                loss.backward()
                optimizer.step()
                state = state.advanced(len(batch) * rank.world_size, num_samples, rank.world_size)
                log("step", step=state.step, loss=round(loss.item(), 4))
                if checkpoints.maybe_save(model, optimizer, state):
                    log("save", step=state.step, save_s=checkpoints.save_s, bytes=checkpoints.bytes_written)
                report_progress(state.epochs(num_samples))
                if state.step >= options.max_steps:
                    break
        log("done", step=state.step)


if __name__ == "__main__":
    train(arguments())
