"""SageMaker HyperPod events (source aws.sagemaker).

Node health events come from the HyperPod health-monitoring agent; cluster events
(NodeProvisioningMode Continuous) report provisioning and replacement outcomes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from hyperguard.events.base import DetailModel, EventEnvelope, new_signal, parse_event
from hyperguard.models.signals import Action, HealthSignal, Repair, Severity, SignalSource

NODE_HEALTH = "SageMaker HyperPod Cluster Node Health Event"
CLUSTER_EVENT = "SageMaker HyperPod Cluster Event"

_FAULT_TYPE = re.compile(r"fault type (\w+)")


class HealthSummary(DetailModel):
    health_status: str = Field(alias="HealthStatus")
    health_status_reason: str = Field(default="", alias="HealthStatusReason")
    repair_action: str | None = Field(default=None, alias="RepairAction")
    recommendation: str | None = Field(default=None, alias="Recommendation")


class NodeHealthDetail(DetailModel):
    cluster_name: str = Field(alias="ClusterName", min_length=1)
    cluster_arn: str | None = Field(default=None, alias="ClusterArn")
    # Not pattern-checked: AWS's own sample carries "i-12345678abcdefghi".
    instance_id: str = Field(alias="InstanceId", min_length=1)
    tags: dict[str, Any] = Field(default_factory=dict, alias="Tags")
    health_summary: HealthSummary = Field(alias="HealthSummary")


class NodeHealthEvent(EventEnvelope):
    detail: NodeHealthDetail


class ClusterEventRecord(DetailModel):
    event_id: str = Field(alias="EventId")
    cluster_name: str = Field(alias="ClusterName", min_length=1)
    cluster_arn: str | None = Field(default=None, alias="ClusterArn")
    resource_type: str = Field(alias="ResourceType")
    instance_group_name: str | None = Field(default=None, alias="InstanceGroupName")
    instance_id: str | None = Field(default=None, alias="InstanceId")
    event_level: str | None = Field(default=None, alias="EventLevel")
    description: str = Field(default="", alias="Description")
    event_details: dict[str, Any] = Field(default_factory=dict, alias="EventDetails")

    def instance_metadata(self) -> dict[str, Any]:
        metadata = self.event_details.get("EventMetadata")
        instance = metadata.get("Instance") if isinstance(metadata, dict) else None
        return instance if isinstance(instance, dict) else {}


class ClusterEventDetail(DetailModel):
    event_details: ClusterEventRecord = Field(alias="EventDetails")


class ClusterEvent(EventEnvelope):
    detail: ClusterEventDetail


def classify_node_health(event: Mapping[str, Any]) -> list[HealthSignal]:
    parsed = parse_event(NodeHealthEvent, event)
    detail = parsed.detail
    summary = detail.health_summary
    facts: dict[str, Any] = {
        "health_status": summary.health_status,
        "repair_action": summary.repair_action,
        "recommendation": summary.recommendation,
    }
    if fault := _FAULT_TYPE.search(summary.health_status_reason):
        facts["fault_type"] = fault.group(1)
    reason = summary.health_status_reason or f"HyperPod reports the node {summary.health_status}"
    match summary.health_status:
        case "Unhealthy":
            severity, action, repair = Severity.FATAL, Action.OPEN_INCIDENT, _recommended(summary)
        case "Healthy":
            severity, action, repair = Severity.HEALTHY, Action.RESOLVE, Repair.NONE
        case other:
            severity, action, repair = Severity.INFORMATIONAL, Action.IGNORE, Repair.NONE
            reason = f"HyperPod node HealthStatus {other!r} is not one HyperGuard acts on"
    return [
        new_signal(
            parsed,
            source=SignalSource.HYPERPOD,
            kind="hyperpod_node_health",
            instance_id=detail.instance_id,
            cluster=detail.cluster_name,
            severity=severity,
            action=action,
            repair=repair,
            reason=reason,
            facts=facts,
        )
    ]


def _recommended(summary: HealthSummary) -> Repair:
    """HyperPod's own advice, the explicit RepairAction first; replace when it gives none."""
    for advice in (summary.repair_action, summary.recommendation):
        text = (advice or "").lower()
        if "replace" in text:
            return Repair.REPLACE
        if "reboot" in text:
            return Repair.REBOOT
    return Repair.REPLACE


def classify_cluster_event(event: Mapping[str, Any]) -> list[HealthSignal]:
    parsed = parse_event(ClusterEvent, event)
    record = parsed.detail.event_details
    instance = record.instance_metadata()
    failure = instance.get("FailureMessage")
    if not isinstance(failure, str):
        failure = None
    facts: dict[str, Any] = {
        "event_id": record.event_id,
        "event_level": record.event_level,
        "resource_type": record.resource_type,
        "instance_group": record.instance_group_name,
    }
    if failure:
        facts["failure_message"] = failure
    if record.event_level == "Error" and record.resource_type == "Instance" and record.instance_id:
        # The node's incident (opened by the health signal) gets this as a note: a failed
        # replacement changes what recovery can do next, but is not itself a new fault.
        severity, action = Severity.DEGRADED, Action.NOTIFY
        reason = ": ".join(text for text in (record.description, failure) if text)
    else:
        severity, action = Severity.INFORMATIONAL, Action.IGNORE
        reason = (
            f"HyperPod {record.event_level or 'unlevelled'} event about {record.resource_type}"
            f" needs no action: {record.description}"
        )
    return [
        new_signal(
            parsed,
            source=SignalSource.HYPERPOD,
            kind="hyperpod_cluster_event",
            instance_id=record.instance_id or None,
            cluster=record.cluster_name,
            severity=severity,
            action=action,
            repair=Repair.NONE,
            reason=reason or "HyperPod reported an error about the instance",
            facts=facts,
        )
    ]
