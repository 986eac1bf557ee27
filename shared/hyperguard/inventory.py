"""The node inventory (NodesTable), kept by the service itself from what the clusters report.

Two paths fill it, as they do on AWS:
- `InventorySync.sync` — the inventory function's pass (on a schedule, and on HyperPod
  cluster events): every node SageMaker and the EKS API server report is written where it
  changed, and a node of these clusters that neither reports any more is retired (kept, with
  status NotFound, for its history);
- `hyperguard.lookup.NodeLookup.find` — ingestion's look-up of an instance it does not know
  yet (a module of its own: ingestion's role may make none of the sync's calls).

Each sync also records what the cluster shows of its other repairers (HyperPod's node
recovery, Karpenter's node repair, EKS node auto-repair, the Node Termination Handler:
hyperguard.recovery.repairers), which recovery reads to decide who repairs a fault (D148).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from hyperguard.aws import ClientError
from hyperguard.cluster import ClusterGateway
from hyperguard.models import Node, NodeStatus
from hyperguard.observability import NAMESPACE, MetricUnit, logger, single_metric
from hyperguard.policies.repairers import Repairers
from hyperguard.store import NodeStore
from hyperguard.store.codec import to_item
from hyperguard.store.policy import RepairersStore


def reported(node: Node) -> dict[str, Any]:
    """The fields of a node that the cluster reports (not HyperGuard's own)."""
    item = to_item(node)
    for own in (*NodeStore.OWN_FIELDS, "instance_id"):
        item.pop(own, None)
    return item


class InventoryWriteError(RuntimeError):
    """A sync wrote every node but these: it fails, for SQS to deliver its message again."""


@dataclass(frozen=True)
class SyncResult:
    listed: int
    written: int
    retired: int


@dataclass
class InventorySync:
    nodes: NodeStore
    gateway: ClusterGateway
    clusters: frozenset[str]
    """The clusters whose nodes this sync owns: a stored node of another cluster is left
    alone."""
    repairers: RepairersStore | None = None
    """Where the cluster's other repairers are recorded (None: not observed)."""

    def sync(self) -> SyncResult:
        listed = self.gateway.list_nodes()
        stored = {n.instance_id: n for n in self.nodes.all()}
        changed = [
            node
            for node in listed
            if node.instance_id not in stored
            or reported(stored[node.instance_id]) != reported(node)
        ]
        present = {n.instance_id for n in listed}
        gone = [
            n.instance_id
            for n in stored.values()
            if n.cluster in self.clusters
            and n.status is not NodeStatus.NOT_FOUND
            and n.instance_id not in present
        ]
        # Each node written apart: one DynamoDB refuses holds back none of the others.
        writes: list[tuple[str, Callable[[], object]]] = [
            (n.instance_id, partial(self.nodes.upsert_inventory, [n])) for n in changed
        ]
        writes += [(instance_id, partial(self.nodes.retire, instance_id)) for instance_id in gone]
        if self.repairers is not None:
            seen = self.gateway.repairers()  # a source it cannot read is named, not raised
            _repairer_metrics(seen)
            writes.append(("repairers", partial(self.repairers.put, seen)))
        refused = [instance_id for instance_id, write in writes if not _written(instance_id, write)]
        if refused:
            raise InventoryWriteError(f"DynamoDB refused the writes of {', '.join(refused)}")
        return SyncResult(listed=len(listed), written=len(changed), retired=len(gone))


def _repairer_metrics(seen: Repairers) -> None:
    """`OtherRepairerActive` per source: 1 where another system repairs (or drains) nodes
    beside HyperGuard, 0 where none does, nothing where it could not be read (the dashboard's
    "who repairs" widget)."""
    for source, on in seen.active().items():
        if source in seen.unread:
            continue
        with single_metric(
            name="OtherRepairerActive", unit=MetricUnit.Count, value=int(on), namespace=NAMESPACE
        ) as metric:
            metric.add_dimension(name="source", value=source)


def _written(instance_id: str, write: Callable[[], object]) -> bool:
    """Whether DynamoDB took the node's write (a refusal is logged)."""
    try:
        write()
    except ClientError as error:
        logger.error(
            "inventory write refused", extra={"instance_id": instance_id, "error": str(error)}
        )
        return False
    return True
