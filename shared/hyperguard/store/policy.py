"""The node repair policy, one item in TeamsTable (pk `POLICY`, sk `NODE_REPAIR`)."""

from __future__ import annotations

from typing import Any

from hyperguard.aws import dynamodb_table
from hyperguard.recovery.policy import NodeRepairConfig
from hyperguard.store.codec import plain

KEY = {"pk": "POLICY", "sk": "NODE_REPAIR"}


class RepairPolicyStore:
    def __init__(self, table_name: str, table: Any | None = None) -> None:
        self.table_name = table_name
        self._table = table

    @property
    def table(self) -> Any:
        if self._table is None:
            self._table = dynamodb_table(self.table_name)
        return self._table

    def get(self) -> NodeRepairConfig:
        """The stored policy, or the documented defaults when none is stored."""
        item = self.table.get_item(Key=KEY, ConsistentRead=True).get("Item")
        return (
            NodeRepairConfig.model_validate(plain(item["config"])) if item else NodeRepairConfig()
        )

    def put(self, config: NodeRepairConfig) -> None:
        self.table.put_item(
            Item={**KEY, "config": config.model_dump(mode="json", exclude_none=True)}
        )
