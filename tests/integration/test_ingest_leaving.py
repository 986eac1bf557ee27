"""Fault reports from an EKS node Karpenter is taking away (D206), or one the scheduling pass
gave back (D208): its kubelet stops and its instance terminates because it is leaving, and
ingestion opens no incident for that. Moto tables, and the upstream control plane with
Karpenter behind the service's adapters."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from tests.conftest import Stack
from tests.deadlines import loaded
from tests.integration.cluster_harness import cluster_apis
from tests.integration.scheduler_harness import MakeSolo
from tests.integration.test_burst_policy import BURSTS, ready_burst_nodes
from tests.integration.test_ingest_urgency import World

from hyperguard.cluster import ClusterError, NodeNotFoundError
from hyperguard.cluster.hyperpod_eks import HyperPodEksGateway
from hyperguard.cluster.karpenter import IDLE_SINCE_ANNOTATION, idle_mark
from hyperguard.ingestion import Outcome
from hyperguard.inventory import InventorySync
from hyperguard.messaging import Workflows
from hyperguard.models import HealthSignal, NodeStatus, Repair, Severity, SignalSource
from hyperguard.models.cluster import BurstClaim
from hyperguard_twin.plane.kube import JSON_PATCH, NODES, wait_for

HOLD = "hyperguard.test/hold"
"""A finalizer of the test's: the deleted Node stays, Terminating, until the test lets go."""


@pytest.fixture
def world(stack: Stack) -> Iterator[World]:
    with cluster_apis(hyperpod_nodes=2, burst_nodes=2) as apis:
        yield World(stack, apis)


REPORTS = {
    # What the forwarder reports of a node whose kubelet stopped.
    "node_down": (
        Severity.DEGRADED,
        SignalSource.KUBERNETES,
        "node_condition",
        "Ready=False (KubeletNotReady)",
    ),
    # What an EC2 state-change notification of `terminated` becomes.
    "instance_gone": (
        Severity.FATAL,
        SignalSource.EC2,
        "instance_state_change",
        "EC2 instance is terminated",
    ),
}


def report(world: World, instance_id: str, what: str) -> HealthSignal:
    severity, source, kind, reason = REPORTS[what]
    return world.signal(
        instance_id,
        severity,
        source=source,
        kind=kind,
        repair=Repair.REPLACE,
        cluster=None,
        reason=reason,
    )


def test_a_burst_node_being_deleted_opens_no_incident_and_its_neighbour_still_does(
    world: World,
) -> None:
    leaving, staying = world.apis.burst[:2]
    name = world.apis.gateway.node_status(leaving).node_name
    assert name is not None
    kube = world.apis.kube
    kube.patch(
        NODES,
        name,
        [{"op": "add", "path": "/metadata/finalizers/-", "value": HOLD}],
        content_type=JSON_PATCH,
    )
    try:
        # Deleting the Node is how Karpenter's own termination starts (a NodeClaim deleted
        # by scale-in deletes its Node): it taints, drains and terminates the instance.
        assert kube.delete(NODES, name)
        wait_for(
            lambda: world.apis.gateway.node_status(leaving).status is NodeStatus.SHUTTING_DOWN,
            loaded(30),
            "the node to be leaving",
        )
        assert world.ingestor._apply(report(world, leaving, "node_down")) is Outcome.LEAVING
        assert world.ingestor._apply(report(world, leaving, "instance_gone")) is Outcome.LEAVING
        assert world.incidents.open_incident_for(leaving) is None
        # The same report from a burst node that is not leaving is a fault to repair.
        assert world.ingestor._apply(report(world, staying, "node_down")) is Outcome.OPENED
        assert world.incidents.open_incident_for(staying) is not None
        # The inventory saw it leave; the instance's last notice comes once the Node is gone.
        InventorySync(world.nodes, world.apis.gateway, frozenset({"hyperguard-twin"})).sync()
        stored = world.nodes.get(leaving)
        assert stored is not None and stored.status is NodeStatus.SHUTTING_DOWN
    finally:
        finalizers = (kube.get(NODES, name) or {}).get("metadata", {}).get("finalizers") or []
        if HOLD in finalizers:
            kube.patch(
                NODES, name, {"metadata": {"finalizers": [f for f in finalizers if f != HOLD]}}
            )
    wait_for(lambda: kube.get(NODES, name) is None, loaded(30), "the node to be gone")
    assert world.ingestor._apply(report(world, leaving, "instance_gone")) is Outcome.LEAVING
    assert world.incidents.open_incident_for(leaving) is None


def test_a_report_from_a_leaving_node_joins_the_incident_already_open_on_it(
    world: World,
) -> None:
    node = world.apis.burst[0]
    assert world.ingestor._apply(report(world, node, "node_down")) is Outcome.OPENED
    name = world.apis.gateway.node_status(node).node_name
    assert name is not None
    # Recovery's replace of a burst node deletes its NodeClaim: the node leaves because of
    # the incident, and what it reports on the way joins that incident.
    world.apis.gateway.replace([node])
    wait_for(
        lambda: node_leaving_or_gone(world, node),
        loaded(30),
        "the node to be leaving",
    )
    assert world.ingestor._apply(report(world, node, "instance_gone")) is Outcome.MERGED


def node_leaving_or_gone(world: World, instance_id: str) -> bool:
    try:
        return world.apis.gateway.node_status(instance_id).status is NodeStatus.SHUTTING_DOWN
    except NodeNotFoundError:
        return True


class RefusesReleases(HyperPodEksGateway):
    def release_burst_node(self, claim: BurstClaim) -> bool:
        raise ClusterError(f"delete NodeClaim {claim.name}: 500 etcdserver: leader changed")


def test_a_node_the_pass_gave_back_opens_no_incident_though_it_went_unseen(
    solo: MakeSolo,
) -> None:
    """Scale-in deletes an idle node's NodeClaim, and a KWOK node with nothing on it is gone
    within a second, before any sync or report sees it leave: only the pass's own mark says
    that its kubelet's last report is its departure, not a fault (D208)."""
    team = solo(64, hyperpod_nodes=1, borrow=0, api_on_cluster_clock=True)
    apis = team.apis
    [claim] = ready_burst_nodes(apis, "hg-burst-a")
    assert claim.instance_id and claim.node_name
    world = World(team.stack, apis)  # the inventory synced: the node Running
    an_hour_ago = idle_mark(apis.clock.now() - timedelta(hours=1))
    assert apis.gateway.kubernetes.annotate_nodeclaim(
        claim.name, {IDLE_SINCE_ANNOTATION: an_hour_ago}
    )
    # A release the API server refuses leaves the node in service, unmarked: its faults
    # are still repaired.
    refusing = team.scheduler(team.gateway(RefusesReleases), nodes=world.nodes)
    refusing.bursts = Workflows(BURSTS)
    assert refusing.run_pass().released == []
    kept = world.nodes.get(claim.instance_id)
    assert kept is not None and kept.released_at is None
    service = team.scheduler(nodes=world.nodes)
    service.bursts = Workflows(BURSTS)

    assert service.run_pass().released == [claim.name]
    stored = world.nodes.get(claim.instance_id)
    assert stored is not None and stored.status is NodeStatus.RUNNING
    assert stored.released_at == apis.clock.now()
    wait_for(
        lambda: apis.kube.get(NODES, str(claim.node_name)) is None,
        loaded(60),
        "Karpenter to take the node away",
    )
    assert world.ingestor._apply(report(world, claim.instance_id, "node_down")) is Outcome.LEAVING
    assert world.incidents.open_incident_for(claim.instance_id) is None
    # The inventory's next sync finds the instance gone and keeps the pass's mark.
    InventorySync(world.nodes, apis.gateway, frozenset({"hyperguard-twin"})).sync()
    stored = world.nodes.get(claim.instance_id)
    assert stored is not None and stored.released_at == apis.clock.now()
