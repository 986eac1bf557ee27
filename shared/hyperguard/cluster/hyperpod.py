"""SageMaker HyperPod node inventory and node repair, through the SageMaker API.

Shapes follow botocore's sagemaker service model: ListClusterNodes (MaxResults ≤ 100;
IncludeNodeLogicalIds so that every node carries the NodeLogicalId its replacement keeps),
DescribeClusterNode, BatchRebootClusterNodes / BatchReplaceClusterNodes (≤ 25 NodeIds per
call, partial failure reported per node in `Failed`), StartClusterHealthCheck (deep health
checks per instance group); and, for clusters in `Continuous` node provisioning mode, growing
an instance group with BatchAddClusterNodes (≤ 50 nodes per group and call, idempotent by
ClientToken) and shrinking it with BatchDeleteClusterNodes (≤ 99 NodeLogicalIds per call).

DescribeCluster's `AutoScaling` (ClusterAutoScalingConfigOutput: Mode Enable | Disable,
AutoScalerType Karpenter, Status) says whether HyperPod's managed Karpenter autoscaling is on.
Which instance groups it scales is said only inside the EKS cluster (HyperpodNodeClass
objects' instance groups), so with it on every group counts as autoscaled: HyperPod's docs
say Karpenter scales a group it manages back to 0 nodes, whatever was added to it by hand.

A group's `AutoPatchConfig` (ClusterAutoPatchConfigDetails: PatchingStrategy, and
CurrentPatchSchedule.NextPatchDate) and `SoftwareUpdateStatus` say when HyperPod's automatic
patching next updates its software and whether an update runs now (D101).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel

from hyperguard.aws import client
from hyperguard.catalogue import InstanceCatalogue, UnknownInstanceTypeError
from hyperguard.cluster.conventions import INTERNAL_SERVER_ERROR, INVALID_INSTANCE_STATUS
from hyperguard.cluster.gateway import ClusterError, NodeNotFoundError
from hyperguard.models import Node, NodeStatus, RepairFailure, RepairOutcome
from hyperguard.models.cluster import ADD_LIMIT, InstanceGroupSize
from hyperguard.observability import logger

PLATFORM = "hyperpod"
LIST_PAGE_SIZE = 100
BATCH_LIMIT = 25
# Per-node failures worth another try within the call: a transient state or error. An unknown
# node (InstanceIdNotFound) will not appear by retrying, and InstanceIdInUse is an answer, not
# a fault: the node is already being rebooted or replaced, which lasts minutes, not the
# seconds of these retries. The caller decides at once what it means (Repair adopts that
# repair, D184; D187).
RETRYABLE_NODE_ERRORS = frozenset({INVALID_INSTANCE_STATUS, INTERNAL_SERVER_ERROR})
NOT_FOUND_ERRORS = frozenset({"ResourceNotFound", "ValidationException"})

DEEP_HEALTH_CHECKS = ("InstanceStress", "InstanceConnectivity", "MultiNodeTrainingValidation")
DELETE_LIMIT = 99
"""BatchDeleteClusterNodes' NodeLogicalIds maximum."""
CONTINUOUS = "Continuous"
NODE_RECOVERY_DEFAULT = "Automatic"
"""What a cluster created without NodeRecovery has: "By default, the clusters are set up with
Automatic node recovery" (SageMaker HyperPod developer guide, "Automatic node recovery")."""
AUTOSCALING_ENABLED = "Enable"
# BatchDeleteClusterNodes: the node is gone already (what a retried delete finds).
NODE_ID_NOT_FOUND = "NodeIdNotFound"
OPERATIONS = (
    "DescribeCluster",
    "ListClusterNodes",
    "DescribeClusterNode",
    "BatchRebootClusterNodes",
    "BatchReplaceClusterNodes",
    "StartClusterHealthCheck",
    "BatchAddClusterNodes",
    "BatchDeleteClusterNodes",
    "ListClusterEvents",
)
"""Every SageMaker operation this adapter calls: the runtime's botocore must know them all
(checked at init, hyperguard.aws.require_operations)."""


class AddedNode(BaseModel):
    """A node BatchAddClusterNodes added, as DescribeClusterNode reports it by logical id."""

    logical_id: str
    status: NodeStatus | None
    """None: SageMaker no longer knows the node (it was deleted)."""
    instance_id: str | None = None
    message: str = ""


def accelerators_of(catalogue: InstanceCatalogue, instance_type: str) -> int:
    """A node's accelerators; a type EC2 does not know counts as none (and is logged), so one
    odd node never stops the inventory."""
    try:
        return catalogue.spec(instance_type).accelerators
    except UnknownInstanceTypeError:
        logger.warning("instance type unknown to EC2", extra={"instance_type": instance_type})
        return 0


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class HyperPodAdapter:
    """Node inventory, status, reboot and replace for one HyperPod cluster."""

    def __init__(
        self,
        cluster_name: str,
        *,
        catalogue: InstanceCatalogue,
        client: Any | None = None,
        sleep: Callable[[float], None] = time.sleep,
        max_attempts: int = 4,
        base_delay_s: float = 2.0,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.cluster_name = cluster_name
        self.catalogue = catalogue
        self._client = client
        self._sleep = sleep
        self._max_attempts = max_attempts
        self._base_delay_s = base_delay_s

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = client("sagemaker")
        return self._client

    def list_nodes(self) -> list[Node]:
        nodes: list[Node] = []
        request: dict[str, Any] = {
            "ClusterName": self.cluster_name,
            "MaxResults": LIST_PAGE_SIZE,
            "IncludeNodeLogicalIds": True,
        }
        seen_tokens: set[str] = set()
        while True:
            page = self._call("list_cluster_nodes", **request)
            nodes.extend(
                self._to_node(summary)
                for summary in page.get("ClusterNodeSummaries", [])
                # With IncludeNodeLogicalIds, a node still being provisioned is listed
                # before it has an instance: it is not a node of ours yet.
                if summary.get("InstanceId")
            )
            token = page.get("NextToken")
            if not token:
                return nodes
            if token in seen_tokens:
                # A paginator that hands back a token twice would loop for ever.
                raise ClusterError(f"ListClusterNodes on {self.cluster_name} repeated a NextToken")
            seen_tokens.add(token)
            request["NextToken"] = token

    def node_status(self, instance_id: str) -> Node:
        try:
            response = self.client.describe_cluster_node(
                ClusterName=self.cluster_name, NodeId=instance_id
            )
        except ClientError as error:
            if error.response["Error"]["Code"] in NOT_FOUND_ERRORS:
                raise NodeNotFoundError(instance_id) from error
            raise ClusterError(f"DescribeClusterNode {instance_id}: {error}") from error
        except BotoCoreError as error:
            raise ClusterError(f"DescribeClusterNode {instance_id}: {error}") from error
        return self._to_node(response["NodeDetails"])

    def reboot(self, instance_ids: list[str]) -> RepairOutcome:
        return self._batch("batch_reboot_cluster_nodes", instance_ids)

    def replace(self, instance_ids: list[str]) -> RepairOutcome:
        """Replace nodes with new instances. Destroys the instances' volumes."""
        return self._batch("batch_replace_cluster_nodes", instance_ids)

    def start_deep_health_check(self, instance_ids: list[str], checks: list[str]) -> bool:
        """Run deep health checks on the nodes (HyperPod reboots or replaces a node that
        fails them). False when there was nothing to check."""
        groups: dict[str, list[str]] = {}
        wanted = set(instance_ids)
        for node in self.list_nodes():
            if node.instance_id in wanted:
                groups.setdefault(node.pool, []).append(node.instance_id)
        if not groups or not checks:
            return False
        self._call(
            "start_cluster_health_check",
            ClusterName=self.cluster_name,
            DeepHealthCheckConfigurations=[
                {"InstanceGroupName": group, "InstanceIds": ids, "DeepHealthChecks": list(checks)}
                for group, ids in sorted(groups.items())
            ],
        )
        return True

    def instance_groups(self) -> tuple[bool, list[InstanceGroupSize]]:
        """Whether nodes can be added (Continuous node provisioning), and the groups (each
        autoscaled while HyperPod's managed autoscaling is enabled)."""
        cluster = self._call("describe_cluster", ClusterName=self.cluster_name)
        autoscaled = (cluster.get("AutoScaling") or {}).get("Mode") == AUTOSCALING_ENABLED
        groups = [
            InstanceGroupSize(
                name=g["InstanceGroupName"],
                instance_type=g["InstanceType"],
                target_count=g.get("TargetCount", g.get("CurrentCount", 0)),
                current_count=g.get("CurrentCount", 0),
                autoscaled=autoscaled,
                next_patch_at=(
                    ((g.get("AutoPatchConfig") or {}).get("CurrentPatchSchedule") or {}).get(
                        "NextPatchDate"
                    )
                ),
                patching_strategy=(g.get("AutoPatchConfig") or {}).get("PatchingStrategy"),
                software_update_status=g.get("SoftwareUpdateStatus"),
            )
            for g in cluster.get("InstanceGroups", [])
            if g.get("InstanceGroupName") and g.get("InstanceType")
        ]
        return cluster.get("NodeProvisioningMode") == CONTINUOUS, groups

    def node_recovery(self) -> str:
        """DescribeCluster's NodeRecovery: `Automatic` (HyperPod reboots or replaces the nodes
        its health checks find faulty; AWS's default) or `None`."""
        cluster = self._call("describe_cluster", ClusterName=self.cluster_name)
        return str(cluster.get("NodeRecovery") or NODE_RECOVERY_DEFAULT)

    def cluster_events(self, node_id: str, after: datetime) -> list[dict[str, Any]]:
        """The cluster's events about a node since `after`, oldest first (at most a page of
        100: a repair writes a few). Empty where the cluster does not keep them: SageMaker
        lists events only for Continuous node provisioning (a ValidationException)."""
        try:
            response = self.client.list_cluster_events(
                ClusterName=self.cluster_name,
                NodeId=node_id,
                ResourceType="Instance",
                EventTimeAfter=after,
                SortBy="EventTime",
                SortOrder="Ascending",
                MaxResults=100,
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == "ValidationException":
                return []
            raise ClusterError(f"ListClusterEvents on {self.cluster_name}: {error}") from error
        except BotoCoreError as error:
            raise ClusterError(f"ListClusterEvents on {self.cluster_name}: {error}") from error
        events: list[dict[str, Any]] = response.get("Events", [])
        return events

    def add_nodes(self, group: str, count: int, client_token: str) -> tuple[list[str], list[str]]:
        """Grow `group` by `count` nodes; the new nodes' logical ids, and why any could not be
        added. Asking again with the same token adds nothing and answers the same."""
        if not 1 <= count <= ADD_LIMIT:
            raise ValueError(f"a group grows by 1 to {ADD_LIMIT} nodes at a time, not {count}")
        response = self._call(
            "batch_add_cluster_nodes",
            ClusterName=self.cluster_name,
            ClientToken=client_token,
            NodesToAdd=[{"InstanceGroupName": group, "IncrementTargetCountBy": count}],
        )
        added = [n["NodeLogicalId"] for n in response.get("Successful", [])]
        failed = [
            f"{f.get('ErrorCode')}: {f.get('FailedCount')} node(s) of {f.get('InstanceGroupName')}"
            f" not added{': ' + f['Message'] if f.get('Message') else ''}"
            for f in response.get("Failed", [])
        ]
        return added, failed

    def added_node(self, logical_id: str) -> AddedNode:
        try:
            response = self.client.describe_cluster_node(
                ClusterName=self.cluster_name, NodeLogicalId=logical_id
            )
        except ClientError as error:
            if error.response["Error"]["Code"] == "ResourceNotFound":
                return AddedNode(logical_id=logical_id, status=None)
            raise ClusterError(f"DescribeClusterNode {logical_id}: {error}") from error
        except BotoCoreError as error:
            raise ClusterError(f"DescribeClusterNode {logical_id}: {error}") from error
        details = response["NodeDetails"]
        status = details.get("InstanceStatus") or {}
        return AddedNode(
            logical_id=logical_id,
            status=NodeStatus(status.get("Status", NodeStatus.PENDING.value)),
            instance_id=details.get("InstanceId"),
            message=status.get("Message", ""),
        )

    def delete_nodes(self, logical_ids: list[str]) -> list[str]:
        """Delete nodes by logical id (a node already gone counts as deleted); the ids
        SageMaker refused, with why."""
        refused: list[str] = []
        for chunk in _chunks(list(dict.fromkeys(logical_ids)), DELETE_LIMIT):
            response = self._call(
                "batch_delete_cluster_nodes", ClusterName=self.cluster_name, NodeLogicalIds=chunk
            )
            refused.extend(
                f"{f.get('NodeLogicalId')}: {f.get('Code')} {f.get('Message', '')}".strip()
                for f in response.get("FailedNodeLogicalIds", [])
                if f.get("Code") != NODE_ID_NOT_FOUND
            )
        return refused

    def _call(self, operation: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response: dict[str, Any] = getattr(self.client, operation)(**kwargs)
        except (ClientError, BotoCoreError) as error:
            raise ClusterError(f"{operation} on {self.cluster_name}: {error}") from error
        return response

    def _batch(self, operation: str, instance_ids: list[str]) -> RepairOutcome:
        outcome = RepairOutcome()
        pending = list(dict.fromkeys(instance_ids))
        for attempt in range(self._max_attempts):
            if attempt:
                self._sleep(self._base_delay_s * 2 ** (attempt - 1))
            last_attempt = attempt == self._max_attempts - 1
            retry: list[str] = []
            for chunk in _chunks(pending, BATCH_LIMIT):
                successful, failed = self._batch_call(operation, chunk)
                outcome.successful.extend(successful)
                for failure in failed:
                    if failure.error_code in RETRYABLE_NODE_ERRORS and not last_attempt:
                        retry.append(failure.node_id)
                    else:
                        outcome.failed.append(failure)
            if not retry:
                break
            pending = retry
        return outcome

    def _batch_call(
        self, operation: str, node_ids: list[str]
    ) -> tuple[list[str], list[RepairFailure]]:
        """One Batch*ClusterNodes call. A call that fails as a whole fails each of its nodes,
        so nodes already repaired by earlier chunks are reported rather than repaired again
        by a caller retrying on an exception."""
        try:
            response = getattr(self.client, operation)(
                ClusterName=self.cluster_name, NodeIds=node_ids
            )
        except ClientError as error:
            code = error.response["Error"]["Code"]
            message = error.response["Error"].get("Message", "")
            return [], [
                RepairFailure(node_id=n, error_code=code, message=message) for n in node_ids
            ]
        except BotoCoreError as error:
            code = type(error).__name__
            return [], [
                RepairFailure(node_id=n, error_code=code, message=str(error)) for n in node_ids
            ]
        failed = [
            RepairFailure(
                node_id=item["NodeId"],
                error_code=item["ErrorCode"],
                message=item.get("Message", ""),
            )
            for item in response.get("Failed", [])
        ]
        return list(response.get("Successful", [])), failed

    def _to_node(self, details: dict[str, Any]) -> Node:
        """Map a ClusterNodeSummary or ClusterNodeDetails onto Node."""
        instance_type = details["InstanceType"]
        status = NodeStatus(details["InstanceStatus"]["Status"])
        kubernetes = details.get("KubernetesConfig") or {}
        taints = [
            {key.lower(): value for key, value in taint.items()}
            for taint in kubernetes.get("CurrentTaints", [])
        ]
        return Node(
            instance_id=details["InstanceId"],
            logical_id=details.get("NodeLogicalId"),
            cluster=self.cluster_name,
            pool=details["InstanceGroupName"],
            platform=PLATFORM,
            instance_type=instance_type,
            capacity_type=details.get("CapacityType", "OnDemand"),
            accelerators=accelerators_of(self.catalogue, instance_type),
            status=status,
            labels=dict(kubernetes.get("CurrentLabels", {})),
            taints=taints,
            launch_time=details.get("LaunchTime"),
            healthy=status is NodeStatus.RUNNING,
        )
