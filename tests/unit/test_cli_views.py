"""What people read (tables, the incident timeline) and what scripts read (--json only)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hyperguard.cli import main as cli
from hyperguard.models import Incident, Job, JobStatus
from hyperguard.models.records import JobRecord
from hyperguard.models.signals import Repair
from hyperguard_twin import commands as twin_commands
from hyperguard_twin import launch

T0 = datetime(2025, 1, 6, tzinfo=UTC)


def incident(incident_id: str, **fields: Any) -> Incident:
    """A GPU incident on i-0a opened at T0; `fields` add to or replace any of that."""
    return Incident(
        **{
            "incident_id": incident_id,
            "instance_id": "i-0a",
            "cluster": "hp",
            "kind": "gpu",
            "severity": "critical",
            "repair": Repair.REPLACE,
            "reason": "GPU fell off the bus",
            "opened_at": T0,
            "first_signal_at": T0,
        }
        | fields
    )


CLOSED = incident(
    "inc-1",
    status="resolved",
    resolution="recovered_on_its_own",
    action="replace",
    execution_arn="arn:aws:states:us-east-1:1:execution:NodeRecovery:inc-1",
    timings={"signal_to_healthy_s": 40.0, "signal_to_cordoned_s": 2.5},
    notes=["the node answered healthy before any repair"],
)
ESCALATED = incident("inc-2", status="needs_operator", notes=["OperatorVeto: vetoed by ann"])
RUNNING = incident("inc-3", status="recovering", action="reboot")


class Incidents:
    def recent(self, limit: int) -> list[Incident]:
        return [CLOSED, ESCALATED, RUNNING][:limit]

    def get(self, incident_id: str) -> Incident | None:
        return CLOSED if incident_id == "inc-1" else None

    def signals(self, _incident_id: str) -> list[dict[str, Any]]:
        return [{"kind": "gpu", "source": "hyperpod"}]


class StepFunctions:
    def describe_execution(self, executionArn: str) -> dict[str, Any]:
        return {"status": "SUCCEEDED"}

    def get_paginator(self, _name: str) -> Any:
        at = [T0 + timedelta(seconds=s) for s in range(6)]
        events = [
            {"type": "ExecutionStarted", "timestamp": at[0]},
            {
                "type": "TaskStateEntered",
                "timestamp": at[1],
                "stateEnteredEventDetails": {"name": "Diagnose"},
            },
            {
                "type": "TaskStateExited",
                "timestamp": at[3],
                "stateExitedEventDetails": {"name": "Diagnose"},
            },
            {
                "type": "TaskStateEntered",
                "timestamp": at[3],
                "stateEnteredEventDetails": {"name": "Cordon"},
            },
            {"type": "TaskFailed", "timestamp": at[4], "taskFailedEventDetails": {"error": "Boom"}},
        ]

        class Pages:
            def paginate(self, **_kwargs: Any) -> list[dict[str, Any]]:
                return [{"events": events}]

        return Pages()


class Service:
    def __init__(self, *_args: Any) -> None:
        pass

    def client(self, _name: str) -> Any:
        return StepFunctions()


@pytest.fixture(autouse=True)
def service(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "_service", Service)
    monkeypatch.setattr(cli, "_incident_store", lambda _args: Incidents())


def test_incidents_list_shows_how_each_ended(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["incidents", "list", "--limit", "3"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[2:]}
    assert "recovered_on_its_own" in rows["inc-1"] and "replace" not in rows["inc-1"]
    assert "escalated: OperatorVeto: vetoed by ann" in rows["inc-2"]
    assert "reboot under way" in rows["inc-3"]


def test_incidents_list_limit_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["incidents", "list", "--limit", "2", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [i["incident_id"] for i in listed] == ["inc-1", "inc-2"]


def test_incidents_show_is_a_timeline_with_the_execution_states(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["incidents", "show", "inc-1"]) == 0
    out = capsys.readouterr().out
    assert out.index("cordoned") < out.index("healthy")  # milestones in the order they came
    assert "execution SUCCEEDED" in out
    diagnose = next(line for line in out.splitlines() if line.startswith("Diagnose"))
    assert diagnose.split() == ["Diagnose", "1.0", "2.0", "done"]
    assert "failed: Boom" in out
    assert "the node answered healthy before any repair" in out


def test_incidents_show_json_holds_the_timeline_and_no_tokens(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["incidents", "show", "inc-1", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["timeline"] == [
        {"milestone": "cordoned", "after_s": 2.5},
        {"milestone": "healthy", "after_s": 40.0},
    ]
    assert [s["state"] for s in shown["execution"]["states"]] == ["Diagnose", "Cordon"]
    assert shown["signals"] == [{"kind": "gpu", "source": "hyperpod"}]
    assert "task_token" not in shown and "wait_token" not in shown


def test_jobs_list_json_gives_nodes_as_a_list(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    job = Job(job_id="a", team="nlp", status=JobStatus.RUNNING, nodes=["i-1", "i-2"])

    class Jobs:
        def records(self) -> list[JobRecord]:
            return [JobRecord(job=job)]

    monkeypatch.setattr(cli, "_job_store", lambda _args: Jobs())
    assert cli.main(["jobs", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["nodes"] == ["i-1", "i-2"]


class StubCluster:
    def instances(self) -> list[Any]:
        return []

    def runs(self) -> dict[str, Any]:
        return {}


class StubTwin:
    """What `twin demo` asks of a twin before and after its scenario."""

    cluster = StubCluster()

    def status(self) -> dict[str, Any]:
        return {"stack": "hyperguard", "resources": {}, "not_created": {}}

    def down(self) -> None:
        pass


def test_twin_demo_json_keeps_the_story_off_stdout(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from hyperguard_twin import demo

    result = {"settled": True, "dlq_depth": 0, "function_errors": {}}

    def scenario(_twin: Any, _events: Any, say: Any) -> dict[str, Any]:
        say("injecting 9 real sample events into the twin:")
        return result

    monkeypatch.setattr(launch, "start_twin", lambda _args: StubTwin())
    monkeypatch.setattr(demo, "run_scenario", scenario)
    monkeypatch.setattr(demo, "render", lambda _result: "the story so far")
    monkeypatch.setattr(
        demo, "report_data", lambda _result: {"title": "demo", "generated_at": "2026-11-22"}
    )
    report = tmp_path / "demo.html"
    assert cli.main(["twin", "demo", "--json", "--report", str(report)]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == result | {"report": str(report.resolve())}
    assert "injecting 9 real sample events" in captured.err
    assert "the story so far" in captured.err
    assert f"report: {report.resolve()}" in captured.err
    assert "what to try next" in captured.err
    assert "<h1>demo</h1>" in report.read_text()


def test_a_report_that_cannot_be_written_is_a_runtime_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from hyperguard_twin import demo

    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setattr(launch, "start_twin", lambda _args: StubTwin())
    monkeypatch.setattr(demo, "run_scenario", lambda *_a, **_k: {"settled": True})
    monkeypatch.setattr(demo, "render", lambda _result: "")
    monkeypatch.setattr(demo, "report_data", lambda _r: {"title": "t", "generated_at": "now"})
    assert cli.main(["twin", "demo", "--report", str(blocker / "demo.html")]) == 1
    err = capsys.readouterr().err
    assert "the report could not be written to" in err and "Traceback" not in err


def test_what_to_try_next_names_the_cli_as_it_can_be_typed_here(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`make demo` runs .venv/bin/hyperguard, which is not on PATH: its next steps must
    say .venv/bin/hyperguard; an installed one on PATH is just `hyperguard`."""
    from hyperguard_twin.demo import next_steps

    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    script = venv_bin / "hyperguard"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/nonexistent")
    steps = next_steps(twin_commands._cli_command(".venv/bin/hyperguard"))
    assert steps[0].startswith(".venv/bin/hyperguard twin up ")
    assert all(step.startswith(".venv/bin/hyperguard ") for step in steps)
    monkeypatch.setenv("PATH", str(venv_bin))
    assert twin_commands._cli_command(".venv/bin/hyperguard") == "hyperguard"
    assert twin_commands._cli_command("/x/main.py").endswith(" -m hyperguard.cli.main")
