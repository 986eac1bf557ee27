"""`hyperguard watch`: incidents and NodeRecovery executions as they change, one line each.

It polls: the newest incidents and executions, and the history of every execution still
running. The first poll prints where each one stands; later polls print what changed
since (an incident's status or outcome, each state an execution entered, its end).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from hyperguard.cli.deps import Deps
from hyperguard.cli.executions import (
    POLL_LOOP,
    execution_row,
    execution_states,
    history,
    recent,
)
from hyperguard.cli.executions import state_machine as recovery_state_machine
from hyperguard.cli.incidents import outcome, subject
from hyperguard.cli.options import number_between
from hyperguard.cli.output import say

WINDOW = 50
"""How many of the newest incidents and executions each poll reads."""


class Follower:
    """Remembers what it last saw of each incident and execution; `poll` returns the
    changes since, oldest first."""

    def __init__(self, incidents: Any, sfn: Any, machine_arn: str) -> None:
        self.incidents, self.sfn, self.machine_arn = incidents, sfn, machine_arn
        self.incident_seen: dict[str, tuple[str, str]] = {}
        self.execution_seen: dict[str, tuple[str, int]] = {}
        """execution ARN -> (status, how many of its states were printed)"""
        self.polled = False
        """After the first poll, an execution seen for the first time is new: all of it is news."""

    def poll(self) -> list[dict[str, Any]]:
        now = datetime.now(UTC)
        changes: list[dict[str, Any]] = []
        for incident in reversed(self.incidents.recent(WINDOW)):
            record = incident.model_dump(mode="json")
            seen = (record["status"], outcome(record))
            if self.incident_seen.get(record["incident_id"]) != seen:
                self.incident_seen[record["incident_id"]] = seen
                changes.append(
                    {
                        "at": now.isoformat(timespec="milliseconds"),
                        "type": "incident",
                        "incident_id": record["incident_id"],
                        "instance_id": subject(record),
                        "status": seen[0],
                        "outcome": seen[1],
                    }
                )
        for execution in reversed(recent(self.sfn, self.machine_arn, WINDOW)):
            changes += self._execution_changes(execution_row(execution, now))
        self.polled = True
        # One poll's changes in the order they happened (an incident's, seen now, after the
        # states an execution entered since the last poll); a line without a time, last.
        return sorted(changes, key=lambda c: _when(c.get("at"), now))

    def _execution_changes(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        arn, status = row["execution_arn"], row["status"]
        known = self.execution_seen.get(arn)
        if known is not None and known[0] == status and status != "RUNNING":
            return []  # it ended and was printed so: nothing more will happen
        states = execution_states(history(self.sfn, arn))
        self.execution_seen[arn] = (status, len(states))
        lines = ExecutionLines(row, states)
        if known is not None:
            changes = lines.entered(known[1])
        elif self.polled:  # started since watching began: every state it entered
            changes = lines.entered(0)
        elif status == "RUNNING":  # under way as watching begins: only where it stands
            return [lines.standing()]
        else:
            changes = []
        return changes + lines.ended() if status != "RUNNING" else changes


class ExecutionLines:
    """The lines that tell one execution's states (`states`: execution_states, in order)."""

    def __init__(self, row: dict[str, Any], states: list[dict[str, Any]]) -> None:
        self.row, self.states = row, states

    def line(self, at: str | None, state: str | None, **more: Any) -> dict[str, Any]:
        return {
            "at": at,
            "type": "execution",
            "name": self.row["name"],
            "status": "RUNNING",
            "state": state,
            "execution_arn": self.row["execution_arn"],
        } | more

    def _in_loop(self, index: int) -> bool:
        return 0 <= index < len(self.states) and self.states[index]["state"] in POLL_LOOP

    def _polls(self, end: int) -> int:
        """Health checks in the polling loop that ends before `end`."""
        start = end
        while self._in_loop(start - 1):
            start -= 1
        return sum(s["state"] == "CheckHealth" for s in self.states[start:end])

    def entered(self, first: int) -> list[dict[str, Any]]:
        """A line per state entered from `first` on; the polling loop as two lines."""
        changes = []
        for index in range(first, len(self.states)):
            state = self.states[index]
            if self._in_loop(index - 1) and not self._in_loop(index):
                changes.append(self._loop_ended(state["entered_at"], index))
            if not (self._in_loop(index) and self._in_loop(index - 1)):
                changes.append(self.line(state["entered_at"], state["state"]))
        return changes

    def _loop_ended(self, at: str | None, end: int) -> dict[str, Any]:
        return self.line(at, "WaitForRepair", health_polls=self._polls(end))

    def standing(self) -> dict[str, Any]:
        """Where a running execution stands (with its polls so far, in the loop)."""
        if not self.states:
            return self.line(self.row["start"], None)
        last = self.states[-1]
        if self._in_loop(len(self.states) - 1):
            return self._loop_ended(last["entered_at"], len(self.states))
        return self.line(last["entered_at"], last["state"])

    def ended(self) -> list[dict[str, Any]]:
        """The end, after the loop's line when it ended inside the loop."""
        last = self.states[-1] if self.states else None
        changes = []
        if self._in_loop(len(self.states) - 1):
            changes.append(self._loop_ended(self.row["stop"], len(self.states)))
        end = self.line(
            self.row["stop"],
            last["state"] if last else None,
            status=self.row["status"],
            error=last["error"] if last else None,
            cause=last["cause"] if last else None,
        )
        return [*changes, end]


def plain(change: dict[str, Any]) -> str:
    if change["type"] == "incident":
        return (
            f"{change['at']}  incident   {change['incident_id']}  {change['instance_id']}  "
            f"{change['status']} ({change['outcome']})"
        )
    text = f"{change['at']}  execution  {change['name']}  {change['status']}"
    if change["state"]:
        text += f"  {change['state']}"
    if "health_polls" in change:
        text += f"  {change['health_polls']} health polls"
    if change.get("error"):
        text += f"  {change['error']}: {change.get('cause') or '-'}"
    return text


def cmd_watch(args: argparse.Namespace, deps: Deps) -> int:
    follower = Follower(deps.incidents(args), *recovery_state_machine(deps, args))
    if not args.once:
        say(f"watching incidents and recovery executions every {args.interval:g} s (Ctrl-C stops)")
    while True:
        for change in follower.poll():
            print(json.dumps(change) if args.json else plain(change), flush=True)
        if args.once:
            return 0
        time.sleep(args.interval)


def add_parser(
    groups: Any, service_options: Callable[[argparse.ArgumentParser], None], deps: Deps
) -> None:
    p = groups.add_parser(
        "watch",
        help="follow incidents and recovery executions live, one line per change",
        description="Follow incidents and recovery executions live, one line per change, "
        "until Ctrl-C.",
    )
    p.add_argument(
        "--interval",
        type=number_between(0.5, 60),
        default=2.0,
        help="seconds between polls, 0.5-60 (default 2)",
    )
    p.add_argument(
        "--once", action="store_true", help="print where everything stands now, and exit"
    )
    service_options(p)
    p.set_defaults(func=lambda a: cmd_watch(a, deps))


def _when(at: str | None, now: datetime) -> datetime:
    try:
        return datetime.fromisoformat(at) if at else now
    except ValueError:
        return now
