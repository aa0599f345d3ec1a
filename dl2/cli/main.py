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
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    subparsers.required = True
    for module in (simulate, compare, workloads, speed, evaluate, cluster, serve, extender):
        module.add_parser(subparsers)
    train.add_parsers(subparsers)
    harmony.add_parsers(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except Dl2Error as error:
        print(f"dl2 {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dl2: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`dl2 ... | head`): stop quietly, and keep Python from complaining at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
