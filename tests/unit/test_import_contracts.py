"""The layers of docs/architecture.md hold: import-linter checks pyproject.toml's contracts
([tool.importlinter], D110) over the library and the handlers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from importlinter.cli import EXIT_STATUS_SUCCESS, lint_imports

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"


def test_the_contracts_are_the_layers_architecture_draws() -> None:
    config = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]
    assert {c["id"] for c in config["contracts"]} == {
        "layers",
        "store",
        "operator-side",
        "acyclic",
        "twin-outside",
        "sdk",
        "pure",
    }


def test_no_import_cycle_is_excused() -> None:
    """Cycles are broken, not allowed: the acyclic contract ignores no import."""
    config = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]
    (acyclic,) = [c for c in config["contracts"] if c["id"] == "acyclic"]
    assert acyclic.get("ignore_imports", []) == []


def test_every_import_keeps_the_contracts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `functions` (the handlers) is a namespace package at the repository's root.
    monkeypatch.chdir(ROOT)
    status = lint_imports(config_filename=str(PYPROJECT), no_cache=True, no_logo=True)
    assert status == EXIT_STATUS_SUCCESS, capsys.readouterr().out


def test_the_pass_decisions_load_no_store_adapter_or_sdk() -> None:
    """What the contracts say, as the interpreter does it: importing the scheduling pass's
    decisions, with the library alone on the path as in the Lambda layer, loads no boto3,
    botocore, store, cluster adapter or messaging module."""
    probe = "import json, sys, hyperguard.governance.decide\nprint(json.dumps(sorted(sys.modules)))"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    answer = subprocess.run(
        [sys.executable, "-c", probe],
        env=env | {"PYTHONPATH": str(ROOT / "shared")},
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = json.loads(answer.stdout)
    heavy = ("boto3", "botocore", "hyperguard.store", "hyperguard.cluster", "hyperguard.messaging")
    assert [m for m in loaded if m.startswith(heavy)] == []
    assert "hyperguard.governance.decide" in loaded
