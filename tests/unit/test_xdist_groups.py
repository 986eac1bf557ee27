"""`--dist loadgroup` keeps a module whose tests share a wider fixture on one worker (the
Makefile's runs; tests/conftest.py marks the groups). When it silently stops (pytest 9.2 with
pytest-xdist 3.8: pytest-dev/pytest-xdist#1386), every e2e module's twin is built once per
worker that draws one of its tests, and nothing else fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

MODULE = """
import os
import pytest

@pytest.fixture(scope="module")
def shared():
    return object()

@pytest.mark.parametrize("n", range(6))
def test_grouped(shared, n):
    with open(os.environ["WORKERS_SEEN"], "a") as seen:
        seen.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
"""


def test_a_module_with_a_module_scoped_fixture_runs_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_collection_modifyitems  # noqa: F401\n"
    )
    (tmp_path / "test_grouped.py").write_text(MODULE)
    seen = tmp_path / "workers"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WORKERS_SEEN": str(seen)}
    options = ["-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", "-o", "addopts="]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *options, "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workers = seen.read_text().split()
    assert len(workers) == 6 and len(set(workers)) == 1, workers
