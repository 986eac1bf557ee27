"""Import direction between the library's packages, read from the code: scaling builds on
governance (the burst policy, placement's templates, the job lifecycle, the scheduler's
burst requests), so governance never imports scaling, and the two never form a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

LIBRARY = ROOT / "shared" / "hyperguard"


def imported(path: Path) -> set[str]:
    """The hyperguard modules a file imports, at any depth (function-level imports too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("hyperguard.")}


def test_governance_never_imports_scaling() -> None:
    offenders = sorted(
        f"{path.relative_to(ROOT)} imports {name}"
        for path in (LIBRARY / "governance").rglob("*.py")
        for name in imported(path)
        if name == "hyperguard.scaling" or name.startswith("hyperguard.scaling.")
    )
    assert offenders == []


def test_the_check_sees_an_import_inside_a_function() -> None:
    source = LIBRARY / "governance" / "jobs.py"
    assert "hyperguard.store.jobs" in imported(source)
    tree = "def f():\n    from hyperguard.scaling.burst import plan_burst\n"
    nodes = [n for n in ast.walk(ast.parse(tree)) if isinstance(n, ast.ImportFrom)]
    assert [n.module for n in nodes] == ["hyperguard.scaling.burst"]
