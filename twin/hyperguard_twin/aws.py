"""What the emulator lacks of the AWS APIs the service calls, with the simulated cluster behind:

- SageMaker HyperPod: DescribeCluster, ListClusterNodes (paging, IncludeNodeLogicalIds),
  DescribeClusterNode (by NodeId or NodeLogicalId), BatchRebootClusterNodes and
  BatchReplaceClusterNodes (1-25 ids, per-node `Failed` errors), StartClusterHealthCheck,
  BatchAddClusterNodes (1-5 entries of 1-50 nodes, idempotent by ClientToken) and
  BatchDeleteClusterNodes (1-3000 NodeIds and/or 1-99 NodeLogicalIds), ListClusterEvents
  (filters, sort, paging; Continuous node provisioning only, as documented) — moto knows
  clusters only as static records and has none of the node operations;
- EKS: DescribeCluster answers with the twin's Kubernetes API server (endpoint and CA);
- EKS: CreateNodegroup keeps its `nodeRepairConfig` (moto takes it only on
  UpdateNodegroupConfig), which DescribeNodegroup then answers;
- EC2: RebootInstances of the burst nodes' instances reaches the cluster;
- EventBridge: moto never fires a rule's schedule, and delivers every event put on the bus
  to a rule without an event pattern, schedule rules included. The twin stops the latter
  and runs the schedules itself (`ScheduleRunner`).

Requests are validated as the botocore model says (lengths, patterns, enums) before the
cluster is asked, with the error codes SageMaker uses.
"""

from __future__ import annotations

import contextvars
import re
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from hyperguard_twin.cluster import SimulatedCluster

NODE_ID = re.compile(r"^i-[a-f0-9]{8}(?:[a-f0-9]{9})?$")
NODE_LOGICAL_ID = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9\-]*[a-zA-Z0-9]$")
INSTANCE_GROUP_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9])*$")
CLIENT_TOKEN = re.compile(r"^[\x21-\x7E]{1,64}$")
DEEP_HEALTH_CHECKS = frozenset(
    {"InstanceStress", "InstanceConnectivity", "MultiNodeTrainingValidation"}
)
BATCH_LIMIT = 25
ADD_ENTRIES_LIMIT = 5
ADD_COUNT_LIMIT = 50
DELETE_IDS_LIMIT = 3000
DELETE_LOGICAL_IDS_LIMIT = 99
PAGE_LIMIT = 100
_RATE = re.compile(r"^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$")
_UNIT_S = {"minute": 60, "hour": 3600, "day": 86400}

_cluster: SimulatedCluster | None = None
_delivering_schedule: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "delivering_schedule", default=False
)
_patched = False


def attach(cluster: SimulatedCluster | None) -> None:
    """Put `cluster` behind the emulator's SageMaker and EC2 APIs (None: detach)."""
    global _cluster
    _cluster = cluster
    _patch()


def _ours(name_or_arn: str | None) -> SimulatedCluster | None:
    cluster = _cluster
    if cluster is None or not name_or_arn:
        return None
    if name_or_arn in (cluster.hyperpod_cluster, cluster.cluster_arn):
        return cluster
    return None


def _patch() -> None:
    global _patched
    if _patched:
        return
    _patched = True
    _patch_sagemaker()
    _patch_eks()
    _patch_ec2()
    _patch_schedule_matching()


def _patch_sagemaker() -> None:  # noqa: C901 (one closure per operation; each simple)
    from moto.core.responses import ActionResult
    from moto.sagemaker.exceptions import ResourceNotFound, ValidationError
    from moto.sagemaker.responses import SageMakerResponse

    def cluster_or_raise(self: Any) -> SimulatedCluster:
        name = self._get_param("ClusterName")
        cluster = _ours(name)
        if cluster is None:
            raise ResourceNotFound(f"Cluster {name} not found.")
        return cluster

    def wraps(name: str) -> Callable[[Callable[..., Any]], None]:
        original = getattr(SageMakerResponse, name)

        def install(ours: Callable[[Any, SimulatedCluster], Any]) -> None:
            def method(self: Any) -> Any:
                cluster = _ours(self._get_param("ClusterName"))
                return original(self) if cluster is None else ours(self, cluster)

            method.__name__ = name
            setattr(SageMakerResponse, name, method)

        return install

    @wraps("describe_cluster")
    def describe_cluster(self: Any, cluster: SimulatedCluster) -> Any:
        return ActionResult(cluster.api.describe_cluster())

    @wraps("list_cluster_nodes")
    def list_cluster_nodes(self: Any, cluster: SimulatedCluster) -> Any:
        max_results = self._get_param("MaxResults") or PAGE_LIMIT
        if not 1 <= int(max_results) <= PAGE_LIMIT:
            raise ValidationError(f"MaxResults must be between 1 and {PAGE_LIMIT}.")
        nodes = cluster.api.cluster_nodes(
            include_logical_ids=bool(self._get_param("IncludeNodeLogicalIds"))
        )
        group = self._get_param("InstanceGroupNameContains")
        if group:
            nodes = [n for n in nodes if group in n["InstanceGroupName"]]
        if self._get_param("SortOrder") == "Descending":
            nodes.reverse()
        token = self._get_param("NextToken")
        try:
            start = int(token) if token else 0
        except ValueError:
            raise ValidationError("Invalid pagination token.") from None
        page = nodes[start : start + int(max_results)]
        result: dict[str, Any] = {"ClusterNodeSummaries": page}
        if start + int(max_results) < len(nodes):
            result["NextToken"] = str(start + int(max_results))
        return ActionResult(result)

    @wraps("describe_cluster_node")
    def describe_cluster_node(self: Any, cluster: SimulatedCluster) -> Any:
        node_id = self._get_param("NodeId") or self._get_param("NodeLogicalId")
        if not node_id:
            raise ValidationError("Either NodeId or NodeLogicalId must be provided.")
        details = cluster.api.describe_node(node_id)
        if details is None:
            raise ResourceNotFound(
                f"Node {node_id} not found in cluster {cluster.hyperpod_cluster}."
            )
        return ActionResult({"NodeDetails": details})

    def batch(action: str) -> Callable[[Any], Any]:
        def method(self: Any) -> Any:
            cluster = cluster_or_raise(self)
            node_ids = self._get_param("NodeIds") or []
            if not 1 <= len(node_ids) <= BATCH_LIMIT:
                raise ValidationError(f"NodeIds must hold between 1 and {BATCH_LIMIT} ids.")
            bad = [n for n in node_ids if not NODE_ID.match(str(n))]
            if bad:
                raise ValidationError(f"Invalid NodeIds {bad}: must match {NODE_ID.pattern}")
            return ActionResult(cluster.api.batch_repair(action, list(node_ids)))  # type: ignore[arg-type]

        method.__name__ = f"batch_{action}_cluster_nodes"
        return method

    SageMakerResponse.batch_reboot_cluster_nodes = batch("reboot")  # type: ignore[attr-defined]
    SageMakerResponse.batch_replace_cluster_nodes = batch("replace")  # type: ignore[attr-defined]

    def start_cluster_health_check(self: Any) -> Any:
        cluster = cluster_or_raise(self)
        configs = self._get_param("DeepHealthCheckConfigurations") or []
        if not 1 <= len(configs) <= 99:
            raise ValidationError("DeepHealthCheckConfigurations must hold 1 to 99 entries.")
        groups: dict[str, list[str]] = {}
        for node in cluster.api.cluster_nodes(include_logical_ids=False):
            groups.setdefault(node["InstanceGroupName"], []).append(node["InstanceId"])
        chosen: list[str] = []
        for config in configs:
            checks = set(config.get("DeepHealthChecks") or [])
            if not checks or not checks <= DEEP_HEALTH_CHECKS:
                raise ValidationError(
                    f"DeepHealthChecks must be among {sorted(DEEP_HEALTH_CHECKS)}."
                )
            group = config.get("InstanceGroupName")
            if group not in groups:
                raise ResourceNotFound(f"Instance group {group} not found.")
            wanted = config.get("InstanceIds") or groups[group]
            chosen.extend(i for i in wanted if i in groups[group])
        cluster.api.start_health_check(chosen)
        return ActionResult({"ClusterArn": cluster.cluster_arn})

    SageMakerResponse.start_cluster_health_check = start_cluster_health_check  # type: ignore[attr-defined]

    def batch_add_cluster_nodes(self: Any) -> Any:
        cluster = cluster_or_raise(self)
        if not cluster.api.continuous_provisioning:
            # HyperPod adds nodes on request only in Continuous node provisioning mode.
            raise ValidationError(
                f"Cluster {cluster.hyperpod_cluster} does not use Continuous node provisioning."
            )
        entries = self._get_param("NodesToAdd") or []
        if not 1 <= len(entries) <= ADD_ENTRIES_LIMIT:
            raise ValidationError(f"NodesToAdd must hold 1 to {ADD_ENTRIES_LIMIT} entries.")
        for entry in entries:
            group = str(entry.get("InstanceGroupName") or "")
            if len(group) > 63 or not INSTANCE_GROUP_NAME.match(group):
                raise ValidationError(
                    f"Invalid InstanceGroupName {group!r}: must match {INSTANCE_GROUP_NAME.pattern}"
                )
            count = entry.get("IncrementTargetCountBy")
            if not isinstance(count, int) or not 1 <= count <= ADD_COUNT_LIMIT:
                raise ValidationError(
                    f"IncrementTargetCountBy must be between 1 and {ADD_COUNT_LIMIT}."
                )
        token = self._get_param("ClientToken")
        if token is not None and not CLIENT_TOKEN.match(str(token)):
            raise ValidationError(f"Invalid ClientToken: must match {CLIENT_TOKEN.pattern}")
        return ActionResult(cluster.api.add_cluster_nodes(list(entries), token))

    def batch_delete_cluster_nodes(self: Any) -> Any:
        cluster = cluster_or_raise(self)
        node_ids = self._get_param("NodeIds")
        logical_ids = self._get_param("NodeLogicalIds")
        if node_ids is None and logical_ids is None:
            raise ValidationError("Either NodeIds or NodeLogicalIds must be provided.")
        _check_ids("NodeIds", node_ids, DELETE_IDS_LIMIT, NODE_ID, 256)
        _check_ids("NodeLogicalIds", logical_ids, DELETE_LOGICAL_IDS_LIMIT, NODE_LOGICAL_ID, 128)
        return ActionResult(cluster.api.delete_cluster_nodes(node_ids or [], logical_ids or []))

    def _check_ids(
        name: str, ids: list[Any] | None, limit: int, pattern: re.Pattern[str], longest: int
    ) -> None:
        """A list of ids, if given, holds 1 to `limit` of them, each matching `pattern` and
        at most `longest` characters long."""
        if ids is None:
            return
        if not 1 <= len(ids) <= limit:
            raise ValidationError(f"{name} must hold between 1 and {limit} ids.")
        bad = [i for i in ids if not pattern.match(str(i)) or len(str(i)) > longest]
        if bad:
            raise ValidationError(f"Invalid {name} {bad}: must match {pattern.pattern}")

    def list_cluster_events(self: Any) -> Any:
        cluster = cluster_or_raise(self)
        if not cluster.api.continuous_provisioning:
            # "only supported when the NodeProvisioningMode is set to Continuous"
            raise ValidationError(
                f"Cluster {cluster.hyperpod_cluster} does not use Continuous node provisioning."
            )
        max_results = self._get_param("MaxResults") or PAGE_LIMIT
        if not 1 <= int(max_results) <= PAGE_LIMIT:
            raise ValidationError(f"MaxResults must be between 1 and {PAGE_LIMIT}.")
        node_id = self._get_param("NodeId")
        if node_id is not None and not NODE_ID.match(str(node_id)):
            raise ValidationError(f"Invalid NodeId {node_id!r}: must match {NODE_ID.pattern}")
        order = self._get_param("SortOrder") or "Descending"
        kind = self._get_param("ResourceType")
        if order not in ("Ascending", "Descending") or kind not in (
            None,
            "Cluster",
            "InstanceGroup",
            "Instance",
        ):
            raise ValidationError("SortOrder or ResourceType is not one of its enum values.")
        after, before = (
            _epoch(self._get_param("EventTimeAfter")),
            _epoch(self._get_param("EventTimeBefore")),
        )
        group = self._get_param("InstanceGroupName")
        events = [
            e
            for e in cluster.api.cluster_events()
            if (node_id is None or e.get("InstanceId") == node_id)
            and (group is None or e.get("InstanceGroupName") == group)
            and (kind is None or e["ResourceType"] == kind)
            and (after is None or e["EventTime"].timestamp() > after)
            and (before is None or e["EventTime"].timestamp() < before)
        ]
        events.sort(key=lambda e: e["EventTime"], reverse=order == "Descending")
        start = int(self._get_param("NextToken") or 0)
        page = events[start : start + int(max_results)]
        result: dict[str, Any] = {"Events": page}
        if start + int(max_results) < len(events):
            result["NextToken"] = str(start + int(max_results))
        return ActionResult(result)

    SageMakerResponse.list_cluster_events = list_cluster_events  # type: ignore[attr-defined]
    SageMakerResponse.batch_add_cluster_nodes = batch_add_cluster_nodes  # type: ignore[attr-defined]
    SageMakerResponse.batch_delete_cluster_nodes = batch_delete_cluster_nodes  # type: ignore[attr-defined]


def _epoch(value: Any) -> float | None:
    """A request's timestamp as epoch seconds (moto hands them parsed or as sent)."""
    if value is None:
        return None
    return value.timestamp() if isinstance(value, datetime) else float(value)


def _patch_eks() -> None:
    from moto.eks.models import eks_backends
    from moto.eks.responses import EKSResponse

    original = EKSResponse.create_nodegroup

    def create_nodegroup(self: Any) -> Any:
        result = original(self)
        repair = self._get_param("nodeRepairConfig")
        if repair is not None:
            backend = eks_backends[self.current_account][self.region]
            group = backend.clusters[self._get_param("name")].nodegroups[
                self._get_param("nodegroupName")
            ]
            group.node_repair_config = repair
        return result

    EKSResponse.create_nodegroup = create_nodegroup  # type: ignore[method-assign]


def _patch_ec2() -> None:
    """Karpenter's launches (RunInstances of instances tagged with a NodeClaim) find EC2
    capacity or fail with InsufficientInstanceCapacity, then boot in the simulated cloud;
    terminations and reboots of its instances reach it too."""
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.models.instances import InstanceBackend

    from hyperguard_twin.cloud.ec2 import NODECLAIM_TAG, InsufficientCapacityError

    run_original = InstanceBackend.run_instances
    terminate_original = InstanceBackend.terminate_instances
    reboot_original = InstanceBackend.reboot_instances

    def run_instances(
        self: Any,
        image_id: str,
        count: int,
        user_data: Any,
        security_group_names: Any,
        **kwargs: Any,
    ) -> Any:
        cluster = _cluster
        tags = (kwargs.get("tags") or {}).get("instance", {})
        if cluster is None or NODECLAIM_TAG not in tags:
            return run_original(self, image_id, count, user_data, security_group_names, **kwargs)
        spot = bool(kwargs.get("instance_market_options"))
        instance_type = kwargs.get("instance_type") or "m1.small"
        try:
            cluster.api.ec2_launch_check(instance_type, "spot" if spot else "on-demand", count)
        except InsufficientCapacityError as error:
            raise EC2ClientError("InsufficientInstanceCapacity", str(error)) from error
        reservation = run_original(self, image_id, count, user_data, security_group_names, **kwargs)
        for instance in reservation.instances:
            cluster.api.ec2_launched(
                instance.id,
                instance_type=instance_type,
                capacity_type="spot" if spot else "on-demand",
                node_name=instance.private_dns_name,
                tags=dict(tags),
            )
        return reservation

    def terminate_instances(self: Any, instance_ids: list[str]) -> Any:
        terminated = terminate_original(self, instance_ids)
        if _cluster is not None:
            _cluster.api.ec2_terminated([instance.id for instance, _ in terminated])
        return terminated

    def reboot_instances(self: Any, instance_ids: list[str]) -> list[Any]:
        cluster = _cluster
        if cluster is None:
            return reboot_original(self, instance_ids)
        theirs = cluster.api.reboot_instances([i for i in instance_ids if cluster.api.owns(i)])
        rest = [i for i in instance_ids if not cluster.api.owns(i)] + theirs
        return reboot_original(self, rest) if rest else []

    InstanceBackend.run_instances = run_instances  # type: ignore[method-assign]
    InstanceBackend.terminate_instances = terminate_instances  # type: ignore[method-assign]
    InstanceBackend.reboot_instances = reboot_instances  # type: ignore[method-assign]


def _patch_schedule_matching() -> None:
    from moto.events.models import Rule

    original = Rule.send_to_targets

    def send_to_targets(self: Any, original_event: Any, transform_input: bool = True) -> None:
        # A schedule rule has no event pattern; EventBridge never matches bus events to it.
        if self.scheduled_expression and not _delivering_schedule.get():
            return
        original(self, original_event, transform_input)

    Rule.send_to_targets = send_to_targets  # type: ignore[method-assign]


def point_eks_cluster(name: str, endpoint: str, ca_data: str, account: str, region: str) -> None:
    """The emulator's EKS cluster `name` answers DescribeCluster with the twin's API server."""
    from moto.eks.models import eks_backends

    cluster = eks_backends[account][region].clusters[name]
    cluster.endpoint = endpoint
    cluster.certificate_authority = {"data": ca_data}


def schedule_period_s(expression: str) -> float | None:
    """Seconds between firings of a `rate(...)` expression; None for anything else."""
    match = _RATE.match(expression)
    if match is None:
        return None
    return int(match.group(1)) * _UNIT_S[match.group(2).removesuffix("s")]


class ScheduleRunner:
    """Fires the emulator's schedule rules, as EventBridge does: a "Scheduled Event" to each
    target, every period. `speed` runs them faster, with the simulated cluster's clock (a
    rate(1 minute) rule fires every second at speed 60). The first firing is at start."""

    def __init__(self, account: str, region: str, speed: float = 1.0) -> None:
        self.account = account
        self.region = region
        self.speed = speed
        self.fired: dict[str, int] = {}
        self.errors = 0
        self.unsupported: set[str] = set()
        self._next: dict[str, float] = {}

    def fire_due(self, now: float | None = None) -> int:
        from moto.events.models import events_backends

        now = time.monotonic() if now is None else now
        fired = 0
        backend = events_backends[self.account][self.region]
        for bus in list(backend.event_buses.values()):
            for rule in list(bus.rules.values()):
                expression = rule.scheduled_expression
                if not expression or rule.state != "ENABLED":
                    continue
                period = schedule_period_s(expression)
                if period is None:
                    self.unsupported.add(f"{rule.name}: {expression}")
                    continue
                if self._next.get(rule.arn, now) > now:
                    continue
                self._deliver(rule)
                self._next[rule.arn] = now + period / self.speed
                self.fired[rule.name] = self.fired.get(rule.name, 0) + 1
                fired += 1
        return fired

    def _deliver(self, rule: Any) -> None:
        now = datetime.now(UTC).timestamp()
        event = {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": "Scheduled Event",
            "source": "aws.events",
            "account": self.account,
            "time": now,
            "region": self.region,
            "resources": [rule.arn],
            "detail": {},
            "ingestion-time": now,  # moto's event template reads it
        }
        token = _delivering_schedule.set(True)
        try:
            rule.send_to_targets(event)
        finally:
            _delivering_schedule.reset(token)

    def run(self, stop: threading.Event, tick_s: float = 0.1) -> None:
        while not stop.wait(tick_s):
            try:
                self.fire_due()
            except Exception:  # a bad delivery must not stop the schedules; counted
                self.errors += 1
