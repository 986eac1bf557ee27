"""What an operator can do to a recovery: approve or veto a paused one, veto repairs of a
node, re-drive an escalated incident. Used by the API and the CLI alike: an action that does
not apply raises `OperatorActionError`, which the CLI prints and the API answers with 409
(`hyperguard.api.errors`, the one place errors become HTTP)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from hyperguard.cluster import ClusterGateway, NodeNotFoundError
from hyperguard.messaging import RecoveryWorkflows
from hyperguard.models import (
    Action,
    HealthSignal,
    Incident,
    IncidentStatus,
    Node,
    Repair,
    Severity,
    SignalSource,
    utcnow,
)
from hyperguard.store import IncidentStore, NodeStore, SignalOutcome

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


@dataclass
class OperatorNodeActions:
    """The API's node actions (POST /nodes/{nodeId}/actions). Cordon and uncordon act at
    once; reboot and replace open an operator incident and run the NodeRecovery workflow,
    so jobs are protected and the blast-radius brake applies as for any fault."""

    operator: RecoveryOperator
    gateway: ClusterGateway
    clock: Callable[[], datetime] = utcnow

    def _node(self, instance_id: str) -> Node:
        node = self.operator.nodes.get(instance_id)
        if node is None:
            raise NodeNotFoundError(instance_id)
        return node

    def cordon(self, instance_id: str) -> dict[str, Any]:
        self._node(instance_id)
        changed = self.gateway.cordon(instance_id, incident_id="operator", reason="operator")
        self.operator.nodes.upsert_inventory([self.gateway.node_status(instance_id)])
        return {"instance_id": instance_id, "action": "cordon", "changed": changed}

    def uncordon(self, instance_id: str) -> dict[str, Any]:
        node = self._node(instance_id)
        if node.open_incident_id:
            raise OperatorActionError(
                f"{instance_id} has open incident {node.open_incident_id}; its recovery "
                "returns it to service"
            )
        changed = self.gateway.uncordon(instance_id)
        self.operator.nodes.upsert_inventory([self.gateway.node_status(instance_id)])
        return {"instance_id": instance_id, "action": "uncordon", "changed": changed}

    def reboot(self, instance_id: str) -> dict[str, Any]:
        return self._repair(instance_id, Repair.REBOOT)

    def replace(self, instance_id: str) -> dict[str, Any]:
        return self._repair(instance_id, Repair.REPLACE)

    def _repair(self, instance_id: str, repair: Repair) -> dict[str, Any]:
        node = self._node(instance_id)
        now = self.clock()
        signal = HealthSignal(
            source=SignalSource.OPERATOR,
            kind=f"operator_{repair.value}",
            instance_id=instance_id,
            cluster=node.cluster,
            severity=Severity.FATAL,
            action=Action.OPEN_INCIDENT,
            repair=repair,
            reason=f"an operator asked to {repair.value} the node",
            observed_at=now,
            dedupe_key=f"operator-{repair.value}-{now.isoformat()}",
        )
        incident, outcome = self.operator.incidents.open_or_append(node, signal, now)
        if outcome is not SignalOutcome.OPENED:
            raise OperatorActionError(
                f"{instance_id} already has open incident {incident.incident_id}"
            )
        arn = self.operator.workflows.ensure_started(
            incident.incident_id,
            {
                "incident_id": incident.incident_id,
                "instance_id": instance_id,
                "cluster": node.cluster,
                "repair": repair.value,
                "kind": incident.kind,
            },
        )
        self.operator.incidents.set_execution(incident.incident_id, arn)
        return {
            "instance_id": instance_id,
            "action": repair.value,
            "incident_id": incident.incident_id,
            "execution_arn": arn,
        }

    def veto(self, instance_id: str, reason: str) -> dict[str, Any]:
        self._node(instance_id)
        return self.operator.veto_node(instance_id, reason)

    def approve(self, incident_id: str) -> dict[str, Any]:
        return self.operator.approve(incident_id, by="api")
