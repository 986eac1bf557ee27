"""Print the Lambda layer's requirements.txt from pyproject.toml's runtime dependencies."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HEADER = "# Generated from pyproject.toml by `make layer-requirements`; do not edit.\n"


def layer_requirements(pyproject: Path = ROOT / "pyproject.toml") -> str:
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    return HEADER + "".join(f"{dep}\n" for dep in deps)


if __name__ == "__main__":
    print(layer_requirements(), end="")
