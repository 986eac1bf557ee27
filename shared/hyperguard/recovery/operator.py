"""What an operator can do to a recovery: approve or veto a paused one, veto repairs of a
node, re-drive an escalated incident. Used by the API and the CLI alike."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from hyperguard.messaging import RecoveryWorkflows
from hyperguard.models import Incident, IncidentStatus
from hyperguard.store import IncidentStore, NodeStore

VETO_ERROR = "OperatorVeto"


class OperatorActionError(ValueError):
    """The action does not apply to the incident or node as it is now."""


@dataclass
class RecoveryOperator:
    incidents: IncidentStore
    nodes: NodeStore
    workflows: RecoveryWorkflows

    def _incident(self, incident_id: str) -> Incident:
        incident = self.incidents.get(incident_id)
        if incident is None:
            raise OperatorActionError(f"no incident {incident_id}")
        return incident

    def _paused(self, incident_id: str) -> tuple[Incident, str]:
        incident = self._incident(incident_id)
        if incident.status is not IncidentStatus.AWAITING_APPROVAL or not incident.task_token:
            raise OperatorActionError(
                f"incident {incident_id} is {incident.status.value}, not awaiting approval"
            )
        return incident, incident.task_token

    def approve(self, incident_id: str, by: str) -> dict[str, Any]:
        incident, token = self._paused(incident_id)
        approval = {"approved_by": by, "approved_at": datetime.now(UTC).isoformat()}
        self.workflows.resume(token, approval)
        self.incidents.update(incident.incident_id, task_token=None)
        self.incidents.set_status(
            incident.incident_id, IncidentStatus.RECOVERING, note=f"approved by {by}"
        )
        return {"incident_id": incident_id, **approval}

    def veto(self, incident_id: str, by: str, reason: str) -> dict[str, Any]:
        incident, token = self._paused(incident_id)
        self.workflows.refuse(token, VETO_ERROR, f"vetoed by {by}: {reason}")
        self.incidents.update(incident.incident_id, task_token=None)
        return {"incident_id": incident_id, "vetoed_by": by, "reason": reason}

    def veto_node(self, instance_id: str, reason: str | None) -> dict[str, Any]:
        """Every repair of the node waits for approval until the veto is lifted (None)."""
        if self.nodes.get(instance_id) is None:
            raise OperatorActionError(f"no node {instance_id}")
        self.nodes.set_veto(instance_id, reason)
        return {"instance_id": instance_id, "veto": reason}

    def redrive(self, incident_id: str) -> dict[str, Any]:
        """Run the recovery of an escalated incident again, from Diagnose: every step is an
        ensure step, so what was done is not done twice."""
        incident = self._incident(incident_id)
        if incident.status is not IncidentStatus.NEEDS_OPERATOR:
            raise OperatorActionError(
                f"incident {incident_id} is {incident.status.value}; "
                "only escalated incidents re-drive"
            )
        attempt = incident.redrives + 1
        arn = self.workflows.ensure_started(
            f"{incident_id}-r{attempt}"[:80],
            {
                "incident_id": incident.incident_id,
                "instance_id": incident.instance_id,
                "cluster": incident.cluster,
                "repair": incident.repair.value,
                "kind": incident.kind,
                "redrive": attempt,
            },
        )
        self.incidents.update(incident_id, redrives=attempt, execution_arn=arn)
        self.incidents.set_status(incident_id, IncidentStatus.DETECTED, note=f"re-driven ({arn})")
        return {"incident_id": incident_id, "execution_arn": arn, "redrive": attempt}
