"""The code a stage runs: the project's modules its module imports, transitively, and a version of them.

Imports are read from the source (every `import` and `from ... import`, inside functions too, since stages
import heavy modules lazily), so the closure is what the stage can execute, not what a run happened to touch.
`dvc.yaml` must list every file of a stage's closure among its deps (a test checks it); the stage writes
`code_version(module)` into its output, so an output says which code made it and DVC, which hashes the same
files, reruns the stage whenever that version would change.
"""

from __future__ import annotations

import ast
import hashlib
from functools import cache
from pathlib import Path

from pipelines.tracking import ROOT

PACKAGES = ("dl2", "pipelines")
"""Top-level packages of the project; imports of anything else are third-party."""


def module_file(module: str, root: Path = ROOT) -> Path | None:
    """The source file of a project module (a package's `__init__.py`), or None if it is not one."""
    if module.partition(".")[0] not in PACKAGES:
        return None
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _package(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def imported_modules(module: str, root: Path = ROOT) -> set[str]:
    """Project modules that `module`'s source imports directly (parent packages included, as Python runs them)."""
    path = module_file(module, root)
    if path is None:
        return set()
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = _package(module, path).split(".")
                parent = package[: len(package) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            # `from package import name` imports the submodule `package.name` when there is one
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        for name in names:
            parts = name.split(".")
            for end in range(1, len(parts) + 1):
                prefix = ".".join(parts[:end])
                if module_file(prefix, root) is not None:
                    found.add(prefix)
    found.discard(module)
    return found


@cache
def closure(module: str, root: Path = ROOT) -> tuple[Path, ...]:
    """Every project source file that running `module` may execute (itself included), sorted."""
    seen: set[str] = set()
    pending = [module, *(".".join(module.split(".")[:end]) for end in range(1, module.count(".") + 1))]
    while pending:
        name = pending.pop()
        if name in seen or module_file(name, root) is None:
            continue
        seen.add(name)
        pending.extend(imported_modules(name, root) - seen)
    files = {module_file(name, root) for name in seen}
    return tuple(sorted(path for path in files if path is not None))


def code_version(module: str, root: Path = ROOT) -> str:
    """A short digest of the source of `module`'s closure (paths relative to `root` and contents)."""
    digest = hashlib.sha256()
    for path in closure(module, root):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]
