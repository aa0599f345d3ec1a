"""Errors that dl2 raises on purpose, each carrying enough context for a one-line message."""

from __future__ import annotations


class Dl2Error(Exception):
    """Base class of the errors dl2 reports to users as one line (CLI exit status 2)."""


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
