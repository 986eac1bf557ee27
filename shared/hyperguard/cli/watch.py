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
from typing import TYPE_CHECKING, Any

from hyperguard.cli.executions import execution_row, execution_states, history, recent
from hyperguard.cli.executions import state_machine as recovery_state_machine
from hyperguard.cli.incidents import outcome
from hyperguard.cli.options import number_between
from hyperguard.cli.output import say

if TYPE_CHECKING:
    from hyperguard.cli.incidents import Deps

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
                        "instance_id": record["instance_id"],
                        "status": seen[0],
                        "outcome": seen[1],
                    }
                )
        for execution in reversed(recent(self.sfn, self.machine_arn, WINDOW)):
            changes += self._execution_changes(execution_row(execution, now))
        return changes

    def _execution_changes(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        arn, status = row["execution_arn"], row["status"]
        known = self.execution_seen.get(arn)
        if known is not None and known[0] == status and status != "RUNNING":
            return []  # it ended and was printed so: nothing more will happen
        states = execution_states(history(self.sfn, arn))
        if known is not None:
            printed = known[1]
        else:  # first sight: only where it stands now
            printed = max(len(states) - 1, 0) if status == "RUNNING" else len(states)
        self.execution_seen[arn] = (status, len(states))

        def line(at: str | None, state: dict[str, Any] | None, **end: Any) -> dict[str, Any]:
            return {
                "at": at,
                "type": "execution",
                "name": row["name"],
                "status": "RUNNING",
                "state": state["state"] if state else None,
                "execution_arn": arn,
            } | end

        changes = [line(state["entered_at"], state) for state in states[printed:]]
        if status != "RUNNING":
            last = states[-1] if states else None
            changes.append(
                line(
                    row["stop"],
                    last,
                    status=status,
                    error=last["error"] if last else None,
                    cause=last["cause"] if last else None,
                )
            )
        elif known is None and not states:
            changes.append(line(row["start"], None))
        return changes


def plain(change: dict[str, Any]) -> str:
    if change["type"] == "incident":
        return (
            f"{change['at']}  incident   {change['incident_id']}  {change['instance_id']}  "
            f"{change['status']} ({change['outcome']})"
        )
    text = f"{change['at']}  execution  {change['name']}  {change['status']}"
    if change["state"]:
        text += f"  {change['state']}"
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
