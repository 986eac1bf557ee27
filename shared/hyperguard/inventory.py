"""The node inventory (NodesTable), kept by the service itself from what the clusters report.

Two paths fill it, as they do on AWS:
- `InventorySync.sync` — the inventory function's pass (on a schedule, and on HyperPod
  cluster events): every node SageMaker and the EKS API server report is written where it
  changed, and a node of these clusters that neither reports any more is retired (kept, with
  status NotFound, for its history);
- `NodeLookup.find` — ingestion's look-up of an instance it does not know yet: the cluster
  is asked before an event is called foreign, so an event for a node added since the last
  sync is not lost. Misses are remembered for a window, so a storm of events for instances
  that are not ours costs one cluster call per instance and window.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from botocore.exceptions import ClientError

from hyperguard.cluster import ClusterGateway, NodeNotFoundError
from hyperguard.models import Node, NodeStatus
from hyperguard.observability import logger
from hyperguard.store import NodeStore
from hyperguard.store.codec import to_item

FOREIGN_WINDOW_S = 300.0


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
        refused = [instance_id for instance_id, write in writes if not _written(instance_id, write)]
        if refused:
            raise InventoryWriteError(f"DynamoDB refused node(s) {', '.join(refused)}")
        return SyncResult(listed=len(listed), written=len(changed), retired=len(gone))


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


@dataclass
class NodeLookup:
    nodes: NodeStore
    gateway: ClusterGateway
    window_s: float = FOREIGN_WINDOW_S
    clock: Callable[[], float] = time.monotonic
    _misses: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def find(self, instance_id: str) -> Node | None:
        """The stored node; else, the cluster's, stored now; None if neither has it."""
        node = self.nodes.get(instance_id)
        if node is not None:
            return node
        now = self.clock()
        with self._lock:
            missed_at = self._misses.get(instance_id)
            if missed_at is not None and now - missed_at < self.window_s:
                return None
        try:
            live = self.gateway.node_status(instance_id)
        except NodeNotFoundError:
            with self._lock:
                self._misses[instance_id] = now
                self._forget_old(now)
            return None
        self.nodes.upsert_inventory([live])
        return self.nodes.get(instance_id)

    def healthy_now(self, instance_id: str) -> bool:
        """What the cluster says this moment: Running and without a known problem."""
        try:
            node = self.gateway.node_status(instance_id)
        except NodeNotFoundError:
            return False
        return node.status is NodeStatus.RUNNING and node.healthy

    def _forget_old(self, now: float) -> None:
        stale = [i for i, at in self._misses.items() if now - at >= self.window_s]
        for instance_id in stale:
            del self._misses[instance_id]
