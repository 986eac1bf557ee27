"""The simulated cloud's side of SageMaker HyperPod's and EC2's operations, which the
emulator routes here (`hyperguard_twin.aws`): each is played with everything due up to the
clock's time settled first, as the service would find the cloud."""

from __future__ import annotations

from typing import Any, Literal

from hyperguard_twin.cloud.core import CapacityType, World
from hyperguard_twin.cloud.ec2 import Ec2
from hyperguard_twin.cloud.hyperpod import HyperPod


class CloudApi:
    def __init__(self, world: World, hyperpod: HyperPod, ec2: Ec2) -> None:
        self.world = world
        self.hyperpod = hyperpod
        self.ec2 = ec2

    @property
    def continuous_provisioning(self) -> bool:
        return self.hyperpod.continuous_provisioning

    def owns(self, instance_id: str) -> bool:
        with self.world.lock:
            return instance_id in self.world.instances or instance_id in self.hyperpod.replaced_by

    # ------------------------------------------------------------------ SageMaker

    def describe_cluster(self) -> dict[str, Any]:
        with self.world.settled():
            return self.hyperpod.describe_cluster()

    def cluster_events(self) -> list[dict[str, Any]]:
        with self.world.settled():
            return list(self.hyperpod.events)

    def cluster_nodes(self, *, include_logical_ids: bool) -> list[dict[str, Any]]:
        with self.world.settled():
            return self.hyperpod.cluster_nodes(include_logical_ids=include_logical_ids)

    def describe_node(self, node_id: str) -> dict[str, Any] | None:
        with self.world.settled():
            return self.hyperpod.describe_node(node_id)

    def batch_repair(
        self, action: Literal["reboot", "replace"], node_ids: list[str]
    ) -> dict[str, Any]:
        with self.world.settled() as now:
            return self.hyperpod.batch_repair(action, node_ids, now)

    def add_cluster_nodes(
        self, nodes_to_add: list[dict[str, Any]], client_token: str | None = None
    ) -> dict[str, Any]:
        with self.world.settled() as now:
            return self.hyperpod.add_cluster_nodes(nodes_to_add, client_token, now)

    def delete_cluster_nodes(self, node_ids: list[str], logical_ids: list[str]) -> dict[str, Any]:
        with self.world.settled() as now:
            return self.hyperpod.delete_cluster_nodes(node_ids, logical_ids, now)

    def start_health_check(self, instance_ids: list[str]) -> None:
        with self.world.settled() as now:
            self.hyperpod.start_health_check(instance_ids, now)

    # ------------------------------------------------------------------ EC2

    def reboot_instances(self, instance_ids: list[str]) -> list[str]:
        """RebootInstances; returns the ids this cluster does not own."""
        with self.world.settled() as now:
            unknown = [i for i in instance_ids if i not in self.world.instances]
            for instance_id in instance_ids:
                instance = self.world.instances.get(instance_id)
                if instance is None:
                    continue
                if instance.platform == "hyperpod":
                    if instance.repair is None and not self.hyperpod.joining(instance_id):
                        self.hyperpod.start_repair(instance, "reboot", now)
                else:
                    self.ec2.reboot(instance_id, now)
            return unknown

    def ec2_launch_check(self, instance_type: str, capacity_type: CapacityType, count: int) -> None:
        with self.world.lock:
            self.ec2.check_capacity(instance_type, capacity_type, count)

    def ec2_launched(self, instance_id: str, **details: Any) -> None:
        with self.world.settled() as now:
            self.ec2.launched(instance_id, now=now, **details)

    def ec2_terminated(self, instance_ids: list[str]) -> None:
        with self.world.settled() as now:
            for instance_id in instance_ids:
                self.ec2.terminated(instance_id, now)
