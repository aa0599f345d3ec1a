"""Callbacks for PyTorch Lightning and the Hugging Face `Trainer` that report progress through a `ProgressReporter`.

Neither library is a dependency of dl2: `lightning_callback()` and `hf_callback()` import theirs only when called and
return an instance of a subclass of its callback base class with the hooks below mixed in, so the trainer finds
every hook it calls (Hugging Face's `CallbackHandler` calls every event on every callback) and importing
`dl2.report` imports neither.

    trainer = lightning.pytorch.Trainer(callbacks=[lightning_callback()])
    trainer = transformers.Trainer(..., callbacks=[hf_callback()])
"""

from __future__ import annotations

import functools
import importlib
import math
from types import ModuleType
from typing import Any, cast

from dl2.report.reporter import ProgressReporter, default_reporter

LIGHTNING_MODULES = ("lightning.pytorch", "pytorch_lightning")
"""Lightning 2.x under its new name, else the old one."""
TRANSFORMERS = "transformers"


class LightningHooks:
    """What the Lightning callback does (Lightning 2.x hook signatures). Only the global rank-0 process reports
    (`trainer.is_global_zero`; the reporter's own rank check applies too)."""

    def __init__(self, reporter: ProgressReporter | None = None) -> None:
        super().__init__()
        self.reporter = reporter if reporter is not None else default_reporter()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if getattr(trainer, "is_global_zero", True):
            self.reporter.report(lightning_epochs(trainer, batch_idx + 1))

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        # `current_epoch` counts completed epochs and moves on only after this hook: the epoch that ends is done
        if getattr(trainer, "is_global_zero", True):
            self.reporter.report(getattr(trainer, "current_epoch", 0) + 1)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if getattr(trainer, "is_global_zero", True):
            self.reporter.flush()


def lightning_epochs(trainer: Any, batches_done: int) -> float:
    """Epochs done once `batches_done` batches of the current epoch have trained: `current_epoch` plus the
    fraction of `num_training_batches` (none while an epoch's length is unknown: an iterable dataset has inf)."""
    total = getattr(trainer, "num_training_batches", math.inf)
    fraction = min(batches_done / total, 1.0) if total and math.isfinite(total) else 0.0
    return float(getattr(trainer, "current_epoch", 0)) + fraction


class TrainerHooks:
    """What the Hugging Face callback does: `state.epoch` is already fractional (the Trainer sets it to epoch +
    steps done / steps in the epoch before `on_step_end`). Only the world's process zero reports."""

    def __init__(self, reporter: ProgressReporter | None = None) -> None:
        super().__init__()
        self.reporter = reporter if reporter is not None else default_reporter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._report(state)

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._report(state)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._report(state):
            self.reporter.flush()

    def _report(self, state: Any) -> bool:
        """Hand `state.epoch` to the reporter; whether this process reports at all."""
        if not getattr(state, "is_world_process_zero", True):
            return False
        epoch = getattr(state, "epoch", None)
        if epoch is not None:  # None before training starts
            self.reporter.report(epoch)
        return True


def _import_first(*names: str) -> ModuleType:
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(f"dl2.report: this callback needs {' or '.join(names)}, which is not installed")


@functools.cache
def _subclass(name: str, hooks: type, base: type) -> type:
    """`hooks` mixed into the library's base class, one class per pair (the trainers tell callbacks by class)."""
    return type(name, (hooks, base), {"__module__": __name__, "__doc__": hooks.__doc__})


def lightning_callback(reporter: ProgressReporter | None = None) -> LightningHooks:
    """A `lightning.pytorch.Callback` (else `pytorch_lightning`'s) reporting epochs and the fraction of the
    current epoch's batches at every batch end, through `reporter` (default: the process's, from the
    environment). ImportError when neither package is installed."""
    base = _import_first(*LIGHTNING_MODULES).Callback
    return cast(LightningHooks, _subclass("Dl2LightningProgress", LightningHooks, base)(reporter))


def hf_callback(reporter: ProgressReporter | None = None) -> TrainerHooks:
    """A `transformers.TrainerCallback` reporting `state.epoch` at every step's end, through `reporter` (default:
    the process's, from the environment). ImportError when transformers is not installed."""
    base = _import_first(TRANSFORMERS).TrainerCallback
    return cast(TrainerHooks, _subclass("Dl2TrainerProgress", TrainerHooks, base)(reporter))
