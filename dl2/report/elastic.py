"""Surviving a resize under `torchrun`: the process group, checkpoints that resume at any world size, and data
re-sharded by the new rank.

dl2 resizes an elastic PyTorchJob by changing its number of workers; the training operator adds or deletes pods,
and torchrun's elastic agents stop every worker, meet again at the rendezvous and start the workers afresh with
new ranks and a new world size. Nothing survives in memory: a training loop survives by checkpointing and resuming.

    from dl2.report import elastic

    with elastic.process_group() as rank:                       # gloo, from torchrun's environment
        checkpoints = elastic.Checkpointer(directory, every_steps=50, rank=rank.rank)
        state = checkpoints.resume(model, optimizer)            # the latest checkpoint, or step 0
        ddp = DistributedDataParallel(model)
        while state.step < max_steps:
            for batch in elastic.batches(elastic.shard_indices(len(data), rank, state, seed=0), batch_size):
                train_step(ddp, data[batch])
                state = state.advanced(len(batch) * rank.world_size, len(data), rank.world_size)
                checkpoints.maybe_save(model, optimizer, state)
                report_progress(state.epochs(len(data)))
                if state.step >= max_steps:
                    break

Rank 0 writes the checkpoint (every rank holds the same model and optimizer under DDP) atomically: a temporary
file in the same folder, fsynced, then `os.replace`, so a worker killed mid-write leaves the previous checkpoint
whole. The directory must be one every worker sees (a shared volume in a cluster). A resize loses at most the
steps since the last checkpoint (`every_steps`).

Standard library and torch only, and no other dl2 module: it runs in training images (`dl2.report`). Unlike the
rest of `dl2.report` it imports torch, so `import dl2.report` does not load it; import `dl2.report.elastic`.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

CHECKPOINT_NAME = "checkpoint.pt"
"""The one checkpoint file in the directory; each save replaces it whole."""
DEFAULT_TIMEOUT_S = 120.0
"""How long a collective waits for a peer. A worker whose peer died gets a connection error at once; this bounds
only a peer that hangs, so a resize is not stuck for gloo's default 30 minutes."""


@dataclass(frozen=True, slots=True)
class ElasticRank:
    """This worker's place in the current worker group, as torchrun set it for this (re)start."""

    rank: int
    """Global rank, 0 to `world_size - 1`; changes from one restart to the next."""
    world_size: int
    """Workers in the group since the last rendezvous."""
    local_rank: int
    """Rank among the workers of this agent (this pod)."""
    restart_count: int
    """Times the agents restarted the group (a resize or a failure), torchrun's `TORCHELASTIC_RESTART_COUNT`."""

    @classmethod
    def from_environment(cls, environ: dict[str, str] | None = None) -> ElasticRank:
        """The rank torchrun gives the worker in its environment; a lone process (no torchrun) is rank 0 of 1."""
        env = dict(os.environ) if environ is None else environ
        return cls(
            rank=int(env.get("RANK", "0")),
            world_size=int(env.get("WORLD_SIZE", "1")),
            local_rank=int(env.get("LOCAL_RANK", "0")),
            restart_count=int(env.get("TORCHELASTIC_RESTART_COUNT", "0")),
        )


@contextmanager
def process_group(backend: str = "gloo", timeout_s: float = DEFAULT_TIMEOUT_S) -> Iterator[ElasticRank]:
    """Join the worker group torchrun's rendezvous formed (`MASTER_ADDR`/`MASTER_PORT`, `RANK`, `WORLD_SIZE`) and
    leave it on the way out. Outside torchrun it forms a group of one on a free loopback port, so the same script
    runs alone."""
    rank = ElasticRank.from_environment()
    if "MASTER_ADDR" not in os.environ:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
        os.environ.setdefault("RANK", "0")
        os.environ.setdefault("WORLD_SIZE", "1")
    dist.init_process_group(backend, init_method="env://", timeout=timedelta(seconds=timeout_s))
    try:
        yield rank
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True, slots=True)
class TrainingState:
    """Where training stands, independent of the world size: what a checkpoint holds beside the weights."""

    step: int = 0
    """Optimizer steps done (each one global batch, whatever the world size was)."""
    epoch: int = 0
    """Passes over the data begun; the current one is `epoch`."""
    epoch_samples: int = 0
    """Samples of the current epoch already trained on (the resumed workers shard what is left)."""
    samples_seen: int = 0
    """Samples trained on since the start, over every epoch and world size."""

    def advanced(self, samples: int, num_samples: int, world_size: int) -> TrainingState:
        """The state after one step that trained on `samples` (the global batch: every worker's batch together).
        The next epoch begins when what is left of this one cannot give every worker a sample (`shard_indices`
        drops that tail)."""
        epoch, epoch_samples = self.epoch, self.epoch_samples + samples
        if num_samples - epoch_samples < world_size:
            epoch, epoch_samples = epoch + 1, 0
        return TrainingState(self.step + 1, epoch, epoch_samples, self.samples_seen + samples)

    def epochs(self, num_samples: int) -> float:
        """Epochs done, fractional: what `dl2.report.report_progress` takes."""
        return self.epoch + self.epoch_samples / num_samples


def shard_indices(num_samples: int, rank: ElasticRank, state: TrainingState, *, seed: int = 0) -> list[int]:
    """This worker's share of what is left of the current epoch.

    The epoch's order is one permutation seeded by `seed` and the epoch, the same on every worker and for every
    world size; the samples already trained on (`state.epoch_samples`) are skipped and the rest dealt out in turn,
    rank by rank. So after a resize the new group goes on through the same order where the old one stopped, and no
    sample is seen twice in an epoch (but those of the steps lost since the checkpoint). The tail that does not
    divide by the world size is dropped, so that every worker takes the same number of steps (DDP's collectives
    need it); at most `world_size - 1` samples an epoch."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + state.epoch)
    order = torch.randperm(num_samples, generator=generator)[state.epoch_samples :]
    usable = len(order) - len(order) % rank.world_size
    return [int(i) for i in order[rank.rank : usable : rank.world_size]]


def batches(indices: list[int], batch_size: int) -> Iterator[list[int]]:
    """`indices` in consecutive batches of `batch_size` (the last may be shorter, and is on every worker alike)."""
    for start in range(0, len(indices), batch_size):
        yield indices[start : start + batch_size]


def _unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The module a `DistributedDataParallel` wraps (its state dict has no `module.` prefix), so that a checkpoint
    loads with or without DDP."""
    inner = getattr(model, "module", model)
    return inner if isinstance(inner, torch.nn.Module) else model


def save_checkpoint(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: TrainingState) -> int:
    """Write model, optimizer and state to `path` atomically; the bytes written.

    A temporary file in the same folder (so `os.replace` is a rename within one file system), flushed and fsynced
    before the rename, the folder fsynced after it: whenever the writer dies, `path` holds the previous checkpoint
    or this one, never a torn file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"model": _unwrapped(model).state_dict(), "optimizer": optimizer.state_dict(), "state": asdict(state)}
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            torch.save(payload, handle)
            handle.flush()
            os.fsync(handle.fileno())
            size = handle.tell()
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)
    return size


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable (POSIX); a no-op where directories cannot be opened (Windows)."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def load_checkpoint(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> TrainingState | None:
    """Load the checkpoint at `path` into `model` and `optimizer` (before wrapping the model in DDP, or through
    the wrapper); its state, or None when there is none yet. Tensors load onto the CPU whatever wrote them
    (`weights_only`: a checkpoint holds tensors and numbers, never code)."""
    if not path.exists():
        return None
    payload: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    _unwrapped(model).load_state_dict(payload["model"])
    optimizer.load_state_dict(payload["optimizer"])
    return TrainingState(**payload["state"])


class Checkpointer:
    """The checkpoints of one job in `directory`: resume from the latest on start, save every `every_steps`
    steps from rank 0 only. Times the last save and load (`save_s`, `load_s`) and keeps the size written."""

    def __init__(self, directory: Path | str, every_steps: int, *, rank: int) -> None:
        if every_steps < 1:
            raise ValueError(f"every_steps must be at least 1, got {every_steps}")
        self.path = Path(directory) / CHECKPOINT_NAME
        """The checkpoint file (one per job: each save replaces it)."""
        self.every_steps = every_steps
        """Steps between two saves: the most steps a resize or a failure loses."""
        self.rank = rank
        """This worker's global rank; only rank 0 writes."""
        self.save_s: float | None = None
        """Seconds the last save took (rank 0), None before the first."""
        self.load_s: float | None = None
        """Seconds the resume's load took, None if there was nothing to load."""
        self.bytes_written: int | None = None
        """Size of the last checkpoint written (rank 0)."""

    def resume(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> TrainingState:
        """Load the latest checkpoint into `model` and `optimizer`, whatever world size wrote it; its state, or a
        fresh one (step 0) when the job has none yet. Every rank loads the same file, so every rank starts equal
        (DDP also broadcasts rank 0's weights when it wraps the model)."""
        started = time.perf_counter()
        state = load_checkpoint(self.path, model, optimizer)
        if state is None:
            return TrainingState()
        self.load_s = time.perf_counter() - started
        return state

    def maybe_save(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: TrainingState) -> bool:
        """Save on rank 0 when `state.step` is a multiple of `every_steps`; whether this call saved. The other
        ranks go on at once and wait for rank 0 at the next collective."""
        if self.rank != 0 or state.step % self.every_steps != 0:
            return False
        started = time.perf_counter()
        self.bytes_written = save_checkpoint(self.path, model, optimizer, state)
        self.save_s = time.perf_counter() - started
        return True
