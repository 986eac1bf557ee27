"""The simulated Karpenter's consolidation follows the NodePool's `spec.disruption`, as
Karpenter's disruption controller does (karpenter.sh/docs/concepts/disruption; kubernetes-
sigs/karpenter pkg/controllers/disruption): an empty node goes once no pod event touched it
for consolidateAfter; under WhenEmptyOrUnderutilized so does one whose pods all fit on other
nodes; never a node or a pod annotated `karpenter.sh/do-not-disrupt: "true"` (a NodeClaim's
annotation reaches its node at registration), nor beyond the pool's budgets. Each test fails
against a twin that never consolidates or ignores one of those rules."""

from __future__ import annotations

from typing import Any

import pytest
from tests.unit.test_cluster_karpenter import P5, POOL, TIMINGS, USER, new_world
from tests.unit.test_cluster_karpenter import World as KarpenterWorld

from hyperguard.cluster.workloads import DO_NOT_DISRUPT_ANNOTATION
from hyperguard.models import NodeStatus
from hyperguard.twin.kube.store import NODECLAIMS, NODES, PODS

POLL_S = 10  # the disruption controller's polling period


class World(KarpenterWorld):
    """test_cluster_karpenter's world, with consolidation and client pods."""

    def consolidate(self, **disruption: Any) -> None:
        self.cluster.set_nodepool_disruption(POOL, disruption)

    def node_names(self) -> list[str]:
        return sorted(
            i.node_name
            for i in self.cluster.instances()
            if i.platform == "eks" and i.status is NodeStatus.RUNNING
        )

    def going(self) -> list[str]:
        """Nodes whose NodeClaim Karpenter is deleting."""
        return sorted(
            i.node_name
            for i in self.cluster.instances()
            if i.platform == "eks" and i.status is NodeStatus.SHUTTING_DOWN
        )

    def pod(self, name: str, node: str, *, gpus: int = 8, keep: bool = False) -> None:
        """A GPU pod a client creates on `node` (spec.nodeName set, so it could run
        elsewhere), tolerating the pool's taint."""
        requests = {"nvidia.com/gpu": str(gpus)}
        resources = {"requests": requests, "limits": requests}
        container = {"name": "main", "image": "x", "resources": resources}
        spec: dict[str, Any] = {
            "nodeName": node,
            "containers": [container],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        }
        meta: dict[str, Any] = {"name": name}
        if keep:
            meta["annotations"] = {DO_NOT_DISRUPT_ANNOTATION: "true"}
        self.store.create(PODS, {"metadata": meta, "spec": spec}, "default", user=USER)


@pytest.fixture
def world() -> World:
    return new_world(World)


def test_the_twins_pool_keeps_consolidation_off_until_an_admin_turns_it_on(world: World) -> None:
    world.cluster.add_burst_nodes(POOL, P5, 2)
    world.advance(24 * 3600)
    assert len(world.node_names()) == 2 and world.going() == []


def test_an_empty_node_goes_once_consolidate_after_has_passed(world: World) -> None:
    world.cluster.add_burst_nodes(POOL, P5, 1)
    (node,) = world.node_names()
    world.consolidate(consolidationPolicy="WhenEmpty", consolidateAfter="5m")
    world.advance(5 * 60 - POLL_S)
    assert world.node_names() == [node]
    world.advance(POLL_S)
    assert world.going() == [node]
    taints = world.store.get(NODES, node)["spec"]["taints"]
    assert {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"} in taints
    world.advance(TIMINGS.nodeclaim_termination_s)
    assert world.store.list(NODECLAIMS) == [] and world.store.find(NODES, node) is None


def test_consolidate_after_counts_from_the_last_pod_event(world: World) -> None:
    world.cluster.add_burst_nodes(POOL, P5, 1)
    (node,) = world.node_names()
    world.consolidate(consolidationPolicy="WhenEmpty", consolidateAfter="5m")
    world.pod("short", node)
    world.advance(4 * 60)
    world.store.delete(PODS, "short", "default", user=USER)
    world.advance(4 * 60)  # 8 minutes since the node came, 4 since its pod went
    assert world.node_names() == [node]
    world.advance(60 + POLL_S)
    assert world.going() == [node]


def test_do_not_disrupt_on_the_claim_reaches_the_node_and_keeps_it(world: World) -> None:
    world.consolidate(consolidationPolicy="WhenEmptyOrUnderutilized", consolidateAfter="0s")
    claim = {
        "metadata": {
            "name": "kept",
            "labels": {"karpenter.sh/nodepool": POOL},
            "annotations": {DO_NOT_DISRUPT_ANNOTATION: "true"},
        },
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "x"},
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [P5]},
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": [POOL]},
            ],
        },
    }
    world.store.create(NODECLAIMS, claim, user=USER)
    world.advance(TIMINGS.nodeclaim_launch_s + TIMINGS.nodeclaim_ready_s)
    (node,) = world.node_names()
    annotations = world.store.get(NODES, node)["metadata"]["annotations"]
    assert annotations[DO_NOT_DISRUPT_ANNOTATION] == "true"
    world.advance(3600)
    assert world.node_names() == [node] and world.going() == []


def test_empty_nodes_go_first_and_a_pod_that_may_not_be_disrupted_keeps_its_node(
    world: World,
) -> None:
    """Three nodes: one with a pod that could move, one with a pod that may not be disrupted,
    one empty. The empty node goes first; then no node is left to take the movable pod (the
    kept pod's node is full), and the kept pod's node is never a candidate."""
    world.cluster.add_burst_nodes(POOL, P5, 3)
    first, second, spare = world.node_names()
    world.pod("movable", first)
    world.pod("kept", second, keep=True)
    world.consolidate(consolidationPolicy="WhenEmptyOrUnderutilized", consolidateAfter="1m")
    world.advance(60 + POLL_S)
    assert world.going() == [spare]
    world.advance(TIMINGS.nodeclaim_termination_s + 3600)
    assert world.node_names() == [first, second] and world.going() == []


@pytest.mark.parametrize("policy", ["WhenEmptyOrUnderutilized", "WhenEmpty"])
def test_an_underutilized_node_goes_when_its_pods_fit_elsewhere(world: World, policy: str) -> None:
    """Two nodes half used: either's pod fits on the other. Under WhenEmptyOrUnderutilized
    one node goes (one at a time) and its pod is evicted; under WhenEmpty neither."""
    world.cluster.add_burst_nodes(POOL, P5, 2)
    first, second = world.node_names()
    world.pod("a", first, gpus=4)
    world.pod("b", second, gpus=4)
    world.consolidate(consolidationPolicy=policy, consolidateAfter="1m")
    world.advance(60 + POLL_S)
    if policy == "WhenEmpty":
        assert world.going() == []
        return
    assert world.going() == [first]
    world.advance(TIMINGS.nodeclaim_termination_s)
    assert world.store.find(PODS, "a", "default") is None  # evicted with its node
    world.advance(3600)
    assert world.node_names() == [second]  # its pod has nowhere else to go


def test_budgets_bound_how_many_nodes_go_at_once(world: World) -> None:
    world.cluster.add_burst_nodes(POOL, P5, 4)
    world.consolidate(
        consolidationPolicy="WhenEmpty",
        consolidateAfter="0s",
        budgets=[{"nodes": "50%"}, {"nodes": "0", "reasons": ["Underutilized"]}],
    )
    world.advance(POLL_S)
    assert len(world.going()) == 2  # 50 % of 4; the Underutilized budget does not apply
    world.advance(POLL_S)
    assert len(world.going()) == 2  # still terminating: no more
    world.advance(TIMINGS.nodeclaim_termination_s)
    world.advance(POLL_S)
    assert len(world.going()) == 1  # 50 % of the 2 left
