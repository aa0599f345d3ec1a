"""Steps on logged decisions are kept only if the policy then validates no worse (`dl2.rl.refine`)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from dl2.rl import refine
from dl2.rl.refine import Checkpoint, learn_from_batches


class _Batch:
    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size


class _Trainer:
    """The learner's surface that `learn_from_batches` uses: its networks and a validation figure."""

    def __init__(self, validation_after: float) -> None:
        self.policy = torch.nn.Linear(2, 1)
        self.value = torch.nn.Linear(2, 1)
        self.validation_after = validation_after

    def validate(self, pool: Any) -> float:
        return self.validation_after


def _nudge(trainer: _Trainer, batch: _Batch, steps: int) -> tuple[float, float, float]:
    """A stand-in feedback step: every weight moves by the batch's size, the losses say which batch it was."""
    with torch.no_grad():
        for module in (trainer.policy, trainer.value):
            for parameter in module.parameters():
                parameter.add_(float(len(batch) * steps))
    return float(len(batch)), -float(len(batch)), 0.0


def _start() -> Checkpoint:
    zeros = torch.nn.Linear(2, 1)
    torch.nn.init.zeros_(zeros.weight)
    torch.nn.init.zeros_(zeros.bias)
    state = {k: v.clone() for k, v in zeros.state_dict().items()}
    return Checkpoint(state, {k: v.clone() for k, v in state.items()}, 100.0)


@pytest.fixture(autouse=True)
def _stand_in_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(refine, "learn_from_feedback", _nudge)


def test_steps_that_validate_no_worse_are_kept() -> None:
    start = _start()
    chosen, outcome = learn_from_batches(_Trainer(100.0), start, [_Batch(2), _Batch(3)], 1, pool=None)  # type: ignore[arg-type]
    assert outcome is not None and outcome.kept and outcome.decisions == 5
    assert (outcome.validation_jct_s_before, outcome.validation_jct_s_after) == (100.0, 100.0)
    assert (outcome.policy_loss, outcome.value_loss) == (3.0, -3.0)  # the last batch's
    assert chosen.validation_jct_s == 100.0
    assert torch.equal(chosen.policy["weight"], torch.full((1, 2), 5.0))  # from the start, both batches
    assert torch.equal(chosen.value["bias"], torch.full((1,), 5.0))


def test_steps_that_validate_worse_leave_the_start() -> None:
    start = _start()
    trainer = _Trainer(100.5)
    chosen, outcome = learn_from_batches(trainer, start, [_Batch(2)], 1, pool=None)  # type: ignore[arg-type]
    assert outcome is not None and not outcome.kept and outcome.validation_jct_s_after == 100.5
    assert chosen is start
    assert outcome.record([{"log": "a"}]) == {
        "logs": [{"log": "a"}],
        "validation_avg_jct_s_before": 100.0,
        "validation_avg_jct_s_after": 100.5,
        "kept": False,
        "policy_loss": 2.0,
        "value_loss": -2.0,
    }


@pytest.mark.parametrize(("batches", "steps"), [([], 1), ([_Batch(2)], 0)])
def test_nothing_to_learn_is_no_attempt(batches: list[_Batch], steps: int) -> None:
    start = _start()
    assert learn_from_batches(_Trainer(1.0), start, batches, steps, pool=None) == (start, None)  # type: ignore[arg-type]
