"""Reading input files whole, refusing what is not text or JSON with one line (`InputError`) instead of a
traceback: a missing path, a folder, an oversized file, binary bytes, invalid or too deeply nested JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dl2.core.errors import InputError
from dl2.core.limits import MAX_FILE_BYTES


def read_bytes(path: Path, where: str | None = None) -> bytes:
    """A file's bytes, at most `MAX_FILE_BYTES` of them."""
    where = where or str(path)
    try:
        if path.is_dir():
            raise InputError(where, "is a folder, expected a file")
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise InputError(where, f"{size:,} bytes, more than the {MAX_FILE_BYTES:,} a file may have")
        return path.read_bytes()
    except FileNotFoundError:
        raise InputError(where, "file not found") from None
    except OSError as error:
        raise InputError(where, f"cannot read ({error.strerror or error})") from None


def read_text(path: Path, where: str | None = None) -> str:
    """The UTF-8 text of a file (a leading byte-order mark is dropped)."""
    where = where or str(path)
    return decode(read_bytes(path, where), where)


def read_lines(path: Path, where: str | None = None) -> list[str]:
    """A line-oriented file's lines (JSON Lines), each decoded alone: bytes that are not text are refused naming
    their line (1-based)."""
    where = where or str(path)
    return [decode(line, where, row=number) for number, line in enumerate(read_bytes(path, where).splitlines(), 1)]


def decode(data: bytes, where: str, row: int | None = None) -> str:
    """`data` as UTF-8 text; binary bytes or a NUL are refused."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise InputError(where, f"not UTF-8 text (byte {error.start}: {data[error.start:error.start + 1]!r})",
                         row=row) from None  # fmt: skip
    if "\x00" in text:
        raise InputError(where, f"not text (a NUL byte at offset {text.index(chr(0))})", row=row)
    return text


def parse_json(text: str, where: str, row: int | None = None) -> Any:
    """A JSON document; invalid JSON, non-standard numbers (NaN, Infinity), integers of thousands of digits and
    nesting deeper than the interpreter's stack are refused."""
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as error:
        raise InputError(where, f"not valid JSON ({error.msg} at line {error.lineno})", row=row) from None
    except RecursionError:
        raise InputError(where, "not valid JSON (nested too deeply)", row=row) from None
    except ValueError as error:  # a NaN or Infinity, or an integer of thousands of digits
        raise InputError(where, f"not valid JSON ({error})", row=row) from None


def read_json(path: Path, where: str | None = None) -> Any:
    where = where or str(path)
    return parse_json(read_text(path, where), where)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")
