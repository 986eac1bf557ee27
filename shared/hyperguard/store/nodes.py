"""NodesTable: one item per instance (pk `instance_id`); sparse GSIs `ByPool` (pk `in_pool`:
nodes present in a pool, kept by inventory) and `OpenByPool` (pk `open_pool`: nodes whose
open-incident lock is held, kept by IncidentStore with the lock)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from botocore.exceptions import ClientError

from hyperguard.aws import AWS_ERRORS
from hyperguard.models import Node, NodeStatus, utcnow
from hyperguard.models.cluster import BurstClaim
from hyperguard.models.nodes import PLANNED_REPAIR
from hyperguard.observability import logger
from hyperguard.store.codec import (
    TableStore,
    batch_get,
    condition_failed,
    count_all,
    plain,
    query_all,
    scan_all,
    to_item,
)

BY_POOL = "ByPool"
OPEN_BY_POOL = "OpenByPool"


def mark_given_back(nodes: NodeStore | None, claim: BurstClaim, at: datetime) -> None:
    """The node the service gave back (scale-in, a burst's rollback or its move to the next
    capacity type) is leaving, not failing: its kubelet stopping and its instance terminating
    open no incident (D208). Called only once the release was made, so that a node kept by a
    failed release still has its faults repaired; a mark that fails is logged and leaves
    ingestion to ask the cluster (D206)."""
    if nodes is None or claim.instance_id is None:
        return
    try:
        nodes.mark_released(claim.instance_id, at)
    except AWS_ERRORS as error:
        logger.warning(
            "released node not marked",
            extra={"instance_id": claim.instance_id, "error": str(error)},
        )


@dataclass(frozen=True)
class OpenNode:
    instance_id: str
    incident_id: str


class NodeStore(TableStore):
    def get(self, instance_id: str) -> Node | None:
        item = self.table.get_item(Key={"instance_id": instance_id}, ConsistentRead=True).get(
            "Item"
        )
        return Node.model_validate(plain(item)) if item else None

    def many(self, instance_ids: list[str]) -> list[Node]:
        """These nodes (those the inventory has), read strongly consistent in batches."""
        keys = [{"instance_id": i} for i in dict.fromkeys(instance_ids)]
        return [Node.model_validate(item) for item in batch_get(self.table, keys)]

    # Attributes HyperGuard owns; an inventory sync never overwrites them.
    OWN_FIELDS = (
        "open_incident_id",
        "veto",
        "repairs",
        "last_closed_at",
        "retired_at",
        "released_at",
    )

    def upsert_inventory(self, nodes: list[Node]) -> int:
        """Write what the cluster reports, keeping HyperGuard's own attributes."""
        for node in nodes:
            fields = to_item(node)
            fields.pop("instance_id")
            for own in self.OWN_FIELDS:
                fields.pop(own, None)
            if node.status is not NodeStatus.NOT_FOUND:
                fields["in_pool"] = node.pool
            names = {f"#{k}": k for k in fields}
            values = {f":{k}": v for k, v in fields.items()}
            expression = "SET " + ", ".join(f"#{k} = :{k}" for k in fields)
            if "in_pool" not in fields:
                expression += " REMOVE in_pool"
            self.table.update_item(
                Key={"instance_id": node.instance_id},
                UpdateExpression=expression,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        return len(nodes)

    def mark_health(self, instance_id: str, *, healthy: bool) -> None:
        self.table.update_item(
            Key={"instance_id": instance_id},
            UpdateExpression="SET healthy = :h",
            ConditionExpression="attribute_exists(instance_id)",
            ExpressionAttributeValues={":h": healthy},
        )

    def mark_released(self, instance_id: str, at: datetime) -> bool:
        """The scheduling pass gave the node back (D208): what it reports from now on is its
        departure. False when the inventory does not hold the node (nothing to mark)."""
        try:
            self.table.update_item(
                Key={"instance_id": instance_id},
                UpdateExpression="SET released_at = :at",
                ConditionExpression="attribute_exists(instance_id)",
                ExpressionAttributeValues={":at": at.isoformat()},
            )
        except ClientError as exc:
            if condition_failed(exc):
                return False
            raise
        return True

    def set_veto(self, instance_id: str, reason: str | None) -> None:
        """An operator veto makes every repair of the node wait for approval."""
        expression = "SET veto = :v" if reason else "REMOVE veto"
        self.table.update_item(
            Key={"instance_id": instance_id},
            UpdateExpression=expression,
            ConditionExpression="attribute_exists(instance_id)",
            **({"ExpressionAttributeValues": {":v": reason}} if reason else {}),
        )

    def record_repair(
        self, instance_id: str, at: str, action: str, *, planned: bool = False
    ) -> None:
        """A repair asked for; `planned` when it answered an announced change (a scheduled
        reboot), not a fault: the repair ladder does not count it."""
        repair = {"at": at, "action": action}
        if planned:
            repair["cause"] = PLANNED_REPAIR
        self.table.update_item(
            Key={"instance_id": instance_id},
            UpdateExpression="SET repairs = list_append(if_not_exists(repairs, :none), :r)",
            ExpressionAttributeValues={":r": [repair], ":none": []},
        )

    def retire(self, instance_id: str, at: datetime | None = None) -> None:
        """A replaced instance: kept for its history, no longer part of any pool. `at`
        (default now) is when it left: the cluster view counts its GPUs installed until
        then."""
        self.table.update_item(
            Key={"instance_id": instance_id},
            UpdateExpression="SET #s = :gone, schedulable = :f, healthy = :f, retired_at = :at "
            "REMOVE in_pool",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={
                ":gone": "NotFound",
                ":f": False,
                ":at": (at or utcnow()).isoformat(),
            },
        )

    def pool_size(self, pool: str) -> int:
        """Nodes present in the pool: one COUNT query, however big the table."""
        return count_all(
            self.table,
            IndexName=BY_POOL,
            KeyConditionExpression="in_pool = :p",
            ExpressionAttributeValues={":p": pool},
        )

    def open_in_pool(self, pool: str) -> list[OpenNode]:
        """The pool's nodes with an open incident (eventually consistent, as any index)."""
        items = query_all(
            self.table,
            IndexName=OPEN_BY_POOL,
            KeyConditionExpression="open_pool = :p",
            ExpressionAttributeValues={":p": pool},
        )
        return [OpenNode(i["instance_id"], i["open_incident_id"]) for i in items]

    def in_pool(self, pool: str) -> list[Node]:
        """The pool's present nodes, read strongly consistent."""
        keys = query_all(
            self.table,
            IndexName=BY_POOL,
            KeyConditionExpression="in_pool = :p",
            ExpressionAttributeValues={":p": pool},
        )
        items = batch_get(
            self.table,
            [{"instance_id": k["instance_id"]} for k in keys],
        )
        return sorted((Node.model_validate(i) for i in items), key=lambda n: n.instance_id)

    def all(self) -> list[Node]:
        return sorted(
            (Node.model_validate(i) for i in scan_all(self.table)), key=lambda n: n.instance_id
        )
