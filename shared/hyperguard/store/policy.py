"""The cluster's policies, one item each in TeamsTable (pk `POLICY`): the node repair policy
(sk `NODE_REPAIR`) and the burst policy (sk `BURST`); beside them, what the inventory last saw
of the cluster's other repairers (sk `REPAIRERS`, written by the inventory function alone)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from hyperguard.policies.burst import BurstPolicy
from hyperguard.policies.repair import NodeRepairConfig
from hyperguard.policies.repairers import Repairers
from hyperguard.store.codec import TableStore, plain, to_item

KEY = {"pk": "POLICY", "sk": "NODE_REPAIR"}
BURST_KEY = {"pk": "POLICY", "sk": "BURST"}
REPAIRERS_KEY = {"pk": "POLICY", "sk": "REPAIRERS"}


class PolicyStore[M: BaseModel](TableStore):
    """One policy item: `model` stored under `attribute` at `key`."""

    model: type[M]
    key: dict[str, str]
    attribute: str

    def get(self) -> M:
        """The stored policy, or the documented defaults when none is stored."""
        item: dict[str, Any] | None = self.table.get_item(Key=self.key, ConsistentRead=True).get(
            "Item"
        )
        return self.model.model_validate(plain(item[self.attribute])) if item else self.model()

    def put(self, policy: M) -> None:
        self.table.put_item(Item={**self.key, self.attribute: to_item(policy)})


class RepairPolicyStore(PolicyStore[NodeRepairConfig]):
    model, key, attribute = NodeRepairConfig, KEY, "config"


class BurstPolicyStore(PolicyStore[BurstPolicy]):
    model, key, attribute = BurstPolicy, BURST_KEY, "policy"


class RepairersStore(PolicyStore[Repairers]):
    """None seen (every source unread) until the inventory's first sync."""

    model, key, attribute = Repairers, REPAIRERS_KEY, "observed"
