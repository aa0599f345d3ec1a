"""The documentation's commands parse, and the CLI reference is the parser's own help."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[3]


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"docs_{name}", ROOT / "docs" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_every_documented_command_parses() -> None:
    checked, failures = load("check_commands").failures()
    assert checked > 50
    assert failures == []


def test_the_checker_finds_a_bad_flag_and_a_bad_value() -> None:
    checker = load("check_commands")
    assert checker.check("dl2 simulate --workload philly --scheduler drf") is None
    unknown = checker.check("dl2 simulate --workload philly --scheduler drf --no-such-flag")
    assert unknown is not None and "unrecognized arguments: --no-such-flag" in unknown
    bad_value = checker.check("dl2 simulate --workload philly --scheduler drf --placer nowhere")
    assert bad_value is not None and "invalid choice: 'nowhere'" in bad_value


def test_commands_are_read_from_code_blocks_with_continuations_and_inline_code(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Run `dl2 compare --workload philly` first.\n"
        "```console\n"
        "$ dl2 simulate --workload philly \\\n"
        "    --scheduler drf   # a comment\n"
        "output line\n"
        "dl2 cluster --simulate philly &\n"
        "```\n"
    )
    checker = load("check_commands")
    assert list(checker.commands(page)) == [
        (1, "dl2 compare --workload philly", True),
        (3, "dl2 simulate --workload philly --scheduler drf   # a comment", False),
        (6, "dl2 cluster --simulate philly &", False),
    ]
    assert checker.without_comment("dl2 simulate -w philly -s drf   # a comment") == "dl2 simulate -w philly -s drf"
    assert checker.without_comment("dl2 cluster --simulate philly &") == "dl2 cluster --simulate philly"


def test_the_cli_reference_is_current() -> None:
    generator = load("generate_cli")
    assert generator.PAGE.read_text() == generator.render(), "run .venv/bin/python docs/generate_cli.py"
