"""The cluster's policies, one item each in TeamsTable (pk `POLICY`): the node repair policy
(sk `NODE_REPAIR`) and the burst policy (sk `BURST`)."""

from __future__ import annotations

from hyperguard.governance.burst_policy import BurstPolicy
from hyperguard.recovery.policy import NodeRepairConfig
from hyperguard.store.codec import TableStore, plain, to_item

KEY = {"pk": "POLICY", "sk": "NODE_REPAIR"}
BURST_KEY = {"pk": "POLICY", "sk": "BURST"}


class RepairPolicyStore(TableStore):
    def get(self) -> NodeRepairConfig:
        """The stored policy, or the documented defaults when none is stored."""
        item = self.table.get_item(Key=KEY, ConsistentRead=True).get("Item")
        return (
            NodeRepairConfig.model_validate(plain(item["config"])) if item else NodeRepairConfig()
        )

    def put(self, config: NodeRepairConfig) -> None:
        self.table.put_item(Item={**KEY, "config": to_item(config)})


class BurstPolicyStore(TableStore):
    def get(self) -> BurstPolicy:
        """The stored burst policy, or the documented defaults when none is stored."""
        item = self.table.get_item(Key=BURST_KEY, ConsistentRead=True).get("Item")
        return BurstPolicy.model_validate(plain(item["policy"])) if item else BurstPolicy()

    def put(self, policy: BurstPolicy) -> None:
        self.table.put_item(Item={**BURST_KEY, "policy": to_item(policy)})
