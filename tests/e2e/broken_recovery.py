"""A recovery against something broken on purpose (a verb taken from a function's RBAC, an
action from its IAM role): the recovery of a faulty node fails and the incident goes to an
operator; once the thing is restored, a re-drive heals it (tests/e2e/test_rbac.py,
tests/e2e/test_iam.py)."""

from __future__ import annotations

from typing import Any

from hyperguard.messaging import RecoveryWorkflows
from hyperguard.models import Incident, IncidentStatus
from hyperguard.recovery.operator import RecoveryOperator
from hyperguard.store import IncidentStore, NodeStore
from hyperguard_twin.plane.kube import wait_for
from hyperguard_twin.runtime import Twin

WAIT_S = 150.0
"""A deadline for a loaded 2-core machine, not a measure of speed."""


class BrokenRecovery:
    def __init__(self, twin: Twin) -> None:
        assert twin.deployment is not None
        out = twin.deployment.outputs
        self.twin = twin
        self.incidents = IncidentStore(out["IncidentsTableName"], out["NodesTableName"])
        self.operator = RecoveryOperator(
            self.incidents,
            NodeStore(out["NodesTableName"]),
            RecoveryWorkflows(out["NodeRecoveryStateMachineArn"]),
        )
        self.sfn = twin.client("stepfunctions")

    def until(self, condition: Any, what: str) -> Any:
        return wait_for(condition, WAIT_S, what, interval_s=0.25)

    def ended(self, arn: str) -> dict[str, Any] | None:
        execution = self.sfn.describe_execution(executionArn=arn)
        return None if execution["status"] == "RUNNING" else dict(execution)

    def fails(self) -> tuple[str, Incident]:
        """A healthy HyperPod node's GPU fault (the agent recommends a reboot, and one cures
        it) is recovered and the recovery fails: the node and its incident, which waits for
        an operator. A GPU fault is repaired at once; a kernel condition would first wait out
        the policy's degraded-node wait (`otherFaultWaitMins`, 30 s of the tests' time)."""
        faulty: str = next(
            n["instance_id"]
            for n in self.twin.cluster.snapshot()["nodes"]
            if n["platform"] == "hyperpod" and n["healthy"] and n["schedulable"]
        )
        self.twin.fault(faulty, "gpu")
        incident: Incident = self.until(
            lambda: next(
                (i for i in self.incidents.recent() if i.instance_id == faulty and i.execution_arn),
                None,
            ),
            "an incident for the faulty node",
        )
        assert incident.execution_arn is not None
        failed = self.until(lambda: self.ended(str(incident.execution_arn)), "the recovery ends")
        assert failed["status"] != "SUCCEEDED", failed
        escalated = self.incidents.get(incident.incident_id)
        assert escalated is not None and escalated.status is IncidentStatus.NEEDS_OPERATOR
        return faulty, incident

    def heals(self, incident: Incident) -> None:
        """A re-drive of the incident's recovery succeeds and resolves it."""
        redriven = self.operator.redrive(incident.incident_id)
        finished = self.until(
            lambda: self.ended(redriven["execution_arn"]), "the re-driven recovery ends"
        )
        assert finished["status"] == "SUCCEEDED", finished
        closed = self.incidents.get(incident.incident_id)
        assert closed is not None and closed.status is IncidentStatus.RESOLVED
