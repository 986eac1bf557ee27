"""The one normalised shape every node-health event becomes."""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_REASON = 1000
MAX_FACT = 2000
MAX_FACTS_JSON = 16_384
"""A signal's facts are kept on its incident and signal items: bounded so that a large
event (a HyperPod cluster event carries whole messages) never outgrows an item."""
INSTANCE_ID = r"i-[0-9A-Za-z]{1,40}"
"""What a signal accepts as an instance id (a regular expression, unanchored)."""


def bounded(value: Any) -> Any:
    """Strings cut to MAX_FACT characters; containers whose JSON is larger than
    MAX_FACTS_JSON replaced by a note of their size."""
    if isinstance(value, str):
        return value if len(value) <= MAX_FACT else value[: MAX_FACT - 1] + "…"
    if isinstance(value, dict | list):
        size = len(json.dumps(value, default=str))
        if size > MAX_FACTS_JSON:
            return f"<{type(value).__name__} of {size} bytes, not kept>"
        if isinstance(value, dict):
            return {str(k)[:MAX_FACT]: bounded(v) for k, v in value.items()}
        return [bounded(v) for v in value]
    return value


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
    instance_id: str | None = Field(pattern=rf"^{INSTANCE_ID}$")
    cluster: str | None = Field(default=None, max_length=256)
    severity: Severity
    action: Action
    repair: Repair
    reason: str
    observed_at: datetime
    dedupe_key: str = Field(min_length=1, max_length=300)
    not_before: datetime | None = Field(
        default=None, description="scheduled changes: when the change starts"
    )
    deadline: datetime | None = Field(
        default=None, description="interruptions: when the instance goes away"
    )
    facts: dict[str, Any] = Field(
        default_factory=dict, description="source facts worth keeping (condition, codes)"
    )

    @field_validator("reason")
    @classmethod
    def _short_reason(cls, value: str) -> str:
        return value if len(value) <= MAX_REASON else value[: MAX_REASON - 1] + "…"

    @field_validator("facts")
    @classmethod
    def _bounded_facts(cls, value: dict[str, Any]) -> dict[str, Any]:
        kept = bounded(value)
        return kept if isinstance(kept, dict) else {"facts": kept}
