"""Pydantic domain models shared by every layer."""

from datetime import UTC, datetime

from hyperguard.models.incidents import Incident, IncidentStatus, ProtectedJob
from hyperguard.models.jobs import Checkpoint, Job, JobStatus
from hyperguard.models.nodes import Node, NodeStatus, RepairFailure, RepairOutcome
from hyperguard.models.signals import Action, HealthSignal, Repair, Severity, SignalSource


def utcnow() -> datetime:
    """The default clock of every service object (tests inject their own)."""
    return datetime.now(UTC)


__all__ = [
    "Action",
    "Checkpoint",
    "HealthSignal",
    "Incident",
    "IncidentStatus",
    "Job",
    "JobStatus",
    "Node",
    "NodeStatus",
    "ProtectedJob",
    "Repair",
    "RepairFailure",
    "RepairOutcome",
    "Severity",
    "SignalSource",
    "utcnow",
]
