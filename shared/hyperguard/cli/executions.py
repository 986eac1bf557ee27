"""`hyperguard executions list|show`: the NodeRecovery state machine's executions, read from
Step Functions. `incidents show` and `watch` read an execution through the same functions."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from hyperguard.cli.deps import Deps
from hyperguard.cli.options import add_group, positive_int
from hyperguard.cli.output import CliError, print_json, print_renderable, print_table, table

STATUSES = ["RUNNING", "SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"]

LIST_COLUMNS = [
    ("name", "NAME"),
    ("status", "STATUS"),
    ("start", "START"),
    ("stop", "STOP"),
    ("duration_s", "DURATION (S)"),
]

STATE_COLUMNS = [
    ("state", "STATE"),
    ("entered_s", "ENTERED (S)"),
    ("took_s", "TOOK (S)"),
    ("outcome", "OUTCOME"),
]

POLL_LOOP = ("WaitForRepair", "CheckHealth", "RouteHealth")
"""NodeRecovery's health-polling loop: a replacement goes round it dozens of times, so the
views fold it (`fold_poll_loop`; `watch` into a line as it begins and one as it ends)."""


def fold_poll_loop(states: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`execution_states` with each run of the health-polling loop as one row: when it was
    entered, how long it went round, and how many health checks it made."""
    folded: list[dict[str, Any]] = []
    run: list[dict[str, Any]] = []

    def flush() -> None:
        if not run:
            return
        first, last = run[0], run[-1]
        checks = [s for s in run if s["state"] == "CheckHealth"]
        took = None if last["took_s"] is None else last["entered_s"] + last["took_s"]
        outcome = checks[-1]["outcome"] if checks else last["outcome"]
        folded.append(
            first
            | {
                "state": f"{' / '.join(POLL_LOOP)} (x{len(checks)})",
                "took_s": None if took is None else round(took - first["entered_s"], 3),
                "outcome": f"{len(checks)} health check(s), last: {outcome}",
            }
        )
        run.clear()

    for state in states:
        if state["state"] in POLL_LOOP:
            run.append(state)
            continue
        flush()
        folded.append(state)
    flush()
    return folded


INPUT_SUMMARY = ("incident_id", "instance_id", "cluster", "repair", "kind", "redrive")
"""What an execution's input says about the recovery (the payload ingestion and the
operator start it with)."""

_EXECUTION_ENDED = ("ExecutionFailed", "ExecutionTimedOut", "ExecutionAborted")

DECIDED = {
    "Diagnose": ("verdict", "action"),
    "GuardBlastRadius": ("verdict",),
    "Repair": ("action",),
    "CheckHealth": ("health",),
    "CloseIncident": ("resolution",),
}
"""What a successful state decided, from its output (the recovery's fields): the timeline
shows `done: repair, replace` rather than `done`."""


def _decided(state: str, output: str | None) -> str:
    keys = DECIDED.get(state)
    if not keys or not output:
        return "done"
    try:
        fields = json.loads(output)
    except ValueError:
        return "done"
    if not isinstance(fields, dict):
        return "done"
    said = [str(fields[k]) for k in keys if isinstance(fields.get(k), str | int)]
    return f"done: {', '.join(said)}" if said else "done"


# ---- reading Step Functions ---------------------------------------------------------------
def state_machine(deps: Deps, args: argparse.Namespace) -> tuple[Any, str]:
    """The Step Functions client and the stack's NodeRecovery state machine ARN."""
    service = deps.service(args)
    arn = service.outputs["NodeRecoveryStateMachineArn"]
    return service.client("stepfunctions"), arn


def history(sfn: Any, execution_arn: str) -> list[dict[str, Any]]:
    """Every event of the execution, oldest first (a long retry loop runs to many pages)."""
    pages = sfn.get_paginator("get_execution_history").paginate(
        executionArn=execution_arn, PaginationConfig={"PageSize": 1000}
    )
    return [event for page in pages for event in page["events"]]


def execution_states(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The states an execution went through, in order: when each was entered (seconds after
    the execution started), how long it took, its retries, and how it ended: `done` (with
    what it decided, for the states in DECIDED), `failed: ERROR` (with `error` and `cause`;
    also a failure a Catch handled), `aborted`, or `running`."""
    if not events:
        return []
    start: datetime = events[0]["timestamp"]
    states: list[dict[str, Any]] = []
    attempts, failed = 0, False
    for event in events:
        kind = event["type"]
        at = round((event["timestamp"] - start).total_seconds(), 3)
        if "stateEnteredEventDetails" in event:
            states.append(
                {
                    "state": event["stateEnteredEventDetails"]["name"],
                    "entered_at": _iso(event["timestamp"]),
                    "entered_s": at,
                    "took_s": None,
                    "outcome": "running",
                    "retries": 0,
                    "error": None,
                    "cause": None,
                }
            )
            attempts, failed = 0, False
            continue
        if not states or states[-1]["took_s"] is not None:
            continue  # before the first state, or between states (ExecutionSucceeded)
        current = states[-1]
        if "stateExitedEventDetails" in event:
            current["took_s"] = round(at - current["entered_s"], 3)
            exit_ = event["stateExitedEventDetails"]
            current["outcome"] = (
                f"failed: {current['error']}"
                if failed
                else _decided(exit_["name"], exit_.get("output"))
            )
        elif kind.endswith("Scheduled"):  # TaskScheduled, LambdaFunctionScheduled: one try
            attempts += 1
            current["retries"] = max(attempts - 1, 0)
            failed = False
        elif kind.endswith("Succeeded"):  # a later attempt made up for an earlier failure
            current["error"] = current["cause"] = None
            failed = False
        elif kind == "ExecutionAborted":
            current["took_s"] = round(at - current["entered_s"], 3)
            current["outcome"] = "aborted"
        elif kind.endswith(("Failed", "TimedOut")):
            details: dict[str, Any] = next(
                (v for k, v in event.items() if k.endswith("EventDetails")), {}
            )
            current["error"] = details.get("error") or kind
            current["cause"] = details.get("cause")
            current["outcome"] = f"failed: {current['error']}"
            failed = True
            if kind in _EXECUTION_ENDED:  # the state the execution ended in (a Fail state)
                current["took_s"] = round(at - current["entered_s"], 3)
    return states


def execution_row(execution: dict[str, Any], now: datetime | None = None) -> dict[str, Any]:
    """A ListExecutions or DescribeExecution item as people and scripts read it; a running
    execution's duration is how long it has run so far."""
    arn = execution["executionArn"]
    start: datetime | None = execution.get("startDate")
    stop: datetime | None = execution.get("stopDate")
    end = stop or now or datetime.now(UTC)
    return {
        "name": execution.get("name") or arn.rsplit(":", 1)[-1],
        "status": execution["status"],
        "start": _iso(start),
        "stop": _iso(stop),
        "duration_s": round((end - start).total_seconds(), 3) if start else None,
        "execution_arn": arn,
    }


def recent(sfn: Any, machine_arn: str, limit: int, status: str | None = None) -> list[Any]:
    """At most `limit` executions of the machine, newest first."""
    query: dict[str, Any] = {"stateMachineArn": machine_arn}
    if status:
        query["statusFilter"] = status
    pages = sfn.get_paginator("list_executions").paginate(
        **query, PaginationConfig={"MaxItems": limit, "PageSize": min(limit, 1000)}
    )
    executions = [e for page in pages for e in page["executions"]]
    executions.sort(key=lambda e: e["startDate"], reverse=True)
    return executions[:limit]


def describe(sfn: Any, execution_arn: str) -> dict[str, Any]:
    """One execution: status and times, what its input says, its error and cause if it
    failed, and its states (`executions show`, `incidents show`)."""
    execution = sfn.describe_execution(executionArn=execution_arn)
    return execution_row({"executionArn": execution_arn} | execution) | {
        "input": _input_summary(execution.get("input")),
        "error": execution.get("error"),
        "cause": execution.get("cause"),
        "states": execution_states(history(sfn, execution_arn)),
    }


def execution_arn(machine_arn: str, name_or_arn: str) -> str:
    if name_or_arn.startswith("arn:"):
        return name_or_arn
    from hyperguard.messaging import RecoveryWorkflows

    return RecoveryWorkflows(machine_arn).execution_arn(name_or_arn)


def _input_summary(text: str | None) -> dict[str, Any]:
    try:
        payload = json.loads(text or "{}")
    except ValueError:
        return {}
    if not isinstance(payload, dict):
        return {}
    return {key: payload[key] for key in INPUT_SUMMARY if key in payload}


def _iso(at: datetime | None) -> str | None:
    return at.isoformat(timespec="milliseconds") if at else None


# ---- views --------------------------------------------------------------------------------
def render_execution(detail: dict[str, Any]) -> Any:
    from rich.console import Group
    from rich.text import Text

    facts = detail["input"]
    lines = [
        f"execution {detail['name']}: {detail['status']}",
        detail["execution_arn"],
        f"incident {facts.get('incident_id', '-')}, node {facts.get('instance_id', '-')}"
        + "".join(f", {key} {facts[key]}" for key in INPUT_SUMMARY[2:] if key in facts),
        f"started {detail['start']}, stopped {detail['stop'] or '-'}, {detail['duration_s']} s",
    ]
    if detail.get("error") or detail.get("cause"):
        lines.append(f"{detail.get('error') or 'error'}: {detail.get('cause') or '-'}")
    return Group(
        Text("\n".join(lines)),
        table(
            detail["states"],
            [*STATE_COLUMNS, ("retries", "RETRIES"), ("cause", "CAUSE")],
            title="states",
        ),
    )


# ---- commands -----------------------------------------------------------------------------
def cmd_list(args: argparse.Namespace, deps: Deps) -> int:
    sfn, machine = state_machine(deps, args)
    now = datetime.now(UTC)
    rows = [execution_row(e, now) for e in recent(sfn, machine, args.limit, args.status)]
    if args.json:
        print_json(rows)
    else:
        print_table(rows, LIST_COLUMNS)
    return 0


def cmd_show(args: argparse.Namespace, deps: Deps) -> int:
    from botocore.exceptions import ClientError

    sfn, machine = state_machine(deps, args)
    try:
        detail = describe(sfn, execution_arn(machine, args.execution))
    except ClientError as exc:
        if exc.response["Error"]["Code"] not in ("ExecutionDoesNotExist", "InvalidArn"):
            raise
        raise CliError(
            f"no execution {args.execution} (hyperguard executions list shows them)"
        ) from exc
    if args.json:
        print_json(detail)
    else:
        print_renderable(render_execution(detail))
    return 0


def add_parsers(
    groups: Any, service_options: Callable[[argparse.ArgumentParser], None], deps: Deps
) -> None:
    executions = add_group(groups, "executions", "NodeRecovery executions (Step Functions)")
    p = executions.add_parser(
        "list", help="executions newest first: name (the incident), status, start, stop"
    )
    p.add_argument(
        "--limit", type=positive_int, default=100, help="at most this many (default 100)"
    )
    p.add_argument("--status", choices=STATUSES, help="only executions in this status")
    service_options(p)
    p.set_defaults(func=lambda a: cmd_list(a, deps))
    p = executions.add_parser(
        "show", help="one execution: its input, error, and states with outcome and retries"
    )
    p.add_argument(
        "execution", metavar="NAME_OR_ARN", help="the execution (hyperguard executions list)"
    )
    service_options(p)
    p.set_defaults(func=lambda a: cmd_show(a, deps))
