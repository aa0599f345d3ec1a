"""Where one value travels: from a function's parameter, every call that passes it (or a part of it, such as
`params.finetune.rl` or a name assigned from one) to a project function, followed into that function, read from
the source (statically, lazy imports included; calls through lambdas and methods of the value are not seen).

A stage should read as: load its inputs, one library call, log its outputs. This walk measures how far its
configuration strays: the modules it passes through, and the calls whose return climbs back to a higher floor
(a stage module above the pipelines' library modules, above `dl2`, whose packages are ordered as the
import-linter layers order them).

    python tools/value_walk.py pipelines.finetune run params [--json]
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGES = frozenset(
    {"ingest", "validate", "workloads", "warmup", "feedback", "finetune", "online", "evaluate", "ablate", "report",
     "promote", "register", "collect", "lifecycle", "cluster_loop"}
)  # fmt: skip
"""Modules of `pipelines` that are stages (or run them); the others are the pipelines' library."""
DL2_LAYERS = (
    "dl2.cli", "testbed.twin", "dl2.truth", "testbed.controlplane", "dl2.kube", "dl2.placement", "dl2.rl", "dl2.nn",
    "dl2.env", "dl2.schedulers", "dl2.sim", "dl2.workload", "dl2.core",
)  # fmt: skip


def floor(module: str) -> float:
    """Higher for modules nearer the user: pipeline stages, the pipelines' library, then `dl2` by its layers."""
    if module.startswith("pipelines."):
        return 3.0 if module.count(".") == 1 and module.split(".")[1] in STAGES else 2.0
    for depth, prefix in enumerate(DL2_LAYERS):
        if module == prefix or module.startswith(prefix + "."):
            return 1.0 - depth / 100
    return 0.0


@dataclass(frozen=True)
class Call:
    caller: str
    callee: str

    @property
    def climbs_back(self) -> bool:
        """Its return goes up a floor."""
        return floor(self.callee.rpartition(".")[0]) < floor(self.caller.rpartition(".")[0])


@dataclass
class Walk:
    start: str
    calls: list[Call] = field(default_factory=list)

    @property
    def modules(self) -> list[str]:
        return sorted({self.start.rpartition(".")[0]} | {c.callee.rpartition(".")[0] for c in self.calls})

    @property
    def climbs(self) -> int:
        return sum(call.climbs_back for call in self.calls)


class Source:
    """The project's modules, parsed once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._trees: dict[str, ast.Module | None] = {}

    def tree(self, module: str) -> ast.Module | None:
        if module not in self._trees:
            base = self.root.joinpath(*module.split("."))
            found = [p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()]
            self._trees[module] = ast.parse(found[0].read_text()) if found else None
        return self._trees[module]

    def function(self, qualified: str) -> ast.FunctionDef | None:
        module, _, name = qualified.rpartition(".")
        tree = self.tree(module)
        for node in tree.body if tree else []:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return node
        return None

    def resolve(self, module: str, call: ast.Call) -> str | None:
        """The project function a call names (a module-level function here, or one imported), else None."""
        tree = self.tree(module)
        if tree is None:
            return None
        imported = _imports(tree, module)
        func = call.func
        if isinstance(func, ast.Name):
            if self.function(f"{module}.{func.id}") is not None:
                return f"{module}.{func.id}"
            origin = imported.get(func.id)
            if origin and self.function(origin) is not None:
                return origin
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            target = imported.get(func.value.id)
            if target and self.tree(target) is not None and self.function(f"{target}.{func.attr}") is not None:
                return f"{target}.{func.attr}"
        return None


def _imports(tree: ast.AST, module: str) -> dict[str, str]:
    """Name -> what it names (`pkg.module` or `pkg.module.function`), every import of the file included."""
    names = {}
    package = module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            origin = node.module or ""
            if node.level:
                origin = package + (f".{origin}" if origin else "")
            for alias in node.names:
                names[alias.asname or alias.name] = f"{origin}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name] = alias.name
    return names


def _rooted(node: ast.expr, names: set[str]) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id in names


def _parts(function: ast.FunctionDef, name: str) -> set[str]:
    """`name` and the local names assigned a part of it (`f = params.finetune`, `a, b = params.x, params.y`)."""
    names, grown = {name}, True
    while grown:
        grown = False
        for node in ast.walk(function):
            if not isinstance(node, ast.Assign):
                continue
            for target in node.targets:
                pairs = (
                    zip(target.elts, node.value.elts, strict=False)
                    if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                    else [(target, node.value)]
                )
                for left, right in pairs:
                    if isinstance(left, ast.Name) and left.id not in names and _rooted(right, names):
                        names.add(left.id)
                        grown = True
    return names


def _parameter(function: ast.FunctionDef, index: int, keyword: str | None) -> str | None:
    if keyword is not None:
        return keyword
    positional = [a.arg for a in function.args.posonlyargs + function.args.args]
    return positional[index] if index < len(positional) else None


def walk(start: str, parameter: str, root: Path = ROOT) -> Walk:
    """The walk of `parameter` of the function `start` (`package.module.function`)."""
    source, result, seen = Source(root), Walk(start), set()

    def visit(qualified: str, name: str) -> None:
        function = source.function(qualified)
        if function is None or (qualified, name) in seen:
            return
        seen.add((qualified, name))
        module, names = qualified.rpartition(".")[0], _parts(function, name)
        for node in ast.walk(function):
            if not isinstance(node, ast.Call):
                continue
            passed = [(i, None) for i, a in enumerate(node.args) if _rooted(a, names)]
            passed += [(0, k.arg) for k in node.keywords if k.arg and _rooted(k.value, names)]
            callee = source.resolve(module, node) if passed else None
            target = source.function(callee) if callee else None
            if callee is None or target is None:
                continue
            if Call(qualified, callee) not in result.calls:
                result.calls.append(Call(qualified, callee))
            for index, keyword in passed:
                received = _parameter(target, index, keyword)
                if received is not None:
                    visit(callee, received)

    visit(start, parameter)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module", help="e.g. pipelines.finetune")
    parser.add_argument("function", help="e.g. run")
    parser.add_argument("parameter", help="e.g. params")
    parser.add_argument("--json", action="store_true", help="the walk as JSON")
    args = parser.parse_args(argv)
    result = walk(f"{args.module}.{args.function}", args.parameter)
    if args.json:
        calls = [{"caller": c.caller, "callee": c.callee, "climbs_back": c.climbs_back} for c in result.calls]
        print(json.dumps({"modules": result.modules, "climbs": result.climbs, "calls": calls}, indent=2))
        return 0
    print(f"{result.start}({args.parameter}): {len(result.modules)} modules, {len(result.calls)} calls, "
          f"{result.climbs} returning to a higher floor")  # fmt: skip
    print("  modules: " + ", ".join(result.modules))
    for call in result.calls:
        print(f"    {call.caller} -> {call.callee}" + ("   (returns up a floor)" if call.climbs_back else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
