"""Kubernetes node conditions, put on HyperGuard's bus by the in-cluster node forwarder.

Plain EKS sends no node-health events to EventBridge, so this contract is HyperGuard's own
(docs/events.md, "Kubernetes node forwarder contract").
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hyperguard.events.base import (
    DetailModel,
    EventEnvelope,
    UtcDatetime,
    malformed_field,
    new_signal,
    parse_event,
)
from hyperguard.models.cluster import HeldWorkload
from hyperguard.models.signals import Action, HealthSignal, Repair, Severity, SignalSource
from hyperguard.provider_ids import parse_provider_id

FORWARDER_SOURCE = "hyperguard.node-forwarder"
NODE_CONDITION_CHANGED = "Kubernetes Node Condition Changed"
WORKLOAD_HELD = "Kubernetes Workload Held"
"""The forwarder's event for a Kueue Workload held on HyperGuard's admission check (D170)."""
JOB_STATUS_CHANGED = "Kubernetes Job Status Changed"
"""The forwarder's event for a run of HyperGuard's that ended (D182): it wakes a pass."""


# Repair per "*Ready" condition: hardware and storage faults need a new instance, software
# faults usually clear on reboot. Ready=False says nothing about the cause, so it is treated
# as the worst case. Unlisted *Ready types and problem conditions (node-problem-detector's
# KernelDeadlock, ReadonlyFilesystem, ...) get a reboot, the least destructive repair.
_READY_REPAIRS = {
    "Ready": Repair.REPLACE,
    "AcceleratedHardwareReady": Repair.REPLACE,
    "StorageReady": Repair.REPLACE,
    "KernelReady": Repair.REBOOT,
    "ContainerRuntimeReady": Repair.REBOOT,
    "NetworkingReady": Repair.REBOOT,
}
_DEFAULT_REPAIR = Repair.REBOOT

# AcceleratedHardwareReady=False reasons a reboot cures first. The EKS node monitoring agent
# (github.com/aws/eks-node-monitoring-agent, monitors/nvidia/dcgm/dcgm_policies.go) sets
# `NvidiaXID<n>Error` for its well-known XIDs and files each under NVIDIA's XID catalogue
# resolution bucket; it maps all of them to replacement only because an EKS instance "cannot
# be restarted in place". A reboot resets the GPUs, and the repair ladder replaces a node a
# reboot did not cure, so the codes whose bucket is a GPU reset (RESET_GPU), the double-bit
# ECC workflow (48, and the agent's `NvidiaDoubleBitError`) or the NVLink workflow (74,
# `NvidiaNVLinkError`) get a reboot; the rest stay a replacement: 54 (CHECK_MECHANICALS),
# 63 (EC2 recommends replacing on memory remapping), 79 (RESTART_BM: a power cycle, not a
# reboot), 142 (CONTACT_SUPPORT), 151 (RESTART_VM), and every other reason. HyperPod's own
# health agent asks for a reboot on the same GPU faults: two agents reporting one fault now
# agree, whichever arrives first.
_GPU_RESET_XIDS = frozenset(
    {46, 48, 62, 64, 74, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158}
)
_GPU_RESET_REASONS = frozenset({"NvidiaDoubleBitError", "NvidiaNVLinkError"})
_XID_REASON = re.compile(r"^NvidiaXID(\d{1,4})Error$")


def _repair_of(condition_type: str, reason: str) -> Repair:
    """The repair a problem condition asks for (its type's, or by reason for a GPU fault)."""
    if condition_type == "AcceleratedHardwareReady":
        xid = _XID_REASON.match(reason)
        if reason in _GPU_RESET_REASONS or (xid and int(xid.group(1)) in _GPU_RESET_XIDS):
            return Repair.REBOOT
    return _READY_REPAIRS.get(condition_type, _DEFAULT_REPAIR)


class NodeConditionDetail(DetailModel):
    cluster_name: str = Field(alias="clusterName", min_length=1)
    node_name: str = Field(alias="nodeName", min_length=1)
    instance_id: str | None = Field(default=None, alias="instanceId")
    provider_id: str | None = Field(default=None, alias="providerId")
    condition_type: str = Field(alias="conditionType", min_length=1)
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    observed_time: UtcDatetime = Field(alias="observedTime")

    def resolved_instance_id(self) -> str | None:
        if self.instance_id:
            return self.instance_id
        # The node's spec.providerID, EKS's form or HyperPod's; an unknown form leaves
        # the event without an instance: it is dropped as malformed (and counted).
        parsed = parse_provider_id(self.provider_id or "")
        return parsed.instance_id if parsed else None

    def is_problem(self) -> bool:
        # "*Ready" conditions are healthy when True; problem conditions are unhealthy when True.
        if self.condition_type.endswith("Ready"):
            return self.status != "True"
        return self.status == "True"


class NodeConditionEvent(EventEnvelope):
    detail: NodeConditionDetail


def classify_node_condition(event: Mapping[str, Any]) -> list[HealthSignal]:
    parsed = parse_event(NodeConditionEvent, event)
    detail = parsed.detail
    instance_id = detail.resolved_instance_id()
    if instance_id is None:
        raise malformed_field(
            event,
            "detail.instanceId",
            "detail.instanceId is required unless detail.providerId is a node's providerID "
            "(aws:///<zone>/<instance id> or "
            "aws:///<zone>/sagemaker/cluster/hyperpod-<cluster id>-<instance id>)",
        )
    condition = f"{detail.condition_type}={detail.status}"
    if detail.is_problem():
        severity, action = Severity.DEGRADED, Action.OPEN_INCIDENT
        repair = _repair_of(detail.condition_type, detail.reason)
        reason = f"node {detail.node_name} {condition}"
    else:
        severity, action, repair = Severity.HEALTHY, Action.RESOLVE, Repair.NONE
        reason = f"node {detail.node_name} {condition}: condition cleared"
    if detail.reason:
        reason += f" ({detail.reason})"
    return [
        new_signal(
            parsed,
            source=SignalSource.KUBERNETES,
            kind="node_condition",
            instance_id=instance_id,
            cluster=detail.cluster_name,
            severity=severity,
            action=action,
            repair=repair,
            reason=reason,
            facts={
                "node_name": detail.node_name,
                "condition_type": detail.condition_type,
                "status": detail.status,
                "reason": detail.reason,
                "message": detail.message,
                "observed_time": detail.observed_time.isoformat(),
            },
        )
    ]


class HeldWorkloadDetail(BaseModel):
    """What a "Kubernetes Workload Held" event says of the Workload that a pass reads
    (docs/events.md); its other fields are for people."""

    model_config = ConfigDict(extra="ignore")

    namespace: str = Field(min_length=1, max_length=63)
    name: str = Field(min_length=1, max_length=253)


def woken_held(bodies: Iterable[str]) -> list[HeldWorkload]:
    """The held Workloads the forwarder's events among these message bodies name (D170); a
    body that is not such an event, or names none well, names nothing."""
    named = []
    for body in bodies:
        try:
            event = json.loads(body)
        except ValueError:
            continue
        if (
            not isinstance(event, dict)
            or event.get("source") != FORWARDER_SOURCE
            or event.get("detail-type") != WORKLOAD_HELD
        ):
            continue
        try:
            detail = HeldWorkloadDetail.model_validate(event.get("detail"))
        except ValidationError:
            continue
        named.append(HeldWorkload(detail.namespace, detail.name))
    return named
