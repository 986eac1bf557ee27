"""The layers of docs/architecture.md hold: import-linter checks pyproject.toml's contracts
([tool.importlinter], D110) over the library and the handlers."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from importlinter.cli import EXIT_STATUS_SUCCESS, lint_imports

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"


def test_the_contracts_are_the_layers_architecture_draws() -> None:
    config = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]
    assert {c["id"] for c in config["contracts"]} == {"layers", "store", "operator-side", "acyclic"}


def test_every_import_keeps_the_contracts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `functions` (the handlers) is a namespace package at the repository's root.
    monkeypatch.chdir(ROOT)
    status = lint_imports(config_filename=str(PYPROJECT), no_cache=True, no_logo=True)
    assert status == EXIT_STATUS_SUCCESS, capsys.readouterr().out
