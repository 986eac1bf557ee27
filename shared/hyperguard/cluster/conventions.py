"""Names HyperGuard and HyperPod put on nodes, shared by every adapter (real and simulated)."""

from __future__ import annotations

import re

# HyperGuard's own marks on a node it is repairing.
INCIDENT_TAINT = "hyperguard.io/incident"
REASON_LABEL = "hyperguard.io/reason"

# HyperPod's Kubernetes contract: the health agent's label; the Pending* values trigger
# HyperPod's own recovery.
HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"
# Progress of HyperPod's deep health checks on a node: InProgress, Passed or Failed.
DEEP_HEALTH_CHECK_LABEL = "sagemaker.amazonaws.com/deep-health-check-status"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
INSTANCE_GROUP_LABEL = "sagemaker.amazonaws.com/instance-group-name"

# Karpenter v1's labels on the nodes it launches (the EKS burst pools).
NODEPOOL_LABEL = "karpenter.sh/nodepool"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"

# BatchReboot/ReplaceClusterNodes per-node ErrorCode values (SageMaker API model).
INSTANCE_ID_NOT_FOUND = "InstanceIdNotFound"
INSTANCE_ID_IN_USE = "InstanceIdInUse"
INVALID_INSTANCE_STATUS = "InvalidInstanceStatus"
INTERNAL_SERVER_ERROR = "InternalServerError"

# Karpenter's capacity-type label → the capacity type as EC2 (and Node.capacity_type) spell it.
EC2_CAPACITY_TYPES = {"spot": "Spot", "on-demand": "OnDemand", "reserved": "Reserved"}


def instance_id_from_provider_id(provider_id: str | None) -> str | None:
    """The EC2 instance id of a Kubernetes providerID (`aws:///<az>/<instance id>`)."""
    if not provider_id or not provider_id.startswith("aws://"):
        return None
    return provider_id.rsplit("/", 1)[-1] or None


_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def label_safe(value: str, *, fallback: str = "unspecified") -> str:
    """A Kubernetes label (or taint) value: ≤ 63 of [A-Za-z0-9_.-], alphanumeric at both ends."""
    cleaned = _LABEL_UNSAFE.sub("-", value)[:63].strip("-_.")
    return cleaned or fallback
