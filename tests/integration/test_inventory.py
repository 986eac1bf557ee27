"""The node inventory the service keeps itself: the sync and ingestion's look-up, against
the simulated cluster behind SageMaker and the Kubernetes API."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from botocore.exceptions import ClientError
from tests.conftest import Stack
from tests.integration.cluster_harness import ClusterApis, cluster_apis

from hyperguard.inventory import InventorySync, InventoryWriteError
from hyperguard.lookup import NodeLookup
from hyperguard.models import Node, NodeStatus
from hyperguard.store import NodeStore

CLUSTERS = frozenset({"hyperguard-twin", "hyperguard-eks"})


@pytest.fixture
def apis(stack: Stack) -> Iterator[ClusterApis]:
    with cluster_apis(hyperpod_nodes=3, burst_nodes=2) as running:
        yield running


def test_a_node_is_marked_released_only_if_stored_and_a_sync_keeps_the_mark(
    stack: Stack,
) -> None:
    nodes = NodeStore(stack.tables["NodesTable"])
    at = datetime(2026, 12, 1, 8, 30, tzinfo=UTC)
    assert nodes.mark_released("i-0aaaaaaaaaaaaaaaa", at) is False
    assert nodes.get("i-0aaaaaaaaaaaaaaaa") is None  # nothing created
    node = Node(
        instance_id="i-0bbbbbbbbbbbbbbbb",
        cluster="hyperguard-eks",
        pool="gpu-burst",
        platform="eks",
        instance_type="p5.48xlarge",
        accelerators=8,
    )
    nodes.upsert_inventory([node])
    assert nodes.mark_released(node.instance_id, at) is True
    nodes.upsert_inventory([node.model_copy(update={"status": NodeStatus.SHUTTING_DOWN})])
    stored = nodes.get(node.instance_id)
    assert stored is not None and stored.status is NodeStatus.SHUTTING_DOWN
    assert stored.released_at == at


def test_a_sync_writes_every_node_then_only_what_changed(stack: Stack, apis: ClusterApis) -> None:
    nodes = NodeStore(stack.tables["NodesTable"])
    sync = InventorySync(nodes, apis.gateway, CLUSTERS)
    first = sync.sync()
    assert (first.listed, first.written, first.retired) == (5, 5, 0)
    stored = {n.instance_id: n for n in nodes.all()}
    assert {i for i in stored if stored[i].platform == "hyperpod"} == set(apis.hyperpod)
    assert {i for i in stored if stored[i].platform == "eks"} == set(apis.burst)
    assert all(n.accelerators == 8 for n in stored.values())
    assert stored[apis.hyperpod[0]].logical_id  # HyperPod's slot id, for replacements
    assert sync.sync().written == 0  # nothing changed, nothing written
    apis.gateway.cordon(apis.hyperpod[1], incident_id="maintenance", reason="maintenance")
    again = sync.sync()
    cordoned = nodes.get(apis.hyperpod[1])
    assert again.written == 1 and cordoned is not None and not cordoned.schedulable


def test_a_replaced_node_is_retired_and_its_replacement_stored(
    stack: Stack, apis: ClusterApis
) -> None:
    nodes = NodeStore(stack.tables["NodesTable"])
    foreign = Node(
        instance_id="i-0fffffffffffffff0",
        cluster="another-cluster",
        pool="w",
        platform="hyperpod",
        instance_type="ml.p5.48xlarge",
    )
    nodes.upsert_inventory([foreign])
    sync = InventorySync(nodes, apis.gateway, CLUSTERS)
    sync.sync()
    old = apis.hyperpod[0]
    outcome = apis.gateway.replace([old])
    assert outcome.successful == [old]
    apis.advance(940)
    result = sync.sync()
    new = apis.cluster.replacement_of(old)
    assert result.retired == 1 and new is not None
    retired, replacement, theirs = nodes.get(old), nodes.get(new), nodes.get(foreign.instance_id)
    assert retired is not None and replacement is not None and theirs is not None
    assert retired.status is NodeStatus.NOT_FOUND
    assert replacement.logical_id == retired.logical_id
    assert theirs.status is NodeStatus.RUNNING  # not ours: untouched


def test_a_look_up_remembers_a_miss_for_its_window(stack: Stack, apis: ClusterApis) -> None:
    nodes = NodeStore(stack.tables["NodesTable"])
    asked: list[str] = []

    class Counting:
        def node_status(self, instance_id: str) -> Node:
            asked.append(instance_id)
            return apis.gateway.node_status(instance_id)

    now = [0.0]
    lookup = NodeLookup(nodes, Counting(), window_s=300, clock=lambda: now[0])  # type: ignore[arg-type]
    stranger = "i-0eeeeeeeeeeeeeee0"
    assert lookup.find(stranger) is None and lookup.find(stranger) is None
    assert asked == [stranger]
    now[0] = 301
    assert lookup.find(stranger) is None
    assert asked == [stranger, stranger]
    burst = lookup.find(apis.burst[0])  # in the cluster, not yet in the table
    assert burst is not None and burst.platform == "eks" and burst.cluster == "hyperguard-eks"
    assert nodes.get(apis.burst[0]) is not None


class RefusesOneNode(NodeStore):
    """DynamoDB refusing every write of one node's item (as it refuses an item over its
    size limit)."""

    refused = ""

    def upsert_inventory(self, nodes: list[Node]) -> int:
        if any(node.instance_id == self.refused for node in nodes):
            raise ClientError(
                {"Error": {"Code": "ValidationException", "Message": "Item size too large"}},
                "UpdateItem",
            )
        return super().upsert_inventory(nodes)


def test_a_node_dynamodb_refuses_holds_back_no_other_node_of_the_sync(
    stack: Stack, apis: ClusterApis
) -> None:
    """A replacement whose item DynamoDB refuses: the node replaced is still retired and
    every other change written; the sync fails, naming it, for SQS to deliver again."""
    nodes = RefusesOneNode(stack.tables["NodesTable"])
    sync = InventorySync(nodes, apis.gateway, CLUSTERS)
    sync.sync()
    old = apis.hyperpod[0]
    assert apis.gateway.replace([old]).successful == [old]
    apis.advance(940)
    new = apis.cluster.replacement_of(old)
    assert new is not None
    nodes.refused = new
    apis.gateway.cordon(apis.hyperpod[1], incident_id="maintenance", reason="maintenance")
    with pytest.raises(InventoryWriteError, match=new):
        sync.sync()
    cordoned, retired = nodes.get(apis.hyperpod[1]), nodes.get(old)
    assert cordoned is not None and not cordoned.schedulable
    assert retired is not None and retired.status is NodeStatus.NOT_FOUND
    assert nodes.get(new) is None
