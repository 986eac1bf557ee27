"""NodesTable: one item per instance (pk `instance_id`)."""

from __future__ import annotations

from hyperguard.models import Node
from hyperguard.store.codec import TableStore, plain, scan_all, to_item


class NodeStore(TableStore):
    def get(self, instance_id: str) -> Node | None:
        item = self.table.get_item(Key={"instance_id": instance_id}, ConsistentRead=True).get(
            "Item"
        )
        return Node.model_validate(plain(item)) if item else None

    # Attributes HyperGuard owns; an inventory sync never overwrites them.
    OWN_FIELDS = ("open_incident_id", "veto", "repairs", "last_closed_at")

    def upsert_inventory(self, nodes: list[Node]) -> int:
        """Write what the cluster reports, keeping HyperGuard's own attributes."""
        for node in nodes:
            fields = to_item(node)
            fields.pop("instance_id")
            for own in self.OWN_FIELDS:
                fields.pop(own, None)
            names = {f"#{k}": k for k in fields}
            values = {f":{k}": v for k, v in fields.items()}
            self.table.update_item(
                Key={"instance_id": node.instance_id},
                UpdateExpression="SET " + ", ".join(f"#{k} = :{k}" for k in fields),
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

    def set_veto(self, instance_id: str, reason: str | None) -> None:
        """An operator veto makes every repair of the node wait for approval."""
        expression = "SET veto = :v" if reason else "REMOVE veto"
        self.table.update_item(
            Key={"instance_id": instance_id},
            UpdateExpression=expression,
            ConditionExpression="attribute_exists(instance_id)",
            **({"ExpressionAttributeValues": {":v": reason}} if reason else {}),
        )

    def record_repair(self, instance_id: str, at: str, action: str) -> None:
        self.table.update_item(
            Key={"instance_id": instance_id},
            UpdateExpression="SET repairs = list_append(if_not_exists(repairs, :none), :r)",
            ExpressionAttributeValues={":r": [{"at": at, "action": action}], ":none": []},
        )

    def retire(self, instance_id: str) -> None:
        """A replaced instance: kept for its history, no longer part of any pool."""
        self.table.update_item(
            Key={"instance_id": instance_id},
            UpdateExpression="SET #s = :gone, schedulable = :f, healthy = :f",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={":gone": "NotFound", ":f": False},
        )

    def all(self) -> list[Node]:
        return sorted(
            (Node.model_validate(i) for i in scan_all(self.table)), key=lambda n: n.instance_id
        )
