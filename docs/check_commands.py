"""Check that every command the documentation shows still parses: `.venv/bin/python docs/check_commands.py`.

Reads `README.md`, the Markdown under `docs/`, `benchmarks/README.md`, `k8s/README.md` and the model cards; takes every
`dl2 ...` and `.venv/bin/python benchmarks/<script>.py ...` command (code blocks, with backslash continuations,
and inline code), and parses it with the command's own argument parser without running it. Inline code may be
a fragment (`dl2 train-rl --credit deviation`), so a missing required argument is not an error there; an unknown
flag or a bad value is. Commands with placeholders (`<...>`, `[...]`, `...`) are skipped. Prints each failure
as `file:line: command: error` and exits non-zero when there is one.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = ("README.md", "docs/*.md", "benchmarks/README.md", "k8s/README.md", "models/*/MODEL_CARD.md")
BENCHMARK = re.compile(r"^(?:\.venv/bin/)?python \S*benchmarks/(\w+)\.py\b")
INLINE = re.compile(r"`((?:\$ )?(?:dl2 |(?:\.venv/bin/)?python \S*benchmarks/)[^`]*)`")
PLACEHOLDER = re.compile(r"<[^>]*>|\[|\.\.\.")
OUTPUT = re.compile(r"^dl2 [\w-]+: ")
"""A line a command printed (`dl2 serve: error: ...`), shown in a console block: not a command."""


class Parsed(Exception):
    """Raised in place of running a benchmark once its arguments have parsed."""


def commands(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line number, command, whether it is a fragment) for every command on the page, continuations joined."""
    in_code = False
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if line.startswith("```"):
            in_code, pending = not in_code, []
            continue
        if in_code:
            if pending:
                pending.append(line.rstrip("\\").strip())
                if not line.endswith("\\"):
                    yield start, " ".join(pending), False
                    pending = []
                continue
            line = line.removeprefix("$ ")
            if (line.startswith("dl2 ") and not OUTPUT.match(line)) or BENCHMARK.match(line):
                start = number
                if line.endswith("\\"):
                    pending = [line.rstrip("\\").strip()]
                else:
                    yield number, line, False
            continue
        for match in INLINE.finditer(raw):
            yield number, match.group(1).removeprefix("$ "), True


def without_comment(command: str) -> str:
    """The command alone: no trailing comment, no `&` that sends it to the background, nothing it is piped to."""
    command = command.split(" #", 1)[0].split(" | ", 1)[0].strip()
    return command.removesuffix("&").strip()


def check_dl2(argv: list[str]) -> str | None:
    from dl2.cli.main import build_parser

    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(argv)
    except SystemExit as stop:
        if stop.code:
            return errors.getvalue().strip() or f"exit {stop.code}"
    return None


def check_benchmark(script: str, argv: list[str]) -> str | None:
    path = ROOT / "benchmarks" / f"{script}.py"
    if not path.is_file():
        return f"no such script {path.relative_to(ROOT)}"
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"benchmark_{script}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> argparse.Namespace:
        original(self, *args, **kwargs)
        raise Parsed

    argparse.ArgumentParser.parse_args = parse_then_stop  # type: ignore[assignment]
    errors = io.StringIO()
    old_argv = sys.argv
    sys.argv = [str(path), *argv]
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            result = module.main()
            if hasattr(result, "__await__"):  # an async main: parsing happens inside
                import asyncio

                asyncio.run(result)
    except Parsed:
        return None
    except SystemExit as stop:
        return errors.getvalue().strip() or f"exit {stop.code}"
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]
        sys.argv = old_argv
    return "main() returned without parsing its arguments"


def check(command: str) -> str | None:
    argv = shlex.split(without_comment(command))
    if argv[0] == "dl2":
        return check_dl2(argv[1:])
    match = BENCHMARK.match(" ".join(argv))
    assert match is not None
    return check_benchmark(match.group(1), argv[2:])


def failures() -> tuple[int, list[str]]:
    """How many commands were checked, and `file:line: command: error` for each that does not parse."""
    checked = 0
    found: list[str] = []
    for pattern in PAGES:
        for page in sorted(ROOT.glob(pattern)):
            for number, command, fragment in commands(page):
                if PLACEHOLDER.search(command):
                    continue
                checked += 1
                error = check(command)
                if error is not None and not (fragment and "arguments are required" in error):
                    found.append(f"{page.relative_to(ROOT)}:{number}: {command}: {error}")
    return checked, found


def main() -> int:
    checked, found = failures()
    for line in found:
        print(line)
    print(f"{checked} commands checked, {len(found)} do not parse")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
