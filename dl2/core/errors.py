"""Errors that dl2 raises on purpose, each carrying enough context for a one-line message."""

from __future__ import annotations

from typing import Any


class Dl2Error(Exception):
    """Base class of the errors dl2 reports to users as one line (CLI exit status 2).

    Every subclass survives pickling whatever its `__init__` takes: an error raised in a worker process is
    re-raised in the parent (`multiprocessing.Pool.map`, Ray). Pickle's default rebuilds an exception by calling
    its class with `args`, which for `InputError` is the formatted message alone; a worker's error that the
    parent cannot rebuild leaves `Pool.map` waiting forever."""

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), self.args, dict(self.__dict__))


def _rebuild(cls: type[Dl2Error], args: tuple[Any, ...], state: dict[str, Any]) -> Dl2Error:
    """An error as it was pickled: its arguments and attributes, without calling its `__init__` again."""
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class InputError(Dl2Error):
    """Bad input data: names the file, the row (1-based data row, header excluded) and the field."""

    def __init__(self, path: str, message: str, row: int | None = None, field: str | None = None) -> None:
        self.path = path
        self.row = row
        self.field = field
        self.message = message
        where = path
        if row is not None:
            where += f", row {row}"
        if field is not None:
            where += f", field '{field}'"
        super().__init__(f"{where}: {message}")


class InvalidAllocationError(Dl2Error):
    """A scheduler returned an allocation that breaks capacity or per-job limits."""
