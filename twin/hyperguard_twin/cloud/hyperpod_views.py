"""What SageMaker HyperPod's DescribeCluster, ListClusterNodes and DescribeClusterNode answer
of the cluster and its nodes (the shapes of botocore's sagemaker model), and the cluster
configuration that only shows there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hyperguard.models import NodeStatus
from hyperguard_twin.cloud.core import Instance, order
from hyperguard_twin.cloud.hyperpod_nodes import HyperPodNodes, status_message
from hyperguard_twin.plane.kube import NODES


class HyperPodViews:
    def __init__(self, nodes: HyperPodNodes) -> None:
        self.nodes = nodes
        self.world = nodes.world
        self.continuous_provisioning = True
        self.autoscaling: dict[str, str] | None = None
        self.group_extras: list[Callable[[str], dict[str, Any]]] = []
        """More of an instance group's DescribeCluster details (automatic patching's)."""

    def describe_cluster(self) -> dict[str, Any]:
        """A group's TargetCount counts its nodes not deleted, those still waiting for an
        instance or failed to get one included; its CurrentCount, those with an instance.
        NodeProvisioningMode and AutoScaling (ClusterAutoScalingConfigOutput) are there only
        when the cluster was configured with them, as the model's optional members."""
        w = self.world
        described: dict[str, Any] = {
            "ClusterArn": self.nodes.cluster_arn,
            "ClusterName": w.hyperpod_cluster,
            "ClusterStatus": "InService",
            "InstanceGroups": [
                self._group_details(name, kind) for name, kind in sorted(self.nodes.groups.items())
            ],
            "Orchestrator": {
                "Eks": {"ClusterArn": f"arn:aws:eks:{w.region}:{w.account}:cluster/{w.eks_cluster}"}
            },
            "NodeRecovery": self.nodes.node_recovery,
        }
        if self.continuous_provisioning:
            described["NodeProvisioningMode"] = "Continuous"
        if self.autoscaling is not None:
            described["AutoScaling"] = dict(self.autoscaling)
        return described

    def _group_details(self, name: str, instance_type: str) -> dict[str, Any]:
        current = sum(
            1 for i in self.world.instances.values() if i.platform == "hyperpod" and i.group == name
        )
        unlaunched = sum(
            1 for a in self.nodes.additions.values() if a.group == name and a.instance_id is None
        )
        details = {
            "InstanceGroupName": name,
            "InstanceType": instance_type,
            "CurrentCount": current,
            "TargetCount": current + unlaunched,
            "ExecutionRole": f"arn:aws:iam::{self.world.account}:role/hyperpod-nodes",
            "LifeCycleConfig": {
                "SourceS3Uri": "s3://hyperpod-lifecycle/",
                "OnCreate": "on_create.sh",
            },
        }
        for extra in self.group_extras:
            details |= extra(name)
        return details

    def node_summary(self, instance: Instance) -> dict[str, Any]:
        summary: dict[str, Any] = {
            "InstanceGroupName": instance.group,
            "InstanceId": instance.instance_id,
            "InstanceType": instance.instance_type,
            "LaunchTime": self.world.clock.wall(instance.launch_time),
            "InstanceStatus": {
                "Status": instance.status.value,
                "Message": status_message(instance, self.world.faults.get(instance.instance_id)),
            },
        }
        if instance.patched_at is not None:
            summary["LastSoftwareUpdateTime"] = self.world.clock.wall(instance.patched_at)
        return summary

    def cluster_nodes(self, *, include_logical_ids: bool) -> list[dict[str, Any]]:
        """ClusterNodeSummaries, oldest first (ListClusterNodes' default order)."""
        summaries = []
        for instance in sorted(self.world.instances.values(), key=order):
            if instance.platform != "hyperpod":
                continue
            summary = self.node_summary(instance)
            if include_logical_ids:
                summary["NodeLogicalId"] = instance.logical_id
            summaries.append(summary)
        return summaries

    def describe_node(self, node_id: str) -> dict[str, Any] | None:
        """ClusterNodeDetails by instance id or NodeLogicalId; None when there is none. An
        added node without an instance is found by its NodeLogicalId only."""
        instance = next(
            (
                i
                for i in self.world.instances.values()
                if i.platform == "hyperpod" and node_id in (i.instance_id, i.logical_id)
            ),
            None,
        )
        if instance is None:
            addition = self.nodes.additions.get(node_id)
            if addition is None:
                return None
            status = NodeStatus.FAILURE if addition.failure else NodeStatus.PENDING
            return {
                "InstanceGroupName": addition.group,
                "NodeLogicalId": node_id,
                "InstanceType": self.nodes.groups[addition.group],
                "InstanceStatus": {"Status": status.value, "Message": addition.failure or ""},
            }
        kube = (
            self.world.kube.get(NODES, instance.node_name) if instance.registered else None
        ) or {}
        details = self.node_summary(instance)
        details.update(
            NodeLogicalId=instance.logical_id,
            CapacityType=instance.capacity_type,
            PrivateDnsHostname=instance.node_name,
            KubernetesConfig={
                "CurrentLabels": (kube.get("metadata") or {}).get("labels", {}),
                "CurrentTaints": [
                    {"Key": t["key"], "Value": t.get("value", ""), "Effect": t["effect"]}
                    for t in (kube.get("spec") or {}).get("taints", [])
                ],
            },
        )
        return details
