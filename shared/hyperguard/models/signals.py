"""The one normalised shape every node-health event becomes."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class SignalSource(StrEnum):
    HYPERPOD = "hyperpod"
    EC2 = "ec2"
    AWS_HEALTH = "aws_health"
    KUBERNETES = "kubernetes"
    OPERATOR = "operator"
    UNKNOWN = "unknown"


class Severity(StrEnum):
    FATAL = "fatal"
    DEGRADED = "degraded"
    SCHEDULED = "scheduled"
    HEALTHY = "healthy"
    INFORMATIONAL = "informational"


class Repair(StrEnum):
    REBOOT = "reboot"
    REPLACE = "replace"
    DRAIN = "drain"
    NONE = "none"


class Action(StrEnum):
    """What ingestion does with a signal."""

    OPEN_INCIDENT = "open_incident"
    RESOLVE = "resolve"
    DRAIN = "drain"
    NOTIFY = "notify"
    IGNORE = "ignore"


class HealthSignal(BaseModel):
    """A node-health fact, whatever source reported it.

    `dedupe_key` identifies the report (the same EventBridge event delivered twice has the
    same key); several sources reporting one fault have different keys and are merged by
    the one-open-incident-per-node rule instead.
    """

    model_config = ConfigDict(frozen=True)

    source: SignalSource
    kind: str = Field(description="source-specific kind, e.g. spot_interruption")
    instance_id: str | None
    cluster: str | None = None
    severity: Severity
    action: Action
    repair: Repair
    reason: str
    observed_at: datetime
    dedupe_key: str
    not_before: datetime | None = Field(
        default=None, description="scheduled changes: when the change starts"
    )
    deadline: datetime | None = Field(
        default=None, description="interruptions: when the instance goes away"
    )
    facts: dict[str, Any] = Field(
        default_factory=dict, description="source facts worth keeping (condition, codes)"
    )
