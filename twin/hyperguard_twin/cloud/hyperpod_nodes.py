"""What SageMaker HyperPod's controllers share (`hyperguard_twin.cloud.hyperpod` composes
them): the cluster's instance groups and its nodes, those BatchAddClusterNodes added that do
not run yet, its NodeRecovery, its cluster events (ListClusterEvents), and what its health
agent shows of a node.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from hyperguard.models import NodeStatus
from hyperguard_twin.cloud.core import Fault, Instance, World
from hyperguard_twin.cloud.kubelets import FAULT_CONDITIONS, Kubelets
from hyperguard_twin.ids import hyperpod_cluster_arn

AUTO_RECOVERY = "auto_recovery"
NodeRecovery = Literal["Automatic", "None"]
"""DescribeCluster's NodeRecovery (ClusterNodeRecovery in botocore's SageMaker model)."""

NodeLoss = Callable[[Instance, datetime], None]


@dataclass
class Addition:
    """A node BatchAddClusterNodes added, until it runs: waiting for its instance, then
    booting on it (`instance_id`); or, its launch failed (`failure`), in Failure for good."""

    group: str
    instance_id: str | None = None
    failure: str | None = None


def status_message(instance: Instance, fault: Fault | None) -> str:
    if instance.status is NodeStatus.FAILURE and fault is not None:
        return f"The node failed its health checks ({FAULT_CONDITIONS[fault.kind][1]})."
    return ""


class HyperPodNodes:
    def __init__(self, world: World, kubelets: Kubelets, lose: NodeLoss) -> None:
        self.world = world
        self.kubelets = kubelets
        self.lose = lose
        """Called when a node goes out of service (its pods' processes are gone)."""
        self.groups: dict[str, str] = {}
        """Instance groups, with their instance type (kept when they are empty)."""
        self.additions: dict[str, Addition] = {}
        self.node_recovery: NodeRecovery = "Automatic"
        """DescribeCluster's NodeRecovery. Automatic, AWS's default ("By default, the clusters
        are set up with Automatic node recovery"): a node HyperPod's health agent finds
        faulty is rebooted (a GPU fault, once) or replaced by HyperPod itself."""
        self.events: list[dict[str, Any]] = []
        """ListClusterEvents' ClusterEventSummary items, oldest first: a repair's start (who
        ordered it) and end, on the instance. The descriptions are the twin's own wording
        (AWS publishes the shape, not a catalogue of descriptions): HyperGuard records them
        as they come and never parses them."""

    @property
    def cluster_arn(self) -> str:
        w = self.world
        return hyperpod_cluster_arn(w.hyperpod_cluster, w.region, w.account)

    def add_group(self, group: str, instance_type: str, count: int, now: datetime) -> list[str]:
        """HyperPod nodes joined to the EKS cluster, healthy and schedulable."""
        self.groups.setdefault(group, instance_type)
        ids = []
        for _ in range(count):
            instance = self.new_instance(group, instance_type, now)
            self.kubelets.register(instance, now)
            ids.append(instance.instance_id)
        return ids

    def new_instance(
        self,
        group: str,
        instance_type: str,
        now: datetime,
        logical_id: str | None = None,
        status: NodeStatus = NodeStatus.RUNNING,
        instance_id: str | None = None,
    ) -> Instance:
        instance_id = instance_id or self.world.new_instance_id()
        instance = Instance(
            instance_id=instance_id,
            platform="hyperpod",
            cluster=self.world.hyperpod_cluster,
            group=group,
            instance_type=instance_type,
            node_name=f"hyperpod-{instance_id}",
            launch_time=now,
            logical_id=logical_id or self.world.new_logical_id(),
            status=status,
        )
        self.world.instances[instance_id] = instance
        return instance

    def joining(self, instance_id: str) -> bool:
        """Whether the instance is an added node's, booting and not yet in Kubernetes."""
        return any(a.instance_id == instance_id for a in self.additions.values())

    def show_health(self, instance: Instance, now: datetime) -> None:
        """What the health agent reports once nothing is happening to the node; with
        Automatic node recovery, a fault it sees is repaired by HyperPod after a while."""
        fault = self.world.faults.get(instance.instance_id)
        sagemaker_sees = fault is not None and fault.kind != "kernel"
        instance.status = NodeStatus.FAILURE if sagemaker_sees else NodeStatus.RUNNING
        self.kubelets.publish(instance, now)
        if sagemaker_sees and self.node_recovery == "Automatic":
            delay = self.world.timings.auto_recovery_s
            self.world.schedule(now, delay, AUTO_RECOVERY, instance.instance_id)

    def event(
        self, instance: Instance, at: datetime, description: str, level: str = "Info"
    ) -> None:
        """Record a cluster event about `instance` (ListClusterEvents)."""
        self.events.append(
            {
                "EventId": str(uuid.uuid4()),
                "ClusterArn": self.cluster_arn,
                "ClusterName": self.world.hyperpod_cluster,
                "InstanceGroupName": instance.group,
                "InstanceId": instance.instance_id,
                "ResourceType": "Instance",
                "EventTime": self.world.clock.wall(at),
                "Description": description,
                "EventLevel": level,
            }
        )
