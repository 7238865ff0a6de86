"""docs/architecture.md names code as ``path/to/module.py:Name.attr``: every such name exists.

The walk through one batch is only worth reading while it matches the code; a rename that
forgets the doc fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "architecture.md"
# `runtime/batches.py:BatchRunner._offsets`: a module path under pipeline/ and a dotted name
REFERENCE = re.compile(r"`((?:[a-z_]+/)*[a-z_]+\.py):([A-Za-z_][A-Za-z0-9_.]*)")


def _names(node: ast.stmt) -> set[str]:
    """The names a module- or class-level statement defines."""
    if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
        return {node.name}
    if isinstance(node, ast.Assign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {t.id for t in targets if isinstance(t, ast.Name)}
    if isinstance(node, ast.ImportFrom | ast.Import):
        return {a.asname or a.name.split(".")[-1] for a in node.names}
    return set()


def _defined(tree: ast.Module, dotted: str) -> bool:
    """Whether ``dotted`` (``Class.method``, ``function``, ``CONSTANT``) is defined in ``tree``."""
    scope: list[ast.stmt] = list(tree.body)
    for part in dotted.split("."):
        found = next((n for n in scope if part in _names(n)), None)
        if found is None:
            return False
        scope = list(found.body) if isinstance(found, ast.ClassDef) else []
    return True


def _module(path: str) -> Path | None:
    """``runtime/batches.py`` under pipeline/; a bare ``spark_kafka.py`` (the doc's package
    list names modules within their package) when exactly one module has that name."""
    module = ROOT / "pipeline" / path
    if module.is_file():
        return module
    found = list((ROOT / "pipeline").rglob(path)) if "/" not in path else []
    return found[0] if len(found) == 1 else None


def references() -> list[tuple[str, str]]:
    return REFERENCE.findall(DOC.read_text())


def test_the_doc_names_code():
    # the walk names dozens of functions: a regex gone wrong would pass on nothing
    assert len(references()) >= 20


def test_every_module_and_function_the_doc_names_exists():
    missing = []
    for path, name in references():
        module = _module(path)
        if module is None:
            missing.append(f"{path} (no such module, or more than one)")
            continue
        if not _defined(ast.parse(module.read_text()), name):
            missing.append(f"{path}:{name}")
    assert not missing, "docs/architecture.md names code that does not exist: " + ", ".join(
        sorted(set(missing))
    )
