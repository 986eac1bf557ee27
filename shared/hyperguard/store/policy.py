"""The node repair policy, one item in TeamsTable (pk `POLICY`, sk `NODE_REPAIR`)."""

from __future__ import annotations

from hyperguard.recovery.policy import NodeRepairConfig
from hyperguard.store.codec import TableStore, plain, to_item

KEY = {"pk": "POLICY", "sk": "NODE_REPAIR"}


class RepairPolicyStore(TableStore):
    def get(self) -> NodeRepairConfig:
        """The stored policy, or the documented defaults when none is stored."""
        item = self.table.get_item(Key=KEY, ConsistentRead=True).get("Item")
        return (
            NodeRepairConfig.model_validate(plain(item["config"])) if item else NodeRepairConfig()
        )

    def put(self, config: NodeRepairConfig) -> None:
        self.table.put_item(Item={**KEY, "config": to_item(config)})
