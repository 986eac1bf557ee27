"""Names HyperGuard and HyperPod put on nodes, shared by every adapter (real and simulated)."""

from __future__ import annotations

import re
from enum import StrEnum

from hyperguard.observability import MetricUnit, logger, metrics
from hyperguard.provider_ids import parse_provider_id

# HyperGuard's own marks on a node it is repairing.
INCIDENT_TAINT = "hyperguard.io/incident"
REASON_LABEL = "hyperguard.io/reason"

# HyperPod's Kubernetes contract: the health agent's label; the Pending* values trigger
# HyperPod's own recovery.
HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"


class HyperPodHealthStatus(StrEnum):
    """Values of HyperPod's node-health-status label; the Pending values trigger HyperPod's
    own reboot or replacement of the node."""

    SCHEDULABLE = "Schedulable"
    UNSCHEDULABLE = "Unschedulable"
    UNSCHEDULABLE_PENDING_REPLACEMENT = "UnschedulablePendingReplacement"
    UNSCHEDULABLE_PENDING_REBOOT = "UnschedulablePendingReboot"


# Progress of HyperPod's deep health checks on a node: InProgress, Passed or Failed.
DEEP_HEALTH_CHECK_LABEL = "sagemaker.amazonaws.com/deep-health-check-status"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
INSTANCE_GROUP_LABEL = "sagemaker.amazonaws.com/instance-group-name"

# Karpenter v1's labels on the nodes it launches (the EKS burst pools).
NODEPOOL_LABEL = "karpenter.sh/nodepool"
# EKS: an Auto Mode node ("auto"), and a managed node group's node.
AUTO_MODE_LABEL = "eks.amazonaws.com/compute-type"
NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"

# BatchReboot/ReplaceClusterNodes per-node ErrorCode values (SageMaker API model).
INSTANCE_ID_NOT_FOUND = "InstanceIdNotFound"
INSTANCE_ID_IN_USE = "InstanceIdInUse"
INVALID_INSTANCE_STATUS = "InvalidInstanceStatus"
INTERNAL_SERVER_ERROR = "InternalServerError"

# Karpenter's capacity-type label → the capacity type as EC2 (and Node.capacity_type) spell it.
EC2_CAPACITY_TYPES = {"spot": "Spot", "on-demand": "OnDemand", "reserved": "Reserved"}


UNKNOWN_PROVIDER_ID_METRIC = "UnknownProviderId"


def instance_id_from_provider_id(provider_id: str | None, *, holder: str = "") -> str | None:
    """The EC2 instance id of a node's (or NodeClaim's) providerID; None when there is none
    yet or its form is unknown. An unknown form is counted (UnknownProviderId) and logged
    with `holder`, the object that carries it: the caller treats that node as not found."""
    if not provider_id:
        return None
    parsed = parse_provider_id(provider_id)
    if parsed is None:
        metrics.add_metric(name=UNKNOWN_PROVIDER_ID_METRIC, unit=MetricUnit.Count, value=1)
        logger.warning(
            "providerID of an unknown form: the node is treated as not found",
            extra={"provider_id": provider_id[:300], "holder": holder},
        )
        return None
    return parsed.instance_id


_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def label_safe(value: str, *, fallback: str = "unspecified") -> str:
    """A Kubernetes label (or taint) value: ≤ 63 of [A-Za-z0-9_.-], alphanumeric at both ends."""
    cleaned = _LABEL_UNSAFE.sub("-", value)[:63].strip("-_.")
    return cleaned or fallback
