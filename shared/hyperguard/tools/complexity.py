"""The complexity gate CI runs: no function or method worse than radon's rank C, and in the
twin no module over 500 lines or class over 300.

Rank C is a cyclomatic complexity of at most 20. The functions that were already worse when
the gate came are listed in pyproject.toml (`[tool.hyperguard.complexity] allowed`, each
with the complexity it had); they may get simpler, never more complex, and an entry is
removed once its function is back within C, so the list only shrinks (D65).

The twin is one small controller per system it stands in for (D160): a module past
`TWIN_MODULE_LINES` or a class past `TWIN_CLASS_LINES` is a second system moving in, to be
split along its seam.

`python -m hyperguard.tools.complexity` prints what breaks the gate and exits 1, or exits 0.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Function

ROOT = Path(__file__).resolve().parents[3]
PATHS = ("shared/hyperguard", "twin/hyperguard_twin", "functions", "bench")
WORST_ALLOWED = 20
"""The top of radon's rank C."""
TWIN = "twin/hyperguard_twin"
TWIN_MODULE_LINES = 500
TWIN_CLASS_LINES = 300


def complexities(root: Path = ROOT, paths: tuple[str, ...] = PATHS) -> Iterator[tuple[str, int]]:
    """(`path:Qualified.name`, cyclomatic complexity) of every function and method."""
    for top in paths:
        for path in sorted((root / top).rglob("*.py")):
            where = path.relative_to(root).as_posix()
            for block in cc_visit(path.read_text()):
                if isinstance(block, Function):  # methods come as functions, and in classes
                    yield f"{where}:{block.fullname}", block.complexity


def violations(measured: dict[str, int], allowed: dict[str, int]) -> list[str]:
    """What breaks the gate: a new function over the limit, a listed one grown, a stale entry."""
    found = []
    for name, score in sorted(measured.items()):
        if score <= WORST_ALLOWED:
            continue
        if name not in allowed:
            found.append(f"{name}: complexity {score} (rank worse than C): split it")
        elif score > allowed[name]:
            found.append(f"{name}: complexity {score}, listed at {allowed[name]}: it grew")
    for name, score in sorted(allowed.items()):
        if measured.get(name, 0) <= WORST_ALLOWED:
            found.append(f"{name}: listed at {score} but now within C: remove its entry")
        elif measured[name] < score:
            found.append(f"{name}: now {measured[name]}, listed at {score}: lower its entry")
    return found


def oversized(root: Path = ROOT, top: str = TWIN) -> list[str]:
    """The twin's modules over `TWIN_MODULE_LINES` lines and classes over `TWIN_CLASS_LINES`."""
    found = []
    for path in sorted((root / top).rglob("*.py")):
        where = path.relative_to(root).as_posix()
        text = path.read_text()
        if (lines := text.count("\n")) > TWIN_MODULE_LINES:
            found.append(f"{where}: {lines} lines, over {TWIN_MODULE_LINES}: split it")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                size = node.end_lineno - node.lineno + 1
                if size > TWIN_CLASS_LINES:
                    found.append(
                        f"{where}:{node.name}: class of {size} lines, over {TWIN_CLASS_LINES}"
                    )
    return found


def allowed_list(pyproject: Path = ROOT / "pyproject.toml") -> dict[str, int]:
    config = tomllib.loads(pyproject.read_text())
    listed = config.get("tool", {}).get("hyperguard", {}).get("complexity", {}).get("allowed", {})
    return {str(name): int(score) for name, score in listed.items()}


def main() -> int:
    found = violations(dict(complexities()), allowed_list()) + oversized()
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
