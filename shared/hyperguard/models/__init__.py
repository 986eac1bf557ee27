"""Pydantic domain models shared by every layer."""

from datetime import UTC, datetime, timedelta

from hyperguard.models.incidents import Incident, IncidentStatus, ProtectedJob
from hyperguard.models.jobs import Checkpoint, ClusterObject, Job, JobSource, JobStatus
from hyperguard.models.nodes import Node, NodeStatus, RepairFailure, RepairOutcome
from hyperguard.models.signals import Action, HealthSignal, Repair, Severity, SignalSource


def utcnow() -> datetime:
    """The default clock of every service object (tests inject their own)."""
    return datetime.now(UTC)


def wait_timestamp(when: datetime) -> str:
    """`when` as a Wait state's TimestampPath wants it: RFC 3339 in UTC with a `Z` (an
    offset such as +00:00 fails the execution with an error no Catch can handle), rounded
    up to the second so that the wait never ends before `when`."""
    utc = when.astimezone(UTC)
    if utc.microsecond:
        utc = utc.replace(microsecond=0) + timedelta(seconds=1)
    return utc.strftime("%Y-%m-%dT%H:%M:%SZ")


__all__ = [
    "Action",
    "Checkpoint",
    "ClusterObject",
    "HealthSignal",
    "Incident",
    "IncidentStatus",
    "Job",
    "JobSource",
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
    "wait_timestamp",
]
