"""The demo's story, told as it happens, and the facts its report draws.

`Follower` watches what a person would watch on AWS: the incidents table and the
NodeRecovery executions (Step Functions' own history), and tells each new incident and
each state an execution leaves, with the wall time since the demo started and the
simulated cluster's time. The health-polling loop (WaitForRepair, CheckHealth) is told
once, when it ends, with how many polls it took.

`phases` turns an incident and its execution's states into recovery phases (detect,
cordon/drain, repair, resume, ...): the Gantt of the report and the gameday's badput per
phase use the same mapping.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from hyperguard.cli.executions import POLL_LOOP, execution_states, history
from hyperguard.models.incidents import Incident
from hyperguard.store import IncidentStore
from hyperguard_twin.runtime import Twin

PHASE_OF_STATE = {
    "Diagnose": "detect",
    "WaitBeforeRepair": "planned wait",
    "Cordon": "cordon/drain",
    "GuardBlastRadius": "cordon/drain",
    "AwaitOperatorApproval": "approval",
    "ProtectJobs": "cordon/drain",
    "Drain": "cordon/drain",
    "WaitForDrain": "cordon/drain",
    "Repair": "repair",
    "WaitForRepair": "repair",
    "CheckHealth": "repair",
    "ReturnToService": "resume",
    "ResumeJobs": "resume",
    "CloseIncident": "close",
    "Escalate": "escalate",
}
"""Every Task and Wait state of statemachines/node_recovery.asl.json (a unit test holds
this to the ASL); Choice, Succeed and Fail states take no time and belong to no phase."""


@dataclass(frozen=True)
class Phase:
    name: str
    start: datetime
    end: datetime


def phases(incident: Incident, states: Sequence[dict[str, Any]]) -> list[Phase]:
    """Consecutive phases of one recovery: detect from the first signal to the end of
    diagnosis, then one span per run of states in the same phase (real time, as Step
    Functions recorded it). A state still running is left out."""
    spans: list[Phase] = []
    for state in states:
        phase = PHASE_OF_STATE.get(state["state"])
        if phase is None or state["took_s"] is None:
            continue
        end = _exited(state)
        if spans and spans[-1].name == phase:
            spans[-1] = Phase(phase, spans[-1].start, end)
            continue
        if spans:
            begin = spans[-1].end
        elif phase == "detect":
            begin = incident.first_signal_at
        else:
            begin = datetime.fromisoformat(state["entered_at"])
        spans.append(Phase(phase, begin, end))
    return spans


class Follower:
    """Tells new incidents and finished execution states as they happen (`poll`)."""

    def __init__(self, twin: Twin, say: Callable[[str], None]) -> None:
        assert twin.deployment is not None
        outputs = twin.deployment.outputs
        self.twin, self.say = twin, say
        self.store = IncidentStore(outputs["IncidentsTableName"], outputs["NodesTableName"])
        self.sfn = twin.client("stepfunctions")
        self.machine = outputs["NodeRecoveryStateMachineArn"]
        self.started = datetime.now(UTC)
        self._lines: list[tuple[datetime, str]] = []
        self.incidents: dict[str, Incident] = {}
        self.told: dict[str, int] = {}
        """Execution ARN -> how many of its states have been told."""
        self.ended: set[str] = set()
        self.polling: set[str] = set()
        """Executions whose health-polling loop has been announced."""

    def _line(self, at: datetime, node: str, text: str) -> None:
        cluster = self.twin.cluster.clock.virtual(at).strftime("%H:%M:%S")
        wall = (at - self.started).total_seconds()
        self._lines.append((at, f"  +{wall:6.1f}s  cluster {cluster}  {node:<21} {text}"))

    def poll(self) -> None:
        """Tell what happened since the last poll, in the order it happened."""
        self._poll()
        for _at, line in sorted(self._lines, key=lambda pair: pair[0]):
            self.say(line)
        self._lines.clear()

    def _poll(self) -> None:
        for incident in self.store.recent():
            if incident.incident_id not in self.incidents:
                self._line(
                    incident.opened_at,
                    incident.instance_id,
                    f"incident opened: {incident.kind} ({incident.severity}), "
                    f"repair {incident.repair.value}",
                )
            self.incidents[incident.incident_id] = incident
        pages = self.sfn.get_paginator("list_executions").paginate(stateMachineArn=self.machine)
        for execution in sorted(
            (e for page in pages for e in page["executions"]), key=lambda e: e["startDate"]
        ):
            if execution["executionArn"] not in self.ended:
                self._follow(execution)

    def _follow(self, execution: dict[str, Any]) -> None:
        arn = execution["executionArn"]
        node = next(
            (i.instance_id for i in self.incidents.values() if i.execution_arn == arn),
            execution["name"][-21:],
        )
        described = self.sfn.describe_execution(executionArn=arn)
        running = described["status"] == "RUNNING"
        done = [s for s in execution_states(history(self.sfn, arn)) if s["took_s"] is not None]
        told = self.told.get(arn, 0)
        while told < len(done):
            state = done[told]
            if state["state"] in POLL_LOOP:
                loop = told
                while loop < len(done) and done[loop]["state"] in POLL_LOOP:
                    loop += 1
                if loop == len(done) and running:
                    if arn not in self.polling:  # the loop may go on: tell it when it ends
                        self.polling.add(arn)
                        self._line(
                            datetime.fromisoformat(state["entered_at"]),
                            node,
                            f"{'WaitForRepair':<22} polling health until the node is back ...",
                        )
                    break
                polls = sum(s["state"] == "CheckHealth" for s in done[told:loop])
                took = (
                    _exited(done[loop - 1]) - datetime.fromisoformat(done[told]["entered_at"])
                ).total_seconds()
                self._line(
                    _exited(done[loop - 1]),
                    node,
                    f"{'WaitForRepair':<22} {polls} health checks over {took:.1f} s",
                )
                told = loop
                continue
            if state["state"] in PHASE_OF_STATE:
                retries = f", {state['retries']} retries" if state["retries"] else ""
                self._line(
                    _exited(state),
                    node,
                    f"{state['state']:<22} {state['outcome']} ({state['took_s']:.1f} s{retries})",
                )
            told += 1
        self.told[arn] = told
        if not running and told == len(done):
            self.ended.add(arn)
            took = (described["stopDate"] - described["startDate"]).total_seconds()
            self._line(
                described["stopDate"], node, f"recovery {described['status']} in {took:.1f} s"
            )


def _exited(state: dict[str, Any]) -> datetime:
    entered = datetime.fromisoformat(state["entered_at"])
    return datetime.fromtimestamp(entered.timestamp() + state["took_s"], entered.tzinfo)
