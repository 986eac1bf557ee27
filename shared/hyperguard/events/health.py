"""AWS Health events (source aws.health, detail-type "AWS Health Event").

Only EC2 events are about nodes. One event may name several instances, so it becomes one
signal per affected instance.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from hyperguard.events.base import (
    DetailModel,
    EventEnvelope,
    UtcDatetime,
    new_signal,
    parse_event,
)
from hyperguard.models.signals import (
    INSTANCE_ID,
    Action,
    HealthSignal,
    Repair,
    Severity,
    SignalSource,
)

HEALTH_EVENT = "AWS Health Event"

# RFC 1123 as AWS Health writes it ("Thu, 27 Aug 2026 13:19:03 GMT"). The weekday is ignored:
# AWS's own sample pairs "Thu" with a Tuesday.
_HTTP_DATE = re.compile(
    r"\s*(?:[A-Za-z]{3},\s*)?(\d{1,2})\s+([A-Za-z]{3})\s+(\d{4})\s+"
    r"(\d{2}):(\d{2}):(\d{2})\s*(?:GMT|UTC|Z|[+-]0000)\s*"
)
_MONTHS = {
    name: number
    for number, name in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"),
        start=1,
    )
}
# entityValue is a bare instance id or an instance ARN; other entities are not nodes, nor is
# an id no signal can carry: it must not make the event's other instances malformed.
_INSTANCE_ENTITY = re.compile(rf"(?:arn:aws[a-z-]*:ec2:[^:]*:[^:]*:instance/)?({INSTANCE_ID})")


def parse_health_time(value: object) -> object:
    """RFC 1123 to an aware datetime; anything else is left for pydantic (ISO 8601)."""
    if not isinstance(value, str) or not (match := _HTTP_DATE.fullmatch(value)):
        return value
    day, month_name, year, hour, minute, second = match.groups()
    month = _MONTHS.get(month_name.title())
    if month is None:
        raise ValueError(f"unknown month {month_name!r}")
    return datetime(int(year), month, int(day), int(hour), int(minute), int(second), tzinfo=UTC)


HealthTime = Annotated[UtcDatetime, BeforeValidator(parse_health_time)]


class AffectedEntity(DetailModel):
    entity_value: str = Field(alias="entityValue")
    status: str | None = None


class HealthDetail(DetailModel):
    service: str
    event_type_code: str = Field(alias="eventTypeCode")
    event_type_category: str = Field(alias="eventTypeCategory")
    event_arn: str | None = Field(default=None, alias="eventArn")
    status_code: str | None = Field(default=None, alias="statusCode")
    start_time: HealthTime | None = Field(default=None, alias="startTime")
    end_time: HealthTime | None = Field(default=None, alias="endTime")
    affected_entities: list[AffectedEntity] = Field(default_factory=list, alias="affectedEntities")

    def instance_ids(self) -> list[str]:
        """Affected instances in event order, each once (an id may appear bare and as ARN)."""
        matches = (
            _INSTANCE_ENTITY.fullmatch(entity.entity_value) for entity in self.affected_entities
        )
        return list(dict.fromkeys(match.group(1) for match in matches if match))


class HealthEvent(EventEnvelope):
    detail: HealthDetail


_KINDS = {
    "scheduledChange": "health_scheduled_change",
    "issue": "health_issue",
}
_ACTIONABLE = {
    "scheduledChange": (Severity.SCHEDULED, Action.OPEN_INCIDENT, Repair.REPLACE),
    "issue": (Severity.DEGRADED, Action.OPEN_INCIDENT, Repair.REPLACE),
}
_IGNORED = (Severity.INFORMATIONAL, Action.IGNORE, Repair.NONE)
REBOOT_MAINTENANCE = frozenset(
    {"AWS_EC2_INSTANCE_REBOOT_MAINTENANCE_SCHEDULED", "AWS_EC2_SYSTEM_REBOOT_MAINTENANCE_SCHEDULED"}
)
"""Scheduled reboots a reboot of our own, before the window, completes: an instance reboot
is cleared by it, a system reboot by the reboot migration EC2 attempts on a user reboot
(InstanceMaintenanceOptions.rebootMigration, `default`). Every other scheduled change
(retirement, stop, power or network maintenance) moves the node to new hardware: a
replacement (D90)."""


def classify_health_event(event: Mapping[str, Any]) -> list[HealthSignal]:
    """One signal per EC2 instance the event names (one instance-less signal if none)."""
    parsed = parse_event(HealthEvent, event)
    detail = parsed.detail
    category = detail.event_type_category
    kind = _KINDS.get(category, "health_notification")
    instance_ids = detail.instance_ids() if detail.service == "EC2" else []
    if detail.service != "EC2":
        verdict, why = _IGNORED, f"AWS Health {detail.service} event is not about EC2 instances"
    elif not instance_ids:
        verdict, why = _IGNORED, "AWS Health EC2 event names no EC2 instance"
    elif detail.status_code == "closed":
        verdict, why = _IGNORED, f"AWS Health {category} is closed"
    elif category == "scheduledChange" and detail.event_type_code in REBOOT_MAINTENANCE:
        verdict = (Severity.SCHEDULED, Action.OPEN_INCIDENT, Repair.REBOOT)
        why = "AWS Health scheduledChange that a reboot before the window completes"
    elif category in _ACTIONABLE:
        verdict, why = _ACTIONABLE[category], f"AWS Health {category}"
    else:
        verdict, why = _IGNORED, f"AWS Health {category} needs no node action"
    severity, action, repair = verdict
    facts = {
        "service": detail.service,
        "event_type_code": detail.event_type_code,
        "event_type_category": category,
        "event_arn": detail.event_arn,
        "status_code": detail.status_code,
    }
    not_before = detail.start_time if category == "scheduledChange" else None
    several = len(instance_ids) > 1
    targets: list[str | None] = [*instance_ids] or [None]
    return [
        new_signal(
            parsed,
            source=SignalSource.AWS_HEALTH,
            kind=kind,
            instance_id=instance_id,
            severity=severity,
            action=action,
            repair=repair,
            reason=f"{why}: {detail.event_type_code}",
            dedupe_key=f"{parsed.id}#{instance_id}" if several else parsed.id,
            not_before=not_before,
            facts=facts,
        )
        for instance_id in targets
    ]
