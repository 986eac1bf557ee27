"""Nodes of the managed clusters, as HyperGuard sees them."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

PLANNED_REPAIR = "scheduled_change"
"""A repair's `cause` when it answered an announced change (a scheduled reboot), not a
fault: the repair ladder does not count it."""
BURST_LABEL = "hyperguard.io/burst"
"""On burst capacity: the burst that asked for it (a NodeClaim, its node, a HyperPod node a
burst added)."""


class CapacityType(StrEnum):
    """Karpenter's `karpenter.sh/capacity-type` values."""

    RESERVED = "reserved"
    ON_DEMAND = "on-demand"
    SPOT = "spot"


class NodeStatus(StrEnum):
    """SageMaker HyperPod ClusterInstanceStatus values (EKS nodes map onto them)."""

    RUNNING = "Running"
    FAILURE = "Failure"
    PENDING = "Pending"
    SHUTTING_DOWN = "ShuttingDown"
    SYSTEM_UPDATING = "SystemUpdating"
    DEEP_HEALTH_CHECK_IN_PROGRESS = "DeepHealthCheckInProgress"
    NOT_FOUND = "NotFound"


class Node(BaseModel):
    instance_id: str
    cluster: str
    pool: str = Field(description="HyperPod instance group or EKS NodePool name")
    platform: str = Field(description="'hyperpod' or 'eks'")
    instance_type: str
    capacity_type: str = "OnDemand"
    accelerators: int = 0
    status: NodeStatus = NodeStatus.RUNNING
    schedulable: bool = True
    node_name: str | None = Field(default=None, description="Kubernetes node name")
    logical_id: str | None = Field(
        default=None,
        description="HyperPod NodeLogicalId: the node's slot, kept by its replacement",
    )
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[dict[str, str]] = Field(default_factory=list)
    launch_time: datetime | None = None
    open_incident_id: str | None = None
    healthy: bool = True
    booting: bool = Field(
        default=False,
        description="running with no fault known, its kubelet not yet Ready: a node starting",
    )
    veto: str | None = Field(default=None, description="operator veto: repairs wait for approval")
    repairs: list[dict[str, str]] = Field(
        default_factory=list, description="HyperGuard's repairs of this node: {at, action[, cause]}"
    )
    last_closed_at: datetime | None = Field(
        default=None, description="when the node's last incident closed"
    )
    retired_at: datetime | None = Field(
        default=None, description="when HyperGuard saw the instance leave the cluster"
    )
    released_at: datetime | None = Field(
        default=None,
        description="when HyperGuard gave the node back (a burst scale-in): leaving, not failing",
    )


class RepairFailure(BaseModel):
    """One entry of BatchReboot/ReplaceClusterNodes' Failed list."""

    node_id: str
    error_code: str
    message: str = ""


class RepairOutcome(BaseModel):
    successful: list[str] = Field(default_factory=list)
    failed: list[RepairFailure] = Field(default_factory=list)
