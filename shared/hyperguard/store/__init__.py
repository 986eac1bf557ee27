"""DynamoDB repositories: the only package that touches DynamoDB."""

from hyperguard.store.idempotency import IdempotencyStore
from hyperguard.store.incidents import IncidentStore, SignalOutcome
from hyperguard.store.jobs import JobStore
from hyperguard.store.nodes import NodeStore
from hyperguard.store.teams import TeamStore

__all__ = [
    "IdempotencyStore",
    "IncidentStore",
    "JobStore",
    "NodeStore",
    "SignalOutcome",
    "TeamStore",
]
