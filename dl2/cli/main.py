"""The `dl2` command: `dl2 --help` lists the subcommands; each has its own `--help`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from dl2 import __version__
from dl2.core import Dl2Error


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line on stderr, exit status 2 (scripts parse the first line)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    from dl2.cli import cluster, compare, evaluate, extender, harmony, serve, simulate, speed, train, workloads

    parser = OneLineParser(
        prog="dl2",
        description="dl2: a learned scheduler for deep-learning training clusters (DL2, Harmony) and its simulator.",
    )
    parser.add_argument("--version", action="version", version=f"dl2 {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="let an error end with its Python traceback (to report a bug)"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    subparsers.required = True
    for module in (simulate, compare, workloads, speed, evaluate, cluster, serve, extender):
        module.add_parser(subparsers)
    train.add_parsers(subparsers)
    harmony.add_parsers(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run a command: 0 done, 2 refused input (one line naming what and why), 1 an unexpected error (a bug:
    one line, and `dl2 --debug ...` shows its traceback), 130 interrupted."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except Dl2Error as error:
        if args.debug:
            raise
        print(f"dl2 {args.command}: error: {one_line(str(error))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dl2: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`dl2 ... | head`): stop quietly, and keep Python from complaining at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as error:  # the safety net, not the fix: every bad input has its own Dl2Error
        if args.debug:
            raise
        text = one_line(f"{type(error).__name__}: {error}", limit=300)
        print(f"dl2 {args.command}: internal error: {text} (run `dl2 --debug {args.command} ...` for the "
              "traceback, and please report it)", file=sys.stderr)  # fmt: skip
        return 1


def one_line(text: str, limit: int = 2_000) -> str:
    """A message as one line of at most `limit` characters (scripts read the first line)."""
    flat = " ".join(line.strip() for line in text.splitlines() if line.strip())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


if __name__ == "__main__":
    sys.exit(main())
