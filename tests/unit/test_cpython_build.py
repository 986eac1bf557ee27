"""tools/cpython.sh, the interpreter the Makefile's venvs are made with (D213): a machine
that cannot fetch or build it gets pyenv's python3.13 and a reason, never a failed set-up."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "cpython.sh"


def run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "HYPERGUARD_PYTHON"}
    return subprocess.run(
        ["bash", str(SCRIPT)],
        env={**base, "HYPERGUARD_PYTHON_CACHE": str(tmp_path / "cache"), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_an_unreachable_source_falls_back_to_pyenvs_python_and_says_why(tmp_path: Path) -> None:
    stubs = tmp_path / "bin"
    stubs.mkdir()
    curl = stubs / "curl"
    # What curl does on a machine whose network refuses the address: exit 6, no file.
    curl.write_text("#!/bin/sh\necho 'curl: (6) Could not resolve host' >&2\nexit 6\n")
    curl.chmod(0o755)

    result = run(tmp_path, PATH=f"{stubs}:{os.environ['PATH']}")

    assert result.returncode == 0, result.stderr
    assert result.stdout == "python3.13\n"
    assert "could not be fetched; using python3.13" in result.stderr
    assert not any((tmp_path / "cache").glob("cpython-*")), "no half-built interpreter is left"


def test_a_tarball_that_is_not_the_pinned_one_is_not_built(tmp_path: Path) -> None:
    stubs = tmp_path / "bin"
    stubs.mkdir()
    curl = stubs / "curl"
    # A download that succeeds with other bytes (a proxy's error page, a changed file).
    curl.write_text(
        '#!/bin/sh\nwhile [ "$1" != "-o" ]; do shift; done\necho "<html>not it</html>" > "$2"\n'
    )
    curl.chmod(0o755)

    result = run(tmp_path, PATH=f"{stubs}:{os.environ['PATH']}")

    assert result.stdout == "python3.13\n"
    assert "could not be fetched" in result.stderr
    assert "building" not in result.stderr


def test_an_interpreter_of_ones_own_is_printed_as_given(tmp_path: Path) -> None:
    result = run(tmp_path, HYPERGUARD_PYTHON="/opt/python/bin/python3.13")

    assert result.returncode == 0
    assert result.stdout == "/opt/python/bin/python3.13\n"
