"""Who acts on one fault of one node: HyperGuard, or another system that acts on the same
faults where the repair policy defers to it (D142, D148). Exactly one system reboots or
replaces a node (or drains it ahead of an interruption); what the other repairers are is
`hyperguard.policies.repairers`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hyperguard.cluster.conventions import (
    AUTO_MODE_LABEL,
    HEALTH_LABEL,
    NODEGROUP_LABEL,
    NODEPOOL_LABEL,
    HyperPodHealthStatus,
)
from hyperguard.models import Node
from hyperguard.models.incidents import RepairedBy
from hyperguard.policies.repair import NodeRepairConfig
from hyperguard.policies.repairers import Repairers

HYPERPOD_HEALTH_KIND = "hyperpod_node_health"
HYPERPOD_REPAIR_LABELS = frozenset(
    {
        HyperPodHealthStatus.UNSCHEDULABLE_PENDING_REPLACEMENT,
        HyperPodHealthStatus.UNSCHEDULABLE_PENDING_REBOOT,
    }
)
"""HyperPod's health labels on a node its health checks found faulty: "If automatic node
recovery is enabled, the node will be automatically replaced / rebooted by SageMaker
HyperPod" (developer guide, "Resilience-related Kubernetes labels")."""

NODE_CONDITION_KIND = "node_condition"
REPAIRED_CONDITIONS = frozenset(
    {
        "Ready",
        "AcceleratedHardwareReady",
        "StorageReady",
        "NetworkingReady",
        "KernelReady",
        "ContainerRuntimeReady",
    }
)
"""The node conditions Karpenter's AWS provider (v1.15 `RepairPolicies`) and EKS node
auto-repair act on: the kubelet's Ready and the EKS node monitoring agent's five."""

INTERRUPTION_KINDS = frozenset({"spot_interruption", "rebalance_recommendation"})
"""The notices the Node Termination Handler drains a node on (IMDS and queue-processor
modes; rebalance only where its rebalance draining is on)."""


def _eks_repairs(node: Node, seen: Repairers) -> bool:
    if seen.eks_auto_mode and node.labels.get(AUTO_MODE_LABEL) == "auto":
        return True
    group = node.labels.get(NODEGROUP_LABEL)
    return group is not None and seen.eks_node_groups.get(group, False)


def repairer(
    kind: str, facts: Mapping[str, Any], node: Node, seen: Repairers, policy: NodeRepairConfig
) -> RepairedBy:
    """Who acts on this fault of this node: another repairer that acts on it where the
    policy defers to it, else HyperGuard. Never both: where HyperGuard owns a fault another
    system would act on too, it holds that system off where one can be (Karpenter's
    do-not-repair annotation) and `owners` says where one cannot."""
    if node.platform == "hyperpod":
        found_by_hyperpod = (
            kind == HYPERPOD_HEALTH_KIND or node.labels.get(HEALTH_LABEL) in HYPERPOD_REPAIR_LABELS
        )
        if (
            found_by_hyperpod
            and seen.hyperpod_node_recovery == "Automatic"
            and policy.hyperpod_node_recovery == "defer"
        ):
            return "hyperpod"
        return "hyperguard"
    if kind in INTERRUPTION_KINDS:
        nth = seen.node_termination_handler and policy.node_termination_handler == "defer"
        return "nth" if nth else "hyperguard"
    if kind != NODE_CONDITION_KIND or facts.get("condition_type") not in REPAIRED_CONDITIONS:
        return "hyperguard"
    if _eks_repairs(node, seen):
        return "eks" if policy.eks_node_auto_repair == "defer" else "hyperguard"
    if NODEPOOL_LABEL in node.labels and seen.karpenter_node_repair:
        return "karpenter" if policy.karpenter_node_repair == "defer" else "hyperguard"
    return "hyperguard"


def holds_karpenter_off(node: Node, seen: Repairers) -> bool:
    """Whether HyperGuard, repairing this node itself, must annotate it do-not-repair so that
    Karpenter's node repair leaves it alone."""
    return (
        node.platform == "eks"
        and NODEPOOL_LABEL in node.labels
        and seen.karpenter_node_repair
        and not _eks_repairs(node, seen)
    )
