"""`dl2.report.elastic` without torchrun: atomic checkpoints, resume at the saved step, rank 0 alone writes, and
the data re-sharded by the new world size goes on through the same order."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import pytest
import torch
from torch.nn.parallel import DistributedDataParallel

from dl2.report import elastic
from dl2.report.elastic import Checkpointer, ElasticRank, TrainingState


def trained(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """A small model and its Adam after one step (so the optimizer has state to save)."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(5, 4)).sum().backward()
    optimizer.step()
    return model, optimizer


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


def test_a_checkpoint_round_trips_model_optimizer_and_state(tmp_path: Path) -> None:
    model, optimizer = trained(seed=0)
    state = TrainingState(step=7, epoch=1, epoch_samples=96, samples_seen=1893)
    size = elastic.save_checkpoint(tmp_path / "c.pt", model, optimizer, state)
    assert size == (tmp_path / "c.pt").stat().st_size > 0

    fresh, fresh_optimizer = trained(seed=1)
    assert not same_weights(model, fresh)
    assert elastic.load_checkpoint(tmp_path / "c.pt", fresh, fresh_optimizer) == state
    assert same_weights(model, fresh)
    saved, loaded = optimizer.state_dict()["state"], fresh_optimizer.state_dict()["state"]
    assert saved.keys() == loaded.keys()
    assert all(torch.equal(saved[k]["exp_avg"], loaded[k]["exp_avg"]) for k in saved)


def test_no_checkpoint_yet_is_none(tmp_path: Path) -> None:
    model, optimizer = trained()
    assert elastic.load_checkpoint(tmp_path / "missing.pt", model, optimizer) is None


def test_a_save_that_dies_midway_leaves_the_previous_checkpoint_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, optimizer = trained()
    path = tmp_path / "c.pt"
    elastic.save_checkpoint(path, model, optimizer, TrainingState(step=50))
    before = path.read_bytes()

    def torn(payload: object, handle: BinaryIO) -> None:
        real_save(payload, handle)
        handle.truncate(100)  # half written, then the process dies
        raise KeyboardInterrupt

    real_save = torch.save
    monkeypatch.setattr(torch, "save", torn)
    with pytest.raises(KeyboardInterrupt):
        elastic.save_checkpoint(path, model, optimizer, TrainingState(step=100))
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]  # no temporary left behind
    monkeypatch.undo()
    assert elastic.load_checkpoint(path, *trained(seed=3)) == TrainingState(step=50)


def test_the_checkpointer_resumes_where_the_last_save_left_off(tmp_path: Path) -> None:
    model, optimizer = trained()
    writer = Checkpointer(tmp_path, every_steps=10, rank=0)
    assert writer.resume(model, optimizer) == TrainingState()
    assert writer.load_s is None
    saved = [step for step in range(1, 26) if writer.maybe_save(model, optimizer, TrainingState(step=step))]
    assert saved == [10, 20]
    assert writer.bytes_written == writer.path.stat().st_size and writer.save_s is not None

    restarted = Checkpointer(tmp_path, every_steps=10, rank=1)  # the same job after a resize: another rank
    fresh, fresh_optimizer = trained(seed=5)
    assert restarted.resume(fresh, fresh_optimizer).step == 20
    assert restarted.load_s is not None and same_weights(model, fresh)


def test_only_rank_zero_writes(tmp_path: Path) -> None:
    model, optimizer = trained()
    other = Checkpointer(tmp_path, every_steps=1, rank=1)
    assert not any(other.maybe_save(model, optimizer, TrainingState(step=step)) for step in range(1, 5))
    assert list(tmp_path.iterdir()) == []


def test_the_interval_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="every_steps"):
        Checkpointer(tmp_path, every_steps=0, rank=0)


def test_a_ddp_model_saves_without_its_wrapper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RESTART_COUNT"):
        monkeypatch.delenv(name, raising=False)
    model, optimizer = trained()
    with elastic.process_group() as rank:  # outside torchrun: a group of one
        assert rank == ElasticRank(rank=0, world_size=1, local_rank=0, restart_count=0)
        elastic.save_checkpoint(tmp_path / "c.pt", DistributedDataParallel(model), optimizer, TrainingState(step=3))
    plain, plain_optimizer = trained(seed=9)
    assert elastic.load_checkpoint(tmp_path / "c.pt", plain, plain_optimizer) == TrainingState(step=3)
    assert same_weights(model, plain)


def test_the_rank_comes_from_torchrun_s_environment() -> None:
    environ = {"RANK": "2", "WORLD_SIZE": "3", "LOCAL_RANK": "0", "TORCHELASTIC_RESTART_COUNT": "4"}
    assert ElasticRank.from_environment(environ) == ElasticRank(2, 3, 0, 4)
    assert ElasticRank.from_environment({}) == ElasticRank(0, 1, 0, 0)


def shards(num_samples: int, world_size: int, state: TrainingState) -> list[list[int]]:
    ranks = [ElasticRank(r, world_size, 0, 0) for r in range(world_size)]
    return [elastic.shard_indices(num_samples, rank, state, seed=7) for rank in ranks]


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_the_shards_split_an_epoch_evenly_without_overlap(world_size: int) -> None:
    split = shards(103, world_size, TrainingState())
    assert len({len(shard) for shard in split}) == 1  # every worker takes as many steps
    flat = [i for shard in split for i in shard]
    assert len(flat) == len(set(flat)) == 103 - 103 % world_size


def test_after_a_resize_the_new_world_goes_on_through_the_same_order() -> None:
    """Two workers train 40 samples of epoch 0, then three take over: together they see the rest of the epoch's
    order, each sample once."""
    order = shards(100, 1, TrainingState())[0]
    first = shards(100, 2, TrainingState())
    trained_by_two = {i for shard in first for i in shard[:20]}
    assert trained_by_two == set(order[:40])
    rest = shards(100, 3, TrainingState(step=20, epoch_samples=40, samples_seen=40))
    after = [i for shard in rest for i in shard]
    assert sorted(after) == sorted(order[40:])
    assert not trained_by_two & set(after)


def test_the_next_epoch_begins_when_no_worker_has_a_sample_left() -> None:
    state = TrainingState(step=3, epoch=0, epoch_samples=90, samples_seen=90)
    assert state.advanced(8, num_samples=100, world_size=4) == TrainingState(4, 1, 0, 98)  # 2 left < 4 workers
    assert state.advanced(6, num_samples=100, world_size=4) == TrainingState(4, 0, 96, 96)
    assert TrainingState(epoch=2, epoch_samples=25).epochs(100) == 2.25


def test_a_new_epoch_is_a_new_order() -> None:
    one = ElasticRank(0, 1, 0, 0)
    first, second = (elastic.shard_indices(50, one, TrainingState(epoch=epoch)) for epoch in (0, 1))
    assert first != second and sorted(first) == sorted(second)


def test_batches_cover_the_shard_in_order() -> None:
    assert list(elastic.batches(list(range(7)), 3)) == [[0, 1, 2], [3, 4, 5], [6]]
