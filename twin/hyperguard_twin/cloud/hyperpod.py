"""SageMaker HyperPod's API and node lifecycle (no open-source original): instance groups,
BatchReboot/BatchReplaceClusterNodes with per-node errors, StartClusterHealthCheck,
BatchAddClusterNodes (Continuous provisioning mode: Pending nodes that get an instance, then
join Kubernetes; idempotent by ClientToken) and BatchDeleteClusterNodes, and what
DescribeCluster, ListClusterNodes and DescribeClusterNode answer. Requests are validated as
botocore's sagemaker model says in `hyperguard_twin.aws`, before this controller is asked.

A reboot takes the node down for `reboot_s` and cures a fault that heals on reboot; a
replacement shuts the old instance down, then a new instance with the same NodeLogicalId (or,
a knob of the world, a new one) boots and joins Kubernetes as a new Node; a deep health check
takes the node out of service and passes only when no fault is left. HyperPod capacity per
instance group is a knob of the world: an added node that finds none left stays in Failure.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from hyperguard.cluster.conventions import INSTANCE_ID_IN_USE, INSTANCE_ID_NOT_FOUND
from hyperguard.models import NodeStatus
from hyperguard_twin.cloud.core import AZ, Fault, Instance, World, order
from hyperguard_twin.cloud.kubelets import FAULT_CONDITIONS, Kubelets
from hyperguard_twin.ids import hyperpod_cluster_arn
from hyperguard_twin.plane.kube import NODES

NODE_ID_NOT_FOUND = "NodeIdNotFound"
NODE_ID_IN_USE = "NodeIdInUse"
REBOOT_DONE, SHUTDOWN_DONE, BOOT_DONE, CHECK_DONE = (
    "reboot_done",
    "shutdown_done",
    "boot_done",
    "check_done",
)
NODE_LAUNCH, NODE_JOIN = "node_launch", "node_join"
AUTO_RECOVERY = "auto_recovery"
NodeRecovery = Literal["Automatic", "None"]
"""DescribeCluster's NodeRecovery (ClusterNodeRecovery in botocore's SageMaker model)."""
REPAIR_ENDS = frozenset({REBOOT_DONE, SHUTDOWN_DONE, BOOT_DONE})

NodeLoss = Callable[[Instance, datetime], None]


@dataclass
class Addition:
    """A node BatchAddClusterNodes added, until it runs: waiting for its instance, then
    booting on it (`instance_id`); or, its launch failed (`failure`), in Failure for good."""

    group: str
    instance_id: str | None = None
    failure: str | None = None


def _failure(node_id: str, code: str, message: str) -> dict[str, str]:
    return {"NodeId": node_id, "ErrorCode": code, "Message": f"{node_id}: {message}"}


def _status_message(instance: Instance, fault: Fault | None) -> str:
    if instance.status is NodeStatus.FAILURE and fault is not None:
        return f"The node failed its health checks ({FAULT_CONDITIONS[fault.kind][1]})."
    return ""


class HyperPod:
    def __init__(self, world: World, kubelets: Kubelets, lose: NodeLoss) -> None:
        self.world = world
        self.kubelets = kubelets
        self._lose = lose
        self.groups: dict[str, str] = {}
        """Instance groups, with their instance type (kept when they are empty)."""
        self.additions: dict[str, Addition] = {}
        self.replaced_by: dict[str, str] = {}
        self._replacements: dict[str, str] = {}
        """A replacement in progress: the old instance id → the new one's."""
        self._never_healthy: set[str] = set()
        self._refusals: list[str] = []
        self._capacity: dict[str, int] = {}
        self._add_tokens: dict[str, dict[str, Any]] = {}
        self.keep_logical_ids = True
        self.continuous_provisioning = True
        self.autoscaling: dict[str, str] | None = None
        self.node_recovery: NodeRecovery = "Automatic"
        """DescribeCluster's NodeRecovery. Automatic, AWS's default ("By default, the clusters
        are set up with Automatic node recovery"): a node HyperPod's health agent finds
        faulty is rebooted (a GPU fault, once) or replaced by HyperPod itself."""
        self._auto_rebooted: set[str] = set()
        self.events: list[dict[str, Any]] = []
        """ListClusterEvents' ClusterEventSummary items, oldest first: a repair's start (who
        ordered it) and end, on the instance. The descriptions are the twin's own wording
        (AWS publishes the shape, not a catalogue of descriptions): HyperGuard records them
        as they come and never parses them."""
        self.on_replaced: list[Callable[[Instance, Instance], None]] = []
        """Called with (old, new) when a replacement's new instance exists."""
        self.group_extras: list[Callable[[str], dict[str, Any]]] = []
        """More of an instance group's DescribeCluster details (automatic patching's)."""
        for what, handler in (
            (REBOOT_DONE, self._reboot_done),
            (SHUTDOWN_DONE, self._shutdown_done),
            (BOOT_DONE, self._boot_done),
            (CHECK_DONE, self._check_done),
            (NODE_LAUNCH, self._launch_added),
            (NODE_JOIN, self._join_added),
            (AUTO_RECOVERY, self._recover_automatically),
        ):
            world.handle(what, handler)
        world.holdable = world.holdable | REPAIR_ENDS

    @property
    def cluster_arn(self) -> str:
        w = self.world
        return hyperpod_cluster_arn(w.hyperpod_cluster, w.region, w.account)

    # ------------------------------------------------------------------ the world's knobs

    def add_group(self, group: str, instance_type: str, count: int, now: datetime) -> list[str]:
        """HyperPod nodes joined to the EKS cluster, healthy and schedulable."""
        self.groups.setdefault(group, instance_type)
        ids = []
        for _ in range(count):
            instance = self._new_instance(group, instance_type, now)
            self.kubelets.register(instance, now)
            ids.append(instance.instance_id)
        return ids

    def set_capacity(self, group: str, available: int | None) -> None:
        if available is not None and available < 0:
            raise ValueError("available must not be negative")
        if available is None:
            self._capacity.pop(group, None)
        else:
            self._capacity[group] = available

    def fail_next_repairs(self, error_code: str, count: int) -> None:
        self._refusals.extend([error_code] * count)

    def replacement_never_healthy(self, instance_id: str) -> None:
        self._never_healthy.add(instance_id)

    @contextmanager
    def repairs_held(self) -> Iterator[None]:
        """Inside, no reboot or replacement finishes; on leaving, those that were due finish
        at once. At real speed a repair takes minutes and a storm's reports reach the service
        in seconds; the twin's speed-up can make a loaded machine's ingestion the slower one,
        and this puts the two back in their real order."""
        with self.world.lock:
            self.world.held = []
        try:
            yield
        finally:
            self.world.release_held()

    # ------------------------------------------------------------------ instances

    def _new_instance(
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

    def automatic_repair(self, instance: Instance) -> Literal["reboot", "replace"]:
        """What HyperPod's automatic recovery does to a node with a fault: a GPU fault is
        rebooted once, anything else, or a fault a reboot did not cure, replaced."""
        fault = self.world.faults.get(instance.instance_id)
        gpu = fault is not None and fault.kind == "gpu"
        return "reboot" if gpu and instance.instance_id not in self._auto_rebooted else "replace"

    def _recover_automatically(self, instance_id: str, at: datetime) -> None:
        instance = self.world.instances.get(instance_id)
        fault = self.world.faults.get(instance_id)
        if (
            instance is None
            or fault is None
            or fault.kind == "kernel"
            or instance.repair is not None
            or self.node_recovery != "Automatic"
        ):
            return  # cured, gone, or already being repaired (by whoever ordered it)
        action = self.automatic_repair(instance)
        if action == "reboot":
            self._auto_rebooted.add(instance_id)
        why = _status_message(instance, fault)
        self.event(instance, at, f"Automatic node recovery started a {action}: {why}", "Warn")
        self.start_repair(instance, action, at)

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

    # ------------------------------------------------------------------ repairs

    def batch_repair(
        self, action: Literal["reboot", "replace"], node_ids: list[str], now: datetime
    ) -> dict[str, Any]:
        """BatchRebootClusterNodes / BatchReplaceClusterNodes' response."""
        successful: list[str] = []
        failed: list[dict[str, str]] = []
        for node_id in node_ids:
            instance = self.world.instances.get(node_id)
            if instance is None or instance.platform != "hyperpod":
                failed.append(_failure(node_id, INSTANCE_ID_NOT_FOUND, "not in the cluster"))
            elif instance.repair is not None:
                what = f"a {instance.repair} of {node_id} is in progress"
                failed.append(_failure(node_id, INSTANCE_ID_IN_USE, what))
            elif self.joining(node_id):
                failed.append(_failure(node_id, INSTANCE_ID_IN_USE, "still joining the cluster"))
            elif self._refusals:
                failed.append(_failure(node_id, self._refusals.pop(0), "injected failure"))
            else:
                verb = "Reboot" if action == "reboot" else "Replace"
                self.event(
                    instance, now, f"Batch{verb}ClusterNodes request accepted: {action} started"
                )
                self.start_repair(instance, action, now)
                successful.append(node_id)
        return {"Successful": successful, "Failed": failed}

    def start_repair(
        self, instance: Instance, action: Literal["reboot", "replace"], now: datetime
    ) -> None:
        instance.repair = action
        if action == "reboot":
            instance.status = NodeStatus.PENDING
            self.world.schedule(now, self.world.timings.reboot_s, REBOOT_DONE, instance.instance_id)
        else:
            self._replacements[instance.instance_id] = self.world.new_instance_id()
            instance.status = NodeStatus.SHUTTING_DOWN
            shutdown = self.world.timings.replace_shutdown_s
            self.world.schedule(now, shutdown, SHUTDOWN_DONE, instance.instance_id)
        self.kubelets.publish(instance, now)
        self._lose(instance, now)

    def _reboot_done(self, instance_id: str, at: datetime) -> None:
        instance = self.world.rebooted(instance_id)
        if instance is None:
            return
        self.event(instance, at, "Node reboot completed")
        self.show_health(instance, at)

    def _shutdown_done(self, instance_id: str, at: datetime) -> None:
        old = self.world.instances.get(instance_id)
        new_id = self._replacements.pop(instance_id, None)
        if old is None or new_id is None:
            return
        del self.world.instances[instance_id]
        self.world.faults.pop(instance_id, None)
        self.replaced_by[instance_id] = new_id
        self.event(old, at, f"Node replaced: instance {new_id} takes its place")
        self.kubelets.deregister(old)
        logical_id = old.logical_id if self.keep_logical_ids else self.world.new_logical_id()
        new = self._new_instance(
            old.group, old.instance_type, at, logical_id, NodeStatus.PENDING, new_id
        )
        new.capacity_type = old.capacity_type
        new.repair = "replace"
        if instance_id in self._never_healthy:
            self._never_healthy.discard(instance_id)
            self.world.faults[new_id] = Fault("persistent", heal_on_reboot=False)
        remaining = self.world.timings.replace_s - self.world.timings.replace_shutdown_s
        self.world.schedule(at, remaining, BOOT_DONE, new_id)
        self.kubelets.register(new, at)
        for hook in self.on_replaced:
            hook(old, new)

    def _boot_done(self, instance_id: str, at: datetime) -> None:
        instance = self.world.instances.get(instance_id)
        if instance is None:
            return
        instance.repair = None
        self.show_health(instance, at)

    def start_health_check(self, instance_ids: list[str], now: datetime) -> None:
        """Deep health checks on these Running nodes (StartClusterHealthCheck)."""
        for instance_id in instance_ids:
            instance = self.world.instances.get(instance_id)
            if instance is None or instance.status is not NodeStatus.RUNNING:
                continue
            instance.status = NodeStatus.DEEP_HEALTH_CHECK_IN_PROGRESS
            instance.deep_health_check = "InProgress"
            self.kubelets.publish(instance, now)
            self._lose(instance, now)
            self.world.schedule(
                now, self.world.timings.deep_health_check_s, CHECK_DONE, instance_id
            )

    def _check_done(self, instance_id: str, at: datetime) -> None:
        instance = self.world.instances.get(instance_id)
        if instance is None:
            return
        passed = instance_id not in self.world.faults
        instance.deep_health_check = "Passed" if passed else "Failed"
        self.show_health(instance, at)

    # ------------------------------------------------------------------ adding, deleting

    def _unaddable(self, spec: Mapping[str, Any]) -> tuple[str, str] | None:
        """Why HyperPod cannot add an entry's nodes (error code, message); None: it can."""
        group = spec["InstanceGroupName"]
        instance_type = self.groups.get(group)
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
                self.additions[logical_id] = Addition(group)
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
        addition = self.additions.get(logical_id)
        if addition is None:
            return  # deleted before the launch: nothing is launched
        instance_type = self.groups[addition.group]
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
        instance = self._new_instance(
            addition.group, instance_type, at, logical_id, NodeStatus.PENDING
        )
        addition.instance_id = instance.instance_id

    def _join_added(self, logical_id: str, at: datetime) -> None:
        """The added node has booted and joined Kubernetes."""
        addition = self.additions.get(logical_id)
        if addition is None or addition.instance_id is None:
            return  # deleted, or its launch failed
        del self.additions[logical_id]
        instance = self.world.instances[addition.instance_id]
        self.show_health(instance, at)
        self.kubelets.register(instance, at)

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
        if instance is None and by_logical_id and key in self.additions:
            del self.additions[key]  # no instance to terminate: its launch is called off
            return None
        if instance is None:
            return (
                NODE_ID_NOT_FOUND,
                f"Node {key} not found in cluster {self.world.hyperpod_cluster}.",
            )
        if instance.repair is not None:
            return NODE_ID_IN_USE, f"A {instance.repair} of node {key} is in progress."
        self._lose(instance, now)
        del self.world.instances[instance.instance_id]
        self.world.faults.pop(instance.instance_id, None)
        self._never_healthy.discard(instance.instance_id)
        if instance.logical_id is not None:
            self.additions.pop(instance.logical_id, None)
        self.kubelets.deregister(instance)
        return None

    # ------------------------------------------------------------------ what the API answers

    def describe_cluster(self) -> dict[str, Any]:
        """A group's TargetCount counts its nodes not deleted, those still waiting for an
        instance or failed to get one included; its CurrentCount, those with an instance.
        NodeProvisioningMode and AutoScaling (ClusterAutoScalingConfigOutput) are there only
        when the cluster was configured with them, as the model's optional members."""
        w = self.world
        described: dict[str, Any] = {
            "ClusterArn": self.cluster_arn,
            "ClusterName": w.hyperpod_cluster,
            "ClusterStatus": "InService",
            "InstanceGroups": [
                self._group_details(name, kind) for name, kind in sorted(self.groups.items())
            ],
            "Orchestrator": {
                "Eks": {"ClusterArn": f"arn:aws:eks:{w.region}:{w.account}:cluster/{w.eks_cluster}"}
            },
            "NodeRecovery": self.node_recovery,
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
            1 for a in self.additions.values() if a.group == name and a.instance_id is None
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
                "Message": _status_message(instance, self.world.faults.get(instance.instance_id)),
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
            addition = self.additions.get(node_id)
            if addition is None:
                return None
            status = NodeStatus.FAILURE if addition.failure else NodeStatus.PENDING
            return {
                "InstanceGroupName": addition.group,
                "NodeLogicalId": node_id,
                "InstanceType": self.groups[addition.group],
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
