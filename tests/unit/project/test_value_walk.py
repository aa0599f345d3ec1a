"""The walk of a stage's configuration (`tools/value_walk.py`): by hand on a small package, then the bar the
fine-tune stage and the promotion gate keep (at most 10 modules, at most 3 returns up a floor)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.value_walk import walk


def test_a_walk_follows_the_value_and_its_parts_through_imports(tmp_path: Path) -> None:
    package = tmp_path / "pipelines"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "finetune.py").write_text(
        "from pipelines.helper import load\n"
        "def run(params, other):\n"
        "    f = params.section\n"
        "    load(f.value)\n"
        "    local(other)\n"  # another value: not followed
        "    from dl2.lib import train\n"
        "    train(seed=params.seed)\n"
        "def local(x):\n"
        "    pass\n"
    )
    (package / "helper.py").write_text("from dl2 import lib\ndef load(v):\n    lib.read(v)\n")
    (tmp_path / "dl2").mkdir()
    (tmp_path / "dl2" / "__init__.py").write_text("")
    (tmp_path / "dl2" / "lib.py").write_text("def train(seed):\n    pass\ndef read(v):\n    pass\n")
    result = walk("pipelines.finetune.run", "params", tmp_path)
    assert [(c.caller, c.callee) for c in result.calls] == [
        ("pipelines.finetune.run", "pipelines.helper.load"),
        ("pipelines.helper.load", "dl2.lib.read"),
        ("pipelines.finetune.run", "dl2.lib.train"),
    ]
    assert result.modules == ["dl2.lib", "pipelines.finetune", "pipelines.helper"]
    assert [c.climbs_back for c in result.calls] == [True, True, True]  # stage > library > dl2
    assert result.climbs == 3


@pytest.mark.parametrize("start", ["pipelines.finetune.run", "pipelines.online.run", "pipelines.promote.run"])
def test_a_stage_loads_its_inputs_makes_one_library_call_and_logs(start: str) -> None:
    result = walk(start, "params")
    assert len(result.modules) <= 10, result.modules
    assert result.climbs <= 3, [c for c in result.calls if c.climbs_back]
