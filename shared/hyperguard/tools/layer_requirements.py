"""Print the Lambda layer's requirements.txt: pyproject.toml's runtime dependencies and
everything they pull in, pinned at the versions of requirements/dev.lock.

One lock serves the tests, the twin and the layer, so the layer never ships a release the
tests did not run (D64). The closure comes from the lock's own `# via` annotations (uv pip
compile writes them): a locked package belongs to the layer when something in the layer
requires it.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
LOCK = ROOT / "requirements" / "dev.lock"
HEADER = "# Generated from pyproject.toml and requirements/dev.lock by `make lock`; do not edit.\n"
_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+)(?P<marker>\s*;.*)?$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")


def canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Locked:
    name: str
    line: str
    """`name==version` with its environment marker, if any."""
    required_by: frozenset[str]


def read_lock(text: str) -> dict[str, Locked]:
    """The lock's pins by canonical name, each with the packages that require it."""
    pins: dict[str, Locked] = {}
    current: tuple[str, str] | None = None
    parents: set[str] = set()

    def close() -> None:
        if current is not None:
            pins[canonical(current[0])] = Locked(current[0], current[1], frozenset(parents))

    for raw in text.splitlines():
        line = raw.strip()
        pin = _PIN.match(line)
        if pin:
            close()
            current, parents = (pin["name"], line), set()
        elif line.startswith("#") and current is not None:
            via = line.lstrip("#").strip().removeprefix("via").strip()
            if via and not via.startswith("-"):
                parents.add(canonical(via.split(" ", 1)[0]))
    close()
    return pins


def layer_requirements(pyproject: Path = ROOT / "pyproject.toml", lock: Path = LOCK) -> str:
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    pins = read_lock(lock.read_text())
    wanted = set()
    for dep in deps:
        match = _NAME.match(dep)
        if match is None or canonical(match[0]) not in pins:
            raise SystemExit(f"{dep!r} is not in {lock.name}: run `make lock`")
        wanted.add(canonical(match[0]))
    grew = True
    while grew:
        more = {name for name, p in pins.items() if p.required_by & wanted} - wanted
        wanted |= more
        grew = bool(more)
    return HEADER + "".join(f"{pins[name].line}\n" for name in sorted(wanted))


if __name__ == "__main__":
    print(layer_requirements(), end="")
