"""Long twin commands tell their progress on stderr and leave stdout to the result."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from hyperguard.cli import main as cli
from hyperguard_twin import gameday, launch, scenario_commands


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
    monkeypatch.setattr(launch, "start_twin", lambda *_args, **_config: Twin())
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
    from hyperguard_twin import scenarios

    monkeypatch.setattr(launch, "start_twin", lambda *_args, **_config: Twin())
    monkeypatch.setattr(scenarios, "elastic_fault", lambda _twin: {"strategies": {}})
    assert cli.main(["twin", "scenario", "elastic-fault", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"strategies": {}}
    assert captured.err.splitlines()[0] == "elastic-fault [1/2] starting a twin"


def test_the_days_table_shows_the_waits_beside_hyperguards_own_time(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --json each side's average wait (simulated) is printed beside HyperGuard's
    own admission time on the wall clock, which the scaled clock does not stretch; and each
    side's cost over on-demand sized for the peak, per price basis."""
    from hyperguard_twin.day import SIDES

    def side(_args: Any, name: str) -> dict[str, Any]:
        result = {
            "gpu_hours_used": 10.0,
            "idle_gpu_hours": 1.0,
            "cost_usd": 100.0,
            "cost_usd_by_basis": {
                "published": 100.0 if name == "on_demand" else 60.0,
                "hyperpod_assumed": 200.0 if name == "on_demand" else 170.0,
            },
            "burst_nodes_peak": 0,
            "burst_nodes_at_end": 0,
            "jobs_completed": 11,
            "usd_per_used_gpu_hour": 10.0,
            "avg_wait_s_by_priority": {"inference": 65.5, "training": 64.8},
            "avg_admission_wall_s_by_priority": {"inference": 0.194, "training": 0.145},
        }
        return {
            "side": name,
            "result": result,
            "executions": {},
            "time_scale": 24.0,
            "hours": 4,
            "demand": [],
        }

    monkeypatch.setattr(scenario_commands, "_one_side", side)
    assert cli.main(["twin", "scenario", "day-in-the-life", "--hours", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (
        "cost over on-demand sized for the peak, published prices: hybrid 0.600, static 0.600, "
        "on_demand 1.000" in lines
    )
    for name in SIDES:
        assert (
            f"{name}: average wait by priority (simulated, submission to first step): "
            "inference 66 s, training 65 s; HyperGuard's own admission time (wall clock): "
            "inference 0.19 s, training 0.14 s" in lines
        )
