"""NodeLookup.leaving: which nodes Karpenter is taking away (D206), from what the cluster says
and, once a node is gone, from what the inventory last saw; and which the scheduling pass gave
back itself (D208)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hyperguard.cluster import ClusterError, NodeNotFoundError
from hyperguard.lookup import NodeLookup
from hyperguard.models import Node, NodeStatus


class Cluster:
    """The one gateway call `leaving` makes, answering from `live` (absent: not found)."""

    def __init__(self, live: dict[str, NodeStatus], *, down: bool = False) -> None:
        self.live = live
        self.down = down

    def node_status(self, instance_id: str) -> Node:
        if self.down:
            raise ClusterError("the API server did not answer")
        if instance_id not in self.live:
            raise NodeNotFoundError(instance_id)
        return node(instance_id, "eks", self.live[instance_id])


def node(instance_id: str, platform: str, status: NodeStatus) -> Node:
    return Node(
        instance_id=instance_id,
        cluster="c",
        pool="p",
        platform=platform,
        instance_type="p5.48xlarge",
        status=status,
    )


@pytest.mark.parametrize(
    ("platform", "stored", "live", "leaving"),
    [
        ("eks", NodeStatus.RUNNING, NodeStatus.SHUTTING_DOWN, True),  # deleted since the sync
        ("eks", NodeStatus.SHUTTING_DOWN, NodeStatus.RUNNING, False),  # Karpenter changed its mind
        ("eks", NodeStatus.RUNNING, NodeStatus.FAILURE, False),  # a fault, nothing leaving
        ("eks", NodeStatus.SHUTTING_DOWN, None, True),  # gone, and the inventory saw it leave
        ("eks", NodeStatus.RUNNING, None, False),  # gone, how is not known: a fault to look at
        ("hyperpod", NodeStatus.SHUTTING_DOWN, NodeStatus.SHUTTING_DOWN, False),  # a replacement
    ],
)
def test_a_node_is_leaving_when_karpenter_takes_it_away(
    platform: str, stored: NodeStatus, live: NodeStatus | None, leaving: bool
) -> None:
    cluster = Cluster({} if live is None else {"i-1": live})
    lookup = NodeLookup(nodes=None, gateway=cluster)  # type: ignore[arg-type]  # not read
    assert lookup.leaving(node("i-1", platform, stored)) is leaving


@pytest.mark.parametrize("stored", [NodeStatus.RUNNING, NodeStatus.SHUTTING_DOWN])
def test_while_the_cluster_cannot_be_asked_the_inventory_answers(stored: NodeStatus) -> None:
    lookup = NodeLookup(nodes=None, gateway=Cluster({}, down=True))  # type: ignore[arg-type]
    assert lookup.leaving(node("i-1", "eks", stored)) is (stored is NodeStatus.SHUTTING_DOWN)


@pytest.mark.parametrize(
    ("platform", "live"),
    [
        ("eks", None),  # gone before anyone saw it leave
        ("eks", NodeStatus.RUNNING),  # its NodeClaim deleted, the Node not yet touched
        ("hyperpod", NodeStatus.SHUTTING_DOWN),  # deleted from its instance group
    ],
)
def test_a_node_the_pass_gave_back_is_leaving_whatever_the_cluster_says(
    platform: str, live: NodeStatus | None
) -> None:
    cluster = Cluster({} if live is None else {"i-1": live})
    lookup = NodeLookup(nodes=None, gateway=cluster)  # type: ignore[arg-type]  # not read
    released = node("i-1", platform, NodeStatus.RUNNING).model_copy(
        update={"released_at": datetime(2026, 12, 1, tzinfo=UTC)}
    )
    assert lookup.leaving(released) is True
    assert lookup.leaving(node("i-1", platform, NodeStatus.RUNNING)) is False
