"""`hyperguard twin status` says where the twin is still kinder than a real cluster."""

from __future__ import annotations

from typing import Any

import pytest

from hyperguard.cli import main as cli
from hyperguard_twin.leniencies import LENIENCIES


class TwinStatus:
    def __init__(self, *_args: Any) -> None:
        pass

    def twin_get(self, _what: str) -> dict[str, Any]:
        return {
            "endpoint": "http://127.0.0.1:1",
            "stack": "hyperguard",
            "uptime_s": 1.0,
            "time_scale": 60.0,
            "api_endpoint": "http://127.0.0.1:2",
            "resources": {},
            "not_created": {},
            "emulator_gaps": [],
            "leniencies": [{"emulates": what, "lenient": how} for what, how in LENIENCIES],
            "invocations": {},
            "function_errors": {},
            "queue_depth": {},
            "executions": {},
        }


def test_twin_status_lists_every_remaining_leniency(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "_service", TwinStatus)
    assert cli.main(["twin", "status"]) == 0
    out = capsys.readouterr().out
    assert "still kinder than a real cluster" in out
    for what, how in LENIENCIES:
        assert f"  {what}: {how}" in out
