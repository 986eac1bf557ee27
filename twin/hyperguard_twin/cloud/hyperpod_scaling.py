"""HyperPod's scaling of its instance groups (no open-source original): BatchAddClusterNodes
(Continuous provisioning mode: Pending nodes that get an instance, then join Kubernetes;
idempotent by ClientToken) and BatchDeleteClusterNodes. HyperPod capacity per instance group
is a knob of the world: an added node that finds none left stays in Failure.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from hyperguard.models import NodeStatus
from hyperguard_twin.cloud.core import AZ
from hyperguard_twin.cloud.hyperpod_nodes import Addition, HyperPodNodes
from hyperguard_twin.cloud.hyperpod_repair import NodeRepairs

NODE_ID_NOT_FOUND = "NodeIdNotFound"
NODE_ID_IN_USE = "NodeIdInUse"
NODE_LAUNCH, NODE_JOIN = "node_launch", "node_join"


class NodeScaling:
    def __init__(self, nodes: HyperPodNodes, repairs: NodeRepairs) -> None:
        self.nodes = nodes
        self.world = nodes.world
        self.repairs = repairs
        self._capacity: dict[str, int] = {}
        self._add_tokens: dict[str, dict[str, Any]] = {}
        self.world.handle(NODE_LAUNCH, self._launch_added)
        self.world.handle(NODE_JOIN, self._join_added)

    def set_capacity(self, group: str, available: int | None) -> None:
        if available is not None and available < 0:
            raise ValueError("available must not be negative")
        if available is None:
            self._capacity.pop(group, None)
        else:
            self._capacity[group] = available

    # ------------------------------------------------------------------ adding

    def _unaddable(self, spec: Mapping[str, Any]) -> tuple[str, str] | None:
        """Why HyperPod cannot add an entry's nodes (error code, message); None: it can."""
        group = spec["InstanceGroupName"]
        instance_type = self.nodes.groups.get(group)
        if instance_type is None:
            return (
                "InstanceGroupNotFound",
                f"Instance group {group} not found in cluster {self.world.hyperpod_cluster}.",
            )
        types = spec.get("InstanceTypes")
        if types and instance_type not in types:
            return (
                "IncompatibleInstanceTypes",
                f"Instance group {group} runs {instance_type}, not one of {types}.",
            )
        zones = spec.get("AvailabilityZones")
        if zones and AZ not in zones:
            return (
                "IncompatibleAvailabilityZones",
                f"Instance group {group} is in {AZ}, not one of {zones}.",
            )
        return None

    def add_cluster_nodes(
        self, nodes_to_add: list[dict[str, Any]], client_token: str | None, now: datetime
    ) -> dict[str, Any]:
        """BatchAddClusterNodes' response: each node added is Pending, with its new
        NodeLogicalId; an entry HyperPod cannot grant fails whole. Asked again with a
        ClientToken it has seen, HyperPod adds nothing and answers as it did."""
        if client_token is not None and client_token in self._add_tokens:
            return copy.deepcopy(self._add_tokens[client_token])
        successful: list[dict[str, str]] = []
        failed: list[dict[str, Any]] = []
        for spec in nodes_to_add:
            group, count = spec["InstanceGroupName"], int(spec["IncrementTargetCountBy"])
            refusal = self._unaddable(spec)
            if refusal is not None:
                code, message = refusal
                failed.append(
                    {
                        "InstanceGroupName": group,
                        "ErrorCode": code,
                        "FailedCount": count,
                        "Message": message,
                    }
                )
                continue
            for _ in range(count):
                logical_id = self.world.new_logical_id()
                self.nodes.additions[logical_id] = Addition(group)
                timings = self.world.timings
                self.world.schedule(now, timings.hyperpod_launch_s, NODE_LAUNCH, logical_id)
                self.world.schedule(now, timings.hyperpod_add_s, NODE_JOIN, logical_id)
                successful.append(
                    {"NodeLogicalId": logical_id, "InstanceGroupName": group, "Status": "Pending"}
                )
        response = {"Successful": successful, "Failed": failed}
        if client_token is not None:
            self._add_tokens[client_token] = copy.deepcopy(response)
        return response

    def _launch_added(self, logical_id: str, at: datetime) -> None:
        """HyperPod launches the added node's instance (Pending while it boots), or finds
        no capacity for it: the node is in Failure."""
        addition = self.nodes.additions.get(logical_id)
        if addition is None:
            return  # deleted before the launch: nothing is launched
        instance_type = self.nodes.groups[addition.group]
        left = self._capacity.get(addition.group)
        if left == 0:
            addition.failure = (
                "InsufficientInstanceCapacity: We currently do not have sufficient "
                f"{instance_type} capacity to launch the node in instance group "
                f"{addition.group}."
            )
            return
        if left is not None:
            self._capacity[addition.group] = left - 1
        instance = self.nodes.new_instance(
            addition.group, instance_type, at, logical_id, NodeStatus.PENDING
        )
        addition.instance_id = instance.instance_id

    def _join_added(self, logical_id: str, at: datetime) -> None:
        """The added node has booted and joined Kubernetes."""
        addition = self.nodes.additions.get(logical_id)
        if addition is None or addition.instance_id is None:
            return  # deleted, or its launch failed
        del self.nodes.additions[logical_id]
        instance = self.world.instances[addition.instance_id]
        self.nodes.show_health(instance, at)
        self.nodes.kubelets.register(instance, at)

    # ------------------------------------------------------------------ deleting

    def delete_cluster_nodes(
        self, node_ids: list[str], logical_ids: list[str], now: datetime
    ) -> dict[str, Any]:
        """BatchDeleteClusterNodes' response. Its lists are for the kinds of ids asked
        about, each only when it holds some (the model's lists hold at least one)."""
        deleted, refused = self._delete_each(node_ids, "NodeId", now)
        deleted_slots, refused_slots = self._delete_each(logical_ids, "NodeLogicalId", now)
        response = {
            "Successful": deleted,
            "Failed": refused,
            "SuccessfulNodeLogicalIds": deleted_slots,
            "FailedNodeLogicalIds": refused_slots,
        }
        return {key: ids for key, ids in response.items() if ids}

    def _delete_each(
        self, keys: list[str], kind: Literal["NodeId", "NodeLogicalId"], now: datetime
    ) -> tuple[list[str], list[dict[str, str]]]:
        deleted: list[str] = []
        refused: list[dict[str, str]] = []
        for key in keys:
            refusal = self._delete_node(key, by_logical_id=kind == "NodeLogicalId", now=now)
            if refusal is None:
                deleted.append(key)
            else:
                code, message = refusal
                refused.append({"Code": code, "Message": message, kind: key})
        return deleted, refused

    def _delete_node(
        self, key: str, *, by_logical_id: bool, now: datetime
    ) -> tuple[str, str] | None:
        instance = next(
            (
                i
                for i in self.world.instances.values()
                if i.platform == "hyperpod"
                and key == (i.logical_id if by_logical_id else i.instance_id)
            ),
            None,
        )
        if instance is None and by_logical_id and key in self.nodes.additions:
            del self.nodes.additions[key]  # no instance to terminate: its launch is called off
            return None
        if instance is None:
            return (
                NODE_ID_NOT_FOUND,
                f"Node {key} not found in cluster {self.world.hyperpod_cluster}.",
            )
        if instance.repair is not None:
            return NODE_ID_IN_USE, f"A {instance.repair} of node {key} is in progress."
        self.nodes.lose(instance, now)
        del self.world.instances[instance.instance_id]
        self.world.faults.pop(instance.instance_id, None)
        self.repairs.forget(instance.instance_id)
        if instance.logical_id is not None:
            self.nodes.additions.pop(instance.logical_id, None)
        self.nodes.kubelets.deregister(instance)
        return None
