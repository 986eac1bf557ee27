"""Incidents: one per node fault, from first signal to closure."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

from hyperguard.models.signals import Repair


class IncidentStatus(StrEnum):
    OPEN = "open"
    DETECTED = "detected"
    RECOVERING = "recovering"
    RESOLVED = "resolved"
    NEEDS_OPERATOR = "needs_operator"

    @property
    def is_open(self) -> bool:
        return self not in (IncidentStatus.RESOLVED,)


class Incident(BaseModel):
    incident_id: str
    instance_id: str
    cluster: str
    status: IncidentStatus = IncidentStatus.OPEN
    kind: str
    severity: str
    repair: Repair
    reason: str
    opened_at: datetime
    first_signal_at: datetime
    not_before: datetime | None = None
    deadline: datetime | None = None
    execution_arn: str | None = None
    signal_count: int = 1
    sources: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    timings: dict[str, float] = Field(default_factory=dict)
