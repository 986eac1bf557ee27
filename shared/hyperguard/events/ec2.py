"""Amazon EC2 instance events (source aws.ec2)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from pydantic import Field

from hyperguard.events.base import (
    ClassifyConfig,
    DetailModel,
    EventEnvelope,
    UtcDatetime,
    malformed_field,
    new_signal,
    parse_event,
)
from hyperguard.models.signals import Action, HealthSignal, Repair, Severity, SignalSource

SPOT_INTERRUPTION = "EC2 Spot Instance Interruption Warning"
CAPACITY_RESERVATION_INTERRUPTION = "EC2 Capacity Reservation Instance Interruption Warning"
REBALANCE_RECOMMENDATION = "EC2 Instance Rebalance Recommendation"
STATE_CHANGE = "EC2 Instance State-change Notification"

# Both interruption warnings are documented as arriving two minutes before the instance goes.
INTERRUPTION_NOTICE = timedelta(minutes=2)
GONE_STATES = frozenset({"stopping", "stopped", "shutting-down", "terminated"})


class InstanceDetail(DetailModel):
    instance_id: str = Field(alias="instance-id", min_length=1)


class InterruptionDetail(InstanceDetail):
    instance_action: str | None = Field(default=None, alias="instance-action")
    # Capacity Reservation warnings only; Spot warnings carry no termination time.
    instance_termination_time: UtcDatetime | None = Field(
        default=None, alias="instance-termination-time"
    )


class StateChangeDetail(InstanceDetail):
    state: str = Field(min_length=1)


class InterruptionEvent(EventEnvelope):
    detail: InterruptionDetail


class InstanceEvent(EventEnvelope):
    detail: InstanceDetail


class StateChangeEvent(EventEnvelope):
    detail: StateChangeDetail


def classify_spot_interruption(event: Mapping[str, Any]) -> list[HealthSignal]:
    return _interruption(event, kind="spot_interruption", what="Spot interruption")


def classify_capacity_reservation_interruption(event: Mapping[str, Any]) -> list[HealthSignal]:
    return _interruption(
        event,
        kind="capacity_reservation_interruption",
        what="Capacity Reservation reclaims the instance",
    )


def _interruption(event: Mapping[str, Any], *, kind: str, what: str) -> list[HealthSignal]:
    parsed = parse_event(InterruptionEvent, event)
    detail = parsed.detail
    try:
        deadline = detail.instance_termination_time or parsed.time + INTERRUPTION_NOTICE
    except OverflowError as error:
        raise malformed_field(event, "time", f"time: {error}") from error
    action = detail.instance_action or "terminate"
    return [
        new_signal(
            parsed,
            source=SignalSource.EC2,
            kind=kind,
            instance_id=detail.instance_id,
            severity=Severity.FATAL,
            action=Action.DRAIN,
            repair=Repair.DRAIN,
            reason=f"{what}: instance will {action} at {deadline.isoformat()}",
            deadline=deadline,
            facts={"instance_action": action},
        )
    ]


def classify_rebalance_recommendation(
    event: Mapping[str, Any], config: ClassifyConfig
) -> list[HealthSignal]:
    parsed = parse_event(InstanceEvent, event)
    return [
        new_signal(
            parsed,
            source=SignalSource.EC2,
            kind="rebalance_recommendation",
            instance_id=parsed.detail.instance_id,
            severity=Severity.INFORMATIONAL,
            action=config.rebalance_action,
            repair=Repair.DRAIN if config.rebalance_action is Action.DRAIN else Repair.NONE,
            reason="EC2 recommends rebalancing: the Spot instance is at elevated interruption risk",
        )
    ]


def classify_state_change(event: Mapping[str, Any]) -> list[HealthSignal]:
    parsed = parse_event(StateChangeEvent, event)
    state = parsed.detail.state
    if state in GONE_STATES:
        severity, action, repair = Severity.FATAL, Action.OPEN_INCIDENT, Repair.REPLACE
        reason = f"EC2 instance is {state}"
    else:
        severity, action, repair = Severity.INFORMATIONAL, Action.IGNORE, Repair.NONE
        reason = f"EC2 instance is {state}: nothing to repair"
    return [
        new_signal(
            parsed,
            source=SignalSource.EC2,
            kind="instance_state_change",
            instance_id=parsed.detail.instance_id,
            severity=severity,
            action=action,
            repair=repair,
            reason=reason,
            facts={"state": state},
        )
    ]
