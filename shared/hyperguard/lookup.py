"""Ingestion's look-up of an instance the inventory (NodesTable) does not know yet: the
cluster is asked before an event is called foreign, so an event for a node added since the
last sync is not lost. Misses are remembered for a window, so a storm of events for instances
that are not ours costs one cluster call per instance and window. The inventory function's
sync is `hyperguard.inventory`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from hyperguard.cluster import ClusterError, ClusterGateway, NodeNotFoundError
from hyperguard.models import Node, NodeStatus
from hyperguard.store import NodeStore

FOREIGN_WINDOW_S = 300.0


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

    def leaving(self, node: Node) -> bool:
        """Whether `node` is an EKS node Karpenter is taking away (its Node being deleted, or
        tainted `karpenter.sh/disrupted`: scale-in, consolidation, expiry, drift), as the
        cluster says this moment; once the node is gone, or while the cluster cannot be
        asked, as the inventory last saw it. A HyperPod node shutting down is HyperPod
        replacing it: a repair, not a departure. A node the scheduling pass gave back
        (`released_at`, either platform) is leaving whatever the cluster says: it may be gone
        before anyone saw it go (D208)."""
        if node.released_at is not None:
            return True
        if node.platform != "eks":
            return False
        try:
            live = self.gateway.node_status(node.instance_id)
        except ClusterError:  # NodeNotFoundError among them
            return node.status is NodeStatus.SHUTTING_DOWN
        return live.status is NodeStatus.SHUTTING_DOWN

    def _forget_old(self, now: float) -> None:
        stale = [i for i, at in self._misses.items() if now - at >= self.window_s]
        for instance_id in stale:
            del self._misses[instance_id]
