"""NodeRecovery workflow steps. Each is an *ensure* step: safe to run twice."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from hyperguard.messaging import Escalator, EventPublisher
from hyperguard.models import Incident, IncidentStatus
from hyperguard.store import IncidentStore


class UnknownStepError(ValueError):
    pass


class IncidentMissingError(LookupError):
    pass


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class RecoverySteps:
    incidents: IncidentStore
    publisher: EventPublisher
    escalator: Escalator
    clock: Callable[[], datetime] = _now

    def run(self, step: str, payload: dict[str, Any]) -> dict[str, Any]:
        action = {"detect": self.detect, "escalate": self.escalate}.get(step)
        if action is None:
            raise UnknownStepError(f"unknown recovery step {step!r}")
        return action(payload)

    def _incident(self, payload: dict[str, Any]) -> Incident:
        incident_id = payload.get("incident_id")
        incident = self.incidents.get(str(incident_id)) if incident_id else None
        if incident is None:
            raise IncidentMissingError(f"incident {incident_id!r} does not exist")
        return incident

    def detect(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Record the incident as detected and announce it (IncidentOpened)."""
        incident = self._incident(payload)
        if incident.status is IncidentStatus.OPEN:
            detect_s = (self.clock() - incident.first_signal_at).total_seconds()
            self.incidents.set_status(
                incident.incident_id,
                IncidentStatus.DETECTED,
                timings={"signal_to_detected_s": round(max(detect_s, 0.0), 3)},
            )
            # Published after the write: a retry re-publishes at most once more, and
            # consumers key on incident_id (documented in docs/events.md).
            self.publisher.publish(
                "IncidentOpened",
                {
                    "incident_id": incident.incident_id,
                    "instance_id": incident.instance_id,
                    "cluster": incident.cluster,
                    "kind": incident.kind,
                    "severity": incident.severity,
                    "repair": incident.repair.value,
                    "reason": incident.reason,
                    "first_signal_at": incident.first_signal_at.isoformat(),
                    "execution_arn": incident.execution_arn,
                },
            )
        return {"incident_id": incident.incident_id, "status": IncidentStatus.DETECTED.value}

    def escalate(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Hand the incident to an operator; the node stays as it is (cordoned if it was)."""
        incident = self._incident(payload)
        error = payload.get("error") or {}
        note = f"escalated: {error.get('Error', 'unknown error')}: {error.get('Cause', '')}"[:1000]
        if incident.status is not IncidentStatus.NEEDS_OPERATOR:
            self.incidents.set_status(incident.incident_id, IncidentStatus.NEEDS_OPERATOR, note=note)
            self.escalator.notify(
                f"HyperGuard incident {incident.incident_id} needs an operator",
                {"incident_id": incident.incident_id, "instance_id": incident.instance_id, "why": note},
            )
        return {"incident_id": incident.incident_id, "status": IncidentStatus.NEEDS_OPERATOR.value}
