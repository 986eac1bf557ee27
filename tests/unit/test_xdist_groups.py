"""The Makefile's xdist scheduling, each on a small project of its own run by pytest.

`--dist loadgroup` keeps a module whose tests share a wider fixture on one worker
(tests/conftest.py marks the groups). When it silently stops (pytest 9.2 with pytest-xdist
3.8: pytest-dev/pytest-xdist#1386), every e2e module's twin is built once per worker that
draws one of its tests, and nothing else fails. `--twins-at-once` (tests/xdist_twins.py) runs
never more e2e modules at once than the cap, the other workers on the tests without a twin
meanwhile; and the long-first order names only tests that exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT
from tests.xdist_twins import LONGEST_FIRST


def pytest_in(
    project: Path, *options: str, env: dict[str, str], timeout_s: float = 180
) -> subprocess.CompletedProcess[str]:
    """pytest on `project` (its own rootdir, none of this repository's options), with
    `env` added to this process's environment and this repository importable."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts="]
    return subprocess.run(
        [*command, "--rootdir", str(project), *options, str(project)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        cwd=project,
    )


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
    options = ("-n", "2", "--dist", "loadgroup")
    proc = pytest_in(tmp_path, *options, env={"WORKERS_SEEN": str(seen)}, timeout_s=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workers = seen.read_text().split()
    assert len(workers) == 6 and len(set(workers)) == 1, workers


HOOKS = (
    "from tests.conftest import (  # noqa: F401\n"
    "    pytest_addoption, pytest_collection_modifyitems, pytest_xdist_make_scheduler)\n"
)
WAIT = """
import os, time
def wait(what):
    deadline = time.monotonic() + 60
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
"""
TWIN_MODULE = (
    WAIT
    + """
import pytest
ALIVE = os.environ["ALIVE"]

@pytest.fixture(scope="module")
def twin(request):
    mine = os.path.join(ALIVE, request.module.__name__)
    open(mine, "w").close()
    with open(os.environ["OVERLAPS"], "a") as log:
        log.write(f"{len(os.listdir(ALIVE))}\\n")
    yield
    os.remove(mine)

def test_waits_for_the_worker_without_a_twin(twin):
    wait(lambda: os.path.exists(os.environ["BESIDE"]))
    open(os.environ["ACK"], "w").close()
"""
)
PLAIN_MODULE = (
    WAIT
    + """
def test_runs_beside_a_twin():
    open(os.environ["BESIDE"], "w").close()
    wait(lambda: os.path.exists(os.environ["ACK"]))
"""
)


def twin_project(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """pytest on two e2e modules (each a "twin": a module fixture) and one test without."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "conftest.py").write_text(HOOKS)
    for tier, modules in (("e2e", ("test_a", "test_b")), ("integration", ("test_c",))):
        folder = tmp_path / "tests" / tier
        folder.mkdir(parents=True, exist_ok=True)
        for module in modules:
            body = TWIN_MODULE if tier == "e2e" else PLAIN_MODULE
            (folder / f"{module}.py").write_text(body)
    (tmp_path / "alive").mkdir()
    files = ("alive", "overlaps", "beside", "ack")
    return pytest_in(tmp_path, *options, env={name.upper(): str(tmp_path / name) for name in files})


def test_one_twin_at_a_time_while_the_other_worker_runs_the_rest(tmp_path: Path) -> None:
    """Without the cap both workers take an e2e module, each waits for the test without a
    twin (queued behind one of them) and both time out."""
    options = ("-n", "2", "--dist", "loadgroup", "--no-loadscope-reorder", "--twins-at-once", "1")
    proc = twin_project(tmp_path, *options)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 passed" in proc.stdout
    assert (tmp_path / "overlaps").read_text().split() == ["1", "1"]


def test_the_cap_needs_load_groups_and_a_positive_number(tmp_path: Path) -> None:
    proc = twin_project(tmp_path, "-n", "2", "--dist", "load", "--twins-at-once", "1")
    assert proc.returncode != 0
    assert "--twins-at-once needs --dist loadgroup" in proc.stderr
    proc = twin_project(tmp_path / "zero", "-n", "2", "--dist", "loadgroup", "--twins-at-once", "0")
    assert proc.returncode != 0
    assert "--twins-at-once must be at least 1, not 0" in proc.stderr


def test_every_unit_named_longest_first_exists() -> None:
    for entry in LONGEST_FIRST:
        path, _, test = entry.partition("::")
        source = (ROOT / path).read_text()
        assert not test or re.search(rf"^def {re.escape(test)}\(", source, re.M), entry


DYING = """
import os
import signal

import pytest

@pytest.mark.parametrize("n", range(8))
def test_before(n):
    pass

def test_ends_its_process():
    os.kill(os.getpid(), signal.SIGTERM)

@pytest.mark.parametrize("n", range(8))
def test_after(n):
    pass
"""


def test_a_worker_that_dies_fails_the_run_at_once(tmp_path: Path) -> None:
    """With the Makefile's options a run whose worker dies ends, failed, naming the test;
    with xdist's default (a replacement worker) the same run waited for work that was never
    sent."""
    makefile = (ROOT / "Makefile").read_text()
    found = re.search(r"^PYTEST := \$\(PY\) -m pytest (.*)$", makefile, re.M)
    assert found is not None
    options = [o for o in found.group(1).split() if o.startswith("--max-worker-restart")]
    assert options == ["--max-worker-restart=0"]
    (tmp_path / "test_dying.py").write_text(DYING)
    proc = pytest_in(tmp_path, "-n", "2", "--dist", "loadgroup", *options, env={}, timeout_s=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "crashed while running 'test_dying.py::test_ends_its_process'" in proc.stdout
