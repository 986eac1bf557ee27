"""Long twin commands tell their progress on stderr and leave stdout to the result."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from hyperguard.cli import main as cli
from hyperguard.twin import gameday


class Twin:
    def down(self) -> None:
        pass


def fake_gameday(
    _twin: Any, *, measure: int, step: Callable[[str], None], **_inputs: Any
) -> dict[str, Any]:
    step("the jobs train to a first checkpoint")
    for number in range(1, measure + 1):
        step(f"failure {number} of {measure}")
    return {"failures": measure, "strategies": {}}


@pytest.mark.parametrize("terminal", [False, True])
def test_gameday_progress_goes_to_stderr_and_stdout_stays_json(
    terminal: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "_start_twin", lambda *_args, **_config: Twin())
    monkeypatch.setattr(gameday, "run", fake_gameday)
    monkeypatch.setattr("sys.stderr.isatty", lambda: terminal)  # a terminal: a rich bar
    argv = ["twin", "gameday", "--days", "30", "--measure", "2", "--json"]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"failures": 2, "strategies": {}}
    if terminal:
        assert "game day" in captured.err
    else:  # a log or a pipe: a line per step
        assert captured.err.splitlines() == [
            "game day [1/4] starting a twin",
            "game day [2/4] the jobs train to a first checkpoint",
            "game day [3/4] failure 1 of 2",
            "game day [4/4] failure 2 of 2",
        ]


def test_scenario_progress_goes_to_stderr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from hyperguard.twin import scenarios

    monkeypatch.setattr(cli, "_start_twin", lambda *_args, **_config: Twin())
    monkeypatch.setattr(scenarios, "elastic_fault", lambda _twin: {"strategies": {}})
    assert cli.main(["twin", "scenario", "elastic-fault", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"strategies": {}}
    assert captured.err.splitlines()[0] == "elastic-fault [1/2] starting a twin"
