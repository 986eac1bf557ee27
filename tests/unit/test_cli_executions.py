"""`executions list|show` and `watch`, on a stubbed Step Functions and incident store."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError
from tests.unit.test_cli_errors import Unreachable, exit_status
from tests.unit.test_cli_views import T0, incident

from hyperguard.cli import main as cli
from hyperguard.cli.executions import execution_states
from hyperguard.models import Incident

MACHINE = "arn:aws:states:us-east-1:1:stateMachine:NodeRecovery"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def entered(name: str, s: float) -> dict[str, Any]:
    return {
        "type": "TaskStateEntered",
        "timestamp": at(s),
        "stateEnteredEventDetails": {"name": name},
    }


def exited(name: str, s: float) -> dict[str, Any]:
    return {
        "type": "TaskStateExited",
        "timestamp": at(s),
        "stateExitedEventDetails": {"name": name},
    }


def event(kind: str, s: float, **details: Any) -> dict[str, Any]:
    e: dict[str, Any] = {"type": kind, "timestamp": at(s)}
    if details:
        e[kind[0].lower() + kind[1:] + "EventDetails"] = details
    return e


# Diagnose is retried once after a Lambda error, then succeeds; Cordon fails, a Catch sends
# the execution to Escalate, and it ends in the RecoveryEscalated Fail state.
ESCALATED = [
    event("ExecutionStarted", 0),
    entered("Diagnose", 1),
    event("TaskScheduled", 1),
    event("TaskFailed", 2, error="Lambda.ServiceException", cause="busy"),
    event("TaskScheduled", 3),
    event("TaskSucceeded", 4),
    exited("Diagnose", 4),
    entered("Cordon", 4),
    event("TaskScheduled", 4),
    event("TaskFailed", 5, error="CordonError", cause="node is gone"),
    exited("Cordon", 5),
    entered("Escalate", 5),
    event("TaskScheduled", 5),
    event("TaskSucceeded", 6),
    exited("Escalate", 6),
    {"type": "FailStateEntered", "timestamp": at(6), "stateEnteredEventDetails": {"name": "Fail"}},
    event("ExecutionFailed", 7, error="RecoveryEscalated", cause="CordonError: node is gone"),
]
RUNNING = [event("ExecutionStarted", 0), entered("Diagnose", 0.5)]


class Paginator:
    def __init__(self, pages: list[dict[str, Any]], calls: list[dict[str, Any]]) -> None:
        self.pages, self.calls = pages, calls

    def paginate(self, **kwargs: Any) -> list[dict[str, Any]]:
        self.calls.append(kwargs)
        return self.pages


class StepFunctions:
    """Executions by name: status, start (s after T0), history, input."""

    def __init__(self) -> None:
        self.executions: dict[str, dict[str, Any]] = {
            "inc-old": {"status": "FAILED", "start": 0, "stop": 7, "events": ESCALATED},
            "inc-new": {"status": "RUNNING", "start": 100, "events": RUNNING},
        }
        self.calls: list[dict[str, Any]] = []

    def arn(self, name: str) -> str:
        return f"arn:aws:states:us-east-1:1:execution:NodeRecovery:{name}"

    def item(self, name: str) -> dict[str, Any]:
        e = self.executions[name]
        item = {
            "executionArn": self.arn(name),
            "name": name,
            "status": e["status"],
            "startDate": at(e["start"]),
        }
        if "stop" in e:
            item["stopDate"] = at(e["stop"])
        return item

    def get_paginator(self, operation: str) -> Paginator | History:
        if operation == "get_execution_history":
            return History(self)
        assert operation == "list_executions"
        items = [self.item(n) for n in self.executions]  # oldest first: the CLI sorts
        return Lister(items, self.calls)

    def describe_execution(self, executionArn: str) -> dict[str, Any]:
        name = executionArn.rsplit(":", 1)[-1]
        if name not in self.executions:
            raise ClientError(
                {"Error": {"Code": "ExecutionDoesNotExist", "Message": "Execution Does Not Exist"}},
                "DescribeExecution",
            )
        item = self.item(name) | {
            "input": json.dumps(
                {"incident_id": name, "instance_id": "i-0a", "cluster": "hp", "repair": "reboot"}
            )
        }
        if self.executions[name]["status"] == "FAILED":
            item |= {"error": "RecoveryEscalated", "cause": "CordonError: node is gone"}
        return item


class Lister(Paginator):
    def paginate(self, **kwargs: Any) -> list[dict[str, Any]]:
        self.calls.append(kwargs)
        wanted = kwargs.get("statusFilter")
        return [{"executions": [e for e in self.pages if wanted in (None, e["status"])]}]


class History:
    def __init__(self, sfn: StepFunctions) -> None:
        self.sfn = sfn

    def paginate(self, **kwargs: Any) -> list[dict[str, Any]]:
        self.sfn.calls.append(kwargs)
        events = self.sfn.executions[kwargs["executionArn"].rsplit(":", 1)[-1]]["events"]
        return [{"events": events[:3]}, {"events": events[3:]}]  # two pages


class Incidents:
    def __init__(self) -> None:
        self.records = [incident("inc-new", status="recovering", action="reboot")]

    def recent(self, limit: int) -> list[Incident]:
        return self.records[:limit]


class World:
    def __init__(self) -> None:
        self.sfn = StepFunctions()
        self.incidents = Incidents()


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> World:
    w = World()

    class Service:
        outputs = {"NodeRecoveryStateMachineArn": MACHINE}

        def __init__(self, *_args: Any) -> None:
            pass

        def client(self, name: str) -> Any:
            assert name == "stepfunctions"
            return w.sfn

    monkeypatch.setattr(cli, "_service", Service)
    monkeypatch.setattr(cli, "_incident_store", lambda _args: w.incidents)
    return w


# ---- the states of an execution -----------------------------------------------------------
def test_states_count_retries_and_say_how_each_ended() -> None:
    states = {s["state"]: s for s in execution_states(ESCALATED)}
    assert list(states) == ["Diagnose", "Cordon", "Escalate", "Fail"]
    diagnose = states["Diagnose"]
    assert (diagnose["entered_s"], diagnose["took_s"], diagnose["outcome"]) == (1.0, 3.0, "done")
    assert diagnose["retries"] == 1 and diagnose["error"] is None  # the retry made up for it
    cordon = states["Cordon"]  # failed, and a Catch carried on: still a failure
    assert (cordon["outcome"], cordon["error"], cordon["cause"]) == (
        "failed: CordonError",
        "CordonError",
        "node is gone",
    )
    assert cordon["retries"] == 0
    assert states["Escalate"]["outcome"] == "done"
    fail = states["Fail"]  # the execution ended in it
    assert (fail["outcome"], fail["took_s"]) == ("failed: RecoveryEscalated", 1.0)
    assert fail["cause"] == "CordonError: node is gone"


def test_a_running_state_and_an_aborted_one() -> None:
    assert execution_states(RUNNING)[0]["outcome"] == "running"
    aborted = execution_states([*RUNNING, event("ExecutionAborted", 2)])[0]
    assert (aborted["outcome"], aborted["took_s"]) == ("aborted", 1.5)
    assert execution_states([]) == []


# ---- executions list ----------------------------------------------------------------------
def test_list_is_newest_first_with_status_and_times(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["executions", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["name"], r["status"]) for r in rows] == [
        ("inc-new", "RUNNING"),
        ("inc-old", "FAILED"),
    ]
    old = rows[1]
    assert old["start"] == "2025-01-06T00:00:00.000+00:00" and old["duration_s"] == 7.0
    assert old["stop"] == "2025-01-06T00:00:07.000+00:00"
    assert rows[0]["stop"] is None and rows[0]["duration_s"] > 0  # running: so far
    assert world.sfn.calls[0]["stateMachineArn"] == MACHINE
    assert cli.main(["executions", "list"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["NAME", "STATUS", "START"]
    assert table[2].split()[:2] == ["inc-new", "RUNNING"]


def test_list_filters_by_status_and_limits(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["executions", "list", "--status", "FAILED", "--json"]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)] == ["inc-old"]
    assert world.sfn.calls[-1]["statusFilter"] == "FAILED"
    assert cli.main(["executions", "list", "--limit", "1", "--json"]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)] == ["inc-new"]
    assert world.sfn.calls[-1]["PaginationConfig"]["MaxItems"] == 1


# ---- executions show ----------------------------------------------------------------------
def test_show_reads_the_whole_history_and_summarises_the_input(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["executions", "show", "inc-old", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [s["state"] for s in shown["states"]] == ["Diagnose", "Cordon", "Escalate", "Fail"]
    assert shown["input"] == {
        "incident_id": "inc-old",
        "instance_id": "i-0a",
        "cluster": "hp",
        "repair": "reboot",
    }
    assert (shown["status"], shown["error"], shown["cause"]) == (
        "FAILED",
        "RecoveryEscalated",
        "CordonError: node is gone",
    )
    history_call = next(c for c in world.sfn.calls if "executionArn" in c)
    assert history_call["PaginationConfig"] == {"PageSize": 1000}
    # an ARN works as well as a name
    assert cli.main(["executions", "show", world.sfn.arn("inc-old"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "inc-old"


def test_show_for_people(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["executions", "show", "inc-old"]) == 0
    out = capsys.readouterr().out
    assert "execution inc-old: FAILED" in out
    assert "incident inc-old, node i-0a, cluster hp, repair reboot" in out
    assert "RecoveryEscalated: CordonError: node is gone" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    assert rows["Diagnose"][:5] == ["Diagnose", "1.0", "3.0", "done", "1"]
    assert rows["Cordon"][3:5] == ["failed:", "CordonError"]


def test_an_unknown_execution_is_one_line_and_exit_1(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    assert exit_status(["executions", "show", "inc-9", "--json"]) == 1
    captured = capsys.readouterr()
    assert (
        captured.err == "hyperguard: no execution inc-9 (hyperguard executions list shows them)\n"
    )
    assert captured.out == ""


def test_no_twin_is_one_line_and_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "_service", Unreachable)
    for argv in (
        ["executions", "list"],
        ["executions", "show", "inc-1"],
        ["watch", "--once"],
        ["watch", "--json"],
    ):
        assert exit_status(argv) == 1, argv
        no_twin = "hyperguard: no twin answers at http://127.0.0.1:9 (refused)\n"
        assert capsys.readouterr() == ("", no_twin), argv


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["executions", "list", "--limit", "0"], "0 is not a positive whole number"),
        (["executions", "list", "--status", "DONE"], "invalid choice"),
        (["watch", "--interval", "0.1"], "0.1 is not a number from 0.5 to 60"),
        (["watch", "--interval", "61"], "61 is not a number from 0.5 to 60"),
        (["watch", "--interval", "nan"], "nan is not a number from 0.5 to 60"),
        (["watch", "--interval", "soon"], "soon is not a number"),
    ],
)
def test_usage_errors_exit_2(
    argv: list[str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert exit_status(argv) == 2
    assert complaint in capsys.readouterr().err


# ---- watch --------------------------------------------------------------------------------
def test_watch_once_prints_where_everything_stands_as_json_lines(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["watch", "--once", "--json"]) == 0
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in captured.out.splitlines()]
    assert [(c["type"], c.get("name") or c["incident_id"]) for c in lines] == [
        ("execution", "inc-new"),  # oldest first: where it stands since 0.5 s
        ("execution", "inc-old"),  # failed at 7 s
        ("incident", "inc-new"),  # as seen now
    ]
    assert lines[2]["status"] == "recovering" and lines[2]["outcome"] == "reboot under way"
    assert lines[1] | {"at": None} == {
        "at": None,
        "type": "execution",
        "name": "inc-old",
        "status": "FAILED",
        "state": "Fail",
        "error": "RecoveryEscalated",
        "cause": "CordonError: node is gone",
        "execution_arn": world.sfn.arn("inc-old"),
    }
    assert (lines[0]["status"], lines[0]["state"]) == ("RUNNING", "Diagnose")
    assert captured.err == ""


def test_watch_prints_each_change_until_ctrl_c(
    world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Between two polls the running execution enters two states and ends, and its incident
    is resolved: each is one line; what did not change is not printed again."""
    naps: list[float] = []

    def sleep(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 1:
            world.sfn.executions["inc-new"] |= {
                "status": "SUCCEEDED",
                "stop": 110,
                "events": [
                    *RUNNING,
                    exited("Diagnose", 2),
                    entered("Reboot", 2),
                    exited("Reboot", 5),
                    entered("CloseIncident", 5),
                    exited("CloseIncident", 6),
                    event("ExecutionSucceeded", 6),
                ],
            }
            world.incidents.records = [
                incident("inc-new", status="resolved", resolution="rebooted")
            ]
        elif len(naps) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr("hyperguard.cli.watch.time.sleep", sleep)
    assert exit_status(["watch", "--interval", "0.5"]) == 130
    captured = capsys.readouterr()
    assert naps == [0.5, 0.5, 0.5]
    changes = [line.split()[1:] for line in captured.out.splitlines()]
    # Each poll's changes oldest first: the states the executions entered, then the incident
    # as seen at the poll.
    assert changes == [
        ["execution", "inc-new", "RUNNING", "Diagnose"],
        [
            "execution",
            "inc-old",
            "FAILED",
            "Fail",
            "RecoveryEscalated:",
            "CordonError:",
            "node",
            "is",
            "gone",
        ],
        ["incident", "inc-new", "i-0a", "recovering", "(reboot", "under", "way)"],
        # the second poll: what changed, oldest first
        ["execution", "inc-new", "RUNNING", "Reboot"],
        ["execution", "inc-new", "RUNNING", "CloseIncident"],
        ["execution", "inc-new", "SUCCEEDED", "CloseIncident"],
        ["incident", "inc-new", "i-0a", "resolved", "(rebooted)"],
    ]
    assert captured.err.splitlines() == [
        "watching incidents and recovery executions every 0.5 s (Ctrl-C stops)",
        "hyperguard: interrupted",
    ]


def test_a_state_that_decided_something_says_what() -> None:
    def exited_with(name: str, s: float, output: Any) -> dict[str, Any]:
        e = exited(name, s)
        e["stateExitedEventDetails"]["output"] = output
        return e

    history = [
        event("ExecutionStarted", 0),
        entered("Diagnose", 0),
        exited_with("Diagnose", 1, json.dumps({"verdict": "repair", "action": "replace"})),
        entered("CheckHealth", 1),
        exited_with("CheckHealth", 2, json.dumps({"health": "pending"})),
        entered("Drain", 2),
        exited_with("Drain", 3, json.dumps({"verdict": "repair"})),  # not its own decision
        entered("CloseIncident", 3),
        exited_with("CloseIncident", 4, "not json"),
    ]
    assert [s["outcome"] for s in execution_states(history)] == [
        "done: repair, replace",
        "done: pending",
        "done",
        "done",
    ]


def health_loop(polls: int, s: float) -> list[dict[str, Any]]:
    """NodeRecovery's health-polling loop, `polls` times round from `s` (a second a state)."""
    events = []
    for n in range(polls):
        t = s + 3 * n
        for offset, name in enumerate(("WaitForRepair", "CheckHealth", "RouteHealth")):
            events += [entered(name, t + offset), exited(name, t + offset + 1)]
    return events


def test_watch_tells_a_new_execution_from_its_first_state_and_folds_its_health_polls(
    world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An execution that starts while watching, already in its health-polling loop at the
    next poll, is told from Diagnose on; 12 polls are a line as the loop begins and one with
    the count as it ends, not 36."""
    naps: list[float] = []
    replaced = [
        event("ExecutionStarted", 200),
        entered("Diagnose", 200),
        exited("Diagnose", 201),
        entered("Cordon", 201),
        exited("Cordon", 202),
        entered("Repair", 202),
        exited("Repair", 203),
    ]

    def sleep(seconds: float) -> None:
        naps.append(seconds)
        new = world.sfn.executions.setdefault(
            "inc-replace", {"status": "RUNNING", "start": 200, "events": replaced}
        )
        if len(naps) == 1:  # first seen five polls into the loop
            new["events"] = replaced + health_loop(5, 203)
        elif len(naps) == 2:
            new["events"] = [
                *replaced,
                *health_loop(12, 203),
                entered("ReturnToService", 239),
                exited("ReturnToService", 240),
            ]
        elif len(naps) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr("hyperguard.cli.watch.time.sleep", sleep)
    assert exit_status(["watch", "--json"]) == 130
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    told = [(c["state"], c.get("health_polls")) for c in lines if c.get("name") == "inc-replace"]
    assert told == [
        ("Diagnose", None),
        ("Cordon", None),
        ("Repair", None),
        ("WaitForRepair", None),  # the loop begins
        ("WaitForRepair", 12),  # ... and ends, after 12 health checks
        ("ReturnToService", None),
    ]
    assert next(c for c in lines if c.get("health_polls"))["at"] == at(239).isoformat(
        timespec="milliseconds"
    )


def test_watch_says_where_a_polling_execution_stands_and_how_it_ended(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    world.sfn.executions["inc-new"]["events"] = [*RUNNING, *health_loop(4, 1)]
    world.sfn.executions["inc-old"]["events"] = [
        *RUNNING,
        *health_loop(7, 1),
        event("ExecutionFailed", 30, error="States.Timeout", cause="no health"),
    ]
    assert cli.main(["watch", "--once"]) == 0
    out = [line.split()[1:] for line in capsys.readouterr().out.splitlines()]
    assert ["execution", "inc-old", "RUNNING", "WaitForRepair", "7", "health", "polls"] in out
    assert ["execution", "inc-new", "RUNNING", "WaitForRepair", "4", "health", "polls"] in out


def test_the_health_polling_loop_is_one_row_with_its_count_of_checks() -> None:
    from hyperguard.cli.executions import fold_poll_loop

    def state(name: str, at: float, took: float | None, outcome: str = "done") -> dict[str, Any]:
        return {"state": name, "entered_s": at, "took_s": took, "outcome": outcome}

    states = [state("Repair", 0, 1)]
    for i in range(30):  # thirty rounds of 30 s
        base = 1 + 30 * i
        states += [
            state("WaitForRepair", base, 29.5),
            state("CheckHealth", base + 29.5, 0.4, "done: pending" if i < 29 else "done: healthy"),
            state("RouteHealth", base + 29.9, 0.1),
        ]
    states.append(state("ReturnToService", 901, 0.5))
    folded = fold_poll_loop(states)
    assert [s["state"] for s in folded] == [
        "Repair",
        "WaitForRepair / CheckHealth / RouteHealth (x30)",
        "ReturnToService",
    ]
    loop = folded[1]
    assert (loop["entered_s"], loop["took_s"]) == (1, 900.0)
    assert loop["outcome"] == "30 health check(s), last: done: healthy"
    still = fold_poll_loop([*states[:5], state("WaitForRepair", 61, None, "running")])
    assert still[-1]["took_s"] is None and still[-1]["state"].endswith("(x1)")
