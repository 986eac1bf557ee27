"""The layer the twin's Lambda workers import, as `sam build` makes it: shared/Makefile's
recipe, built for this machine, with the runtime's own boto3 beside it."""

from __future__ import annotations

import atexit
import hashlib
import importlib.metadata
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hyperguard_twin.workdirs import owned_workdir

LAYER_PACKAGE_PREFIX = "layer-package-"


class LayerBuildError(RuntimeError):
    """The layer could not be built; the message holds the command and its stderr's tail."""


@dataclass(frozen=True)
class LayerPaths:
    package: Path  # holds hyperguard/
    deps: Path  # the layer's third-party packages
    runtime: Path  # boto3 and its dependencies: what Lambda's /var/runtime provides


_PARENT_MAKE = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")
"""What a make that started this process passes on: the recipe runs as it runs alone, never as
a sub-make of `make test -j2`, whose jobserver does not reach it (make then says so on stderr,
before the recipe's own error)."""


def _run(command: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k not in _PARENT_MAKE}
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    except OSError as exc:
        raise LayerBuildError(f"`{shlex.join(command)}` could not run: {exc}") from exc
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-20:])
        raise LayerBuildError(f"`{shlex.join(command)}` exited with {done.returncode}:\n{tail}")


def _build_once(final: Path, build: Callable[[Path], None]) -> Path:
    """`final`, built by `build` into a temporary sibling and renamed into place: concurrent
    builders never see a half-built directory, and the first to finish wins."""
    if final.is_dir():
        return final
    building = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        build(building)
        try:
            building.rename(final)
        except OSError:
            if not final.is_dir():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return final


def stage_layer(root: Path, cache_dir: Path, *, python: str = sys.executable) -> LayerPaths:
    """The layer for this machine, built with shared/Makefile's recipe; dependencies and the
    runtime's boto3 are cached in `cache_dir`, the hyperguard package is copied afresh."""
    shared = root / "shared"
    cache_dir.mkdir(parents=True, exist_ok=True)
    version = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # The requirements and the recipe decide what the layer holds.
    recipe = (shared / "requirements.txt").read_bytes() + (shared / "Makefile").read_bytes()
    key = hashlib.sha256(recipe + f"\0{version}\0{platform.machine()}".encode()).hexdigest()[:16]
    make = ["make", "-C", str(shared)]
    deps = _build_once(
        cache_dir / f"layer-deps-{key}",
        lambda d: _run(
            [*make, "layer-deps", f"ARTIFACTS_DIR={d}", "LAYER_PLATFORM=", f"PYTHON={python}"]
        ),
    )
    # The runtime's boto3 and botocore as this machine has them, both pinned: boto3 alone
    # admits any later botocore of its minor version, which the registry may serve by now.
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in ("boto3", "botocore")]
    pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    runtime = _build_once(
        cache_dir / f"runtime-{'-'.join(pins).replace('==', '-')}-{version}",
        lambda d: _run([*pip, "--target", str(d), *pins]),
    )
    # Copied afresh for each twin; a killed twin's copy is removed by the next one.
    package = owned_workdir(LAYER_PACKAGE_PREFIX, cache_dir)
    atexit.register(shutil.rmtree, package, True)
    _run([*make, "layer-package", f"ARTIFACTS_DIR={package}", f"PYTHON={python}"])
    return LayerPaths(package=package / "python", deps=deps / "python", runtime=runtime)
