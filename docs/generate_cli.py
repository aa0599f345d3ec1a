"""Write docs/cli.md from the `dl2` parser's own help: `.venv/bin/python docs/generate_cli.py`.

The page is generated, never edited by hand: every flag, default and description comes from `dl2/cli/` and the
configuration dataclasses it reads, so rerunning this after a change to either keeps the reference true.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

WIDTH = "100"
"""Help is wrapped at a fixed width so that the page does not depend on the terminal it was generated in."""
PAGE = Path(__file__).with_name("cli.md")


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise RuntimeError("the dl2 parser has no subcommands")


def render() -> str:
    from dl2.cli.main import build_parser

    parser = build_parser()
    commands = subcommands(parser)
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH  # argparse reads it when it formats
    try:
        return page(parser, commands)
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns


def page(parser: argparse.ArgumentParser, commands: dict[str, argparse.ArgumentParser]) -> str:
    lines = [
        "# `dl2` command reference",
        "",
        "Generated from the parser itself by `.venv/bin/python docs/generate_cli.py` (do not edit by hand; rerun",
        "it after changing a command or a configuration field). Every command also answers `--help`.",
        "",
        "Commands: " + ", ".join(f"[`{name}`](#dl2-{name})" for name in commands) + ".",
        "",
        "## dl2",
        "",
        "```text",
        parser.format_help().rstrip(),
        "```",
    ]
    for name, sub in commands.items():
        lines += ["", f"## dl2 {name}", "", "```text", sub.format_help().rstrip(), "```"]
    return "\n".join(lines) + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        if PAGE.read_text() != text:
            print(f"{PAGE} is out of date: run .venv/bin/python docs/generate_cli.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
