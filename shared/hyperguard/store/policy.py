"""The cluster's policies, one item each in TeamsTable (pk `POLICY`): the node repair policy
(sk `NODE_REPAIR`) and the burst policy (sk `BURST`); beside them, what the inventory last saw
of the cluster's other repairers (sk `REPAIRERS`, written by the inventory function alone).
A scheduling pass reads its settings together (`pass_settings`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from hyperguard.models.governance import SchedulerConfig
from hyperguard.policies.burst import BurstPolicy
from hyperguard.policies.repair import NodeRepairConfig
from hyperguard.policies.repairers import Repairers
from hyperguard.store.codec import TableStore, batch_get, plain, to_item
from hyperguard.store.teams import SCHEDULER_KEY, scheduler_config_of

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
        return self.of(plain(item) if item else None)

    @classmethod
    def of(cls, item: dict[str, Any] | None) -> M:
        """The policy of its (plain) item, read elsewhere; the defaults for none."""
        return cls.model.model_validate(item[cls.attribute]) if item else cls.model()

    def put(self, policy: M) -> None:
        self.table.put_item(Item={**self.key, self.attribute: to_item(policy)})


class RepairPolicyStore(PolicyStore[NodeRepairConfig]):
    model, key, attribute = NodeRepairConfig, KEY, "config"


class BurstPolicyStore(PolicyStore[BurstPolicy]):
    model, key, attribute = BurstPolicy, BURST_KEY, "policy"


class RepairersStore(PolicyStore[Repairers]):
    """None seen (every source unread) until the inventory's first sync."""

    model, key, attribute = Repairers, REPAIRERS_KEY, "observed"


def pass_settings(teams: TableStore) -> tuple[NodeRepairConfig, BurstPolicy, SchedulerConfig]:
    """The settings a scheduling pass reads from TeamsTable: the node repair policy, the burst
    policy and the scheduler policy (each its defaults where none is stored), in one
    BatchGetItem, strongly consistent like each store's own GetItem."""
    keys = [KEY, BURST_KEY, SCHEDULER_KEY]
    items = {(item["pk"], item["sk"]): item for item in batch_get(teams.table, keys)}
    repair, burst, scheduler = (items.get((key["pk"], key["sk"])) for key in keys)
    return (
        RepairPolicyStore.of(repair),
        BurstPolicyStore.of(burst),
        scheduler_config_of(scheduler)[0],
    )
