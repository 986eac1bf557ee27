"""Pydantic domain models shared by every layer."""

from hyperguard.models.incidents import Incident, IncidentStatus
from hyperguard.models.jobs import Checkpoint, Job, JobStatus
from hyperguard.models.nodes import Node, NodeStatus, RepairOutcome, RepairFailure
from hyperguard.models.signals import Action, HealthSignal, Repair, Severity, SignalSource

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
    "Repair",
    "RepairFailure",
    "RepairOutcome",
    "Severity",
    "SignalSource",
]
