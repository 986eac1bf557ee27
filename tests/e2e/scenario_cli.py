"""The measured twin commands as a user runs them: `hyperguard <command> --json`. Each
scenario has a module of its own, so that parallel workers take them apart."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from tests.conftest import ROOT


def run_cli(*args: str, timeout_s: float = 600) -> dict[str, Any]:
    """`hyperguard <args> --json` as a user runs it; its result object."""
    proc = subprocess.run(
        [sys.executable, "-m", "hyperguard.cli.main", *args, "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout[proc.stdout.index("{") :]))
