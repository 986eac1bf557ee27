"""SageMaker HyperPod's API (no open-source original), over the controllers that stand for its
parts and share the cluster's nodes (`hyperpod_nodes`): node repairs and deep health checks
(`hyperpod_repair`), adding and deleting nodes (`hyperpod_scaling`), and what DescribeCluster,
ListClusterNodes and DescribeClusterNode answer (`hyperpod_views`). Requests are validated as
botocore's sagemaker model says in `hyperguard_twin.aws`, before this controller is asked.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Literal

from hyperguard_twin.cloud.core import Instance, World
from hyperguard_twin.cloud.hyperpod_nodes import HyperPodNodes, NodeLoss, NodeRecovery
from hyperguard_twin.cloud.hyperpod_repair import NodeRepairs
from hyperguard_twin.cloud.hyperpod_scaling import NodeScaling
from hyperguard_twin.cloud.hyperpod_views import HyperPodViews
from hyperguard_twin.cloud.kubelets import Kubelets


class HyperPod:
    def __init__(self, world: World, kubelets: Kubelets, lose: NodeLoss) -> None:
        self.nodes = HyperPodNodes(world, kubelets, lose)
        self.repairs = NodeRepairs(self.nodes)
        self.scaling = NodeScaling(self.nodes, self.repairs)
        self.views = HyperPodViews(self.nodes)

    # ------------------------------------------------------------------ the world's knobs

    @property
    def node_recovery(self) -> NodeRecovery:
        return self.nodes.node_recovery

    @node_recovery.setter
    def node_recovery(self, value: NodeRecovery) -> None:
        self.nodes.node_recovery = value

    @property
    def keep_logical_ids(self) -> bool:
        return self.repairs.keep_logical_ids

    @keep_logical_ids.setter
    def keep_logical_ids(self, keep: bool) -> None:
        self.repairs.keep_logical_ids = keep

    @property
    def continuous_provisioning(self) -> bool:
        return self.views.continuous_provisioning

    @continuous_provisioning.setter
    def continuous_provisioning(self, continuous: bool) -> None:
        self.views.continuous_provisioning = continuous

    @property
    def autoscaling(self) -> dict[str, str] | None:
        return self.views.autoscaling

    @autoscaling.setter
    def autoscaling(self, config: dict[str, str] | None) -> None:
        self.views.autoscaling = config

    def add_group(self, group: str, instance_type: str, count: int, now: datetime) -> list[str]:
        return self.nodes.add_group(group, instance_type, count, now)

    def set_capacity(self, group: str, available: int | None) -> None:
        self.scaling.set_capacity(group, available)

    def fail_next_repairs(self, error_code: str, count: int) -> None:
        self.repairs.fail_next_repairs(error_code, count)

    def replacement_never_healthy(self, instance_id: str) -> None:
        self.repairs.replacement_never_healthy(instance_id)

    def repairs_held(self) -> AbstractContextManager[None]:
        return self.repairs.held()

    # ------------------------------------------------------------------ the nodes

    @property
    def events(self) -> list[dict[str, Any]]:
        return self.nodes.events

    @property
    def replaced_by(self) -> dict[str, str]:
        return self.repairs.replaced_by

    @property
    def on_replaced(self) -> list[Callable[[Instance, Instance], None]]:
        return self.repairs.on_replaced

    def joining(self, instance_id: str) -> bool:
        return self.nodes.joining(instance_id)

    def show_health(self, instance: Instance, now: datetime) -> None:
        self.nodes.show_health(instance, now)

    def start_repair(
        self, instance: Instance, action: Literal["reboot", "replace"], now: datetime
    ) -> None:
        self.repairs.start(instance, action, now)

    # ------------------------------------------------------------------ the API

    def batch_repair(
        self, action: Literal["reboot", "replace"], node_ids: list[str], now: datetime
    ) -> dict[str, Any]:
        return self.repairs.batch_repair(action, node_ids, now)

    def start_health_check(self, instance_ids: list[str], now: datetime) -> None:
        self.repairs.start_health_check(instance_ids, now)

    def add_cluster_nodes(
        self, nodes_to_add: list[dict[str, Any]], client_token: str | None, now: datetime
    ) -> dict[str, Any]:
        return self.scaling.add_cluster_nodes(nodes_to_add, client_token, now)

    def delete_cluster_nodes(
        self, node_ids: list[str], logical_ids: list[str], now: datetime
    ) -> dict[str, Any]:
        return self.scaling.delete_cluster_nodes(node_ids, logical_ids, now)

    def describe_cluster(self) -> dict[str, Any]:
        return self.views.describe_cluster()

    def cluster_nodes(self, *, include_logical_ids: bool) -> list[dict[str, Any]]:
        return self.views.cluster_nodes(include_logical_ids=include_logical_ids)

    def describe_node(self, node_id: str) -> dict[str, Any] | None:
        return self.views.describe_node(node_id)
