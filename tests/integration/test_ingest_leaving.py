"""Fault reports from an EKS node Karpenter is taking away (D206): its kubelet stops and its
instance terminates because it is leaving, and ingestion opens no incident for that. Moto
tables, and the upstream control plane with Karpenter behind the service's adapters."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.conftest import Stack
from tests.deadlines import loaded
from tests.integration.cluster_harness import cluster_apis
from tests.integration.test_ingest_urgency import World

from hyperguard.cluster import NodeNotFoundError
from hyperguard.ingestion import Outcome
from hyperguard.inventory import InventorySync
from hyperguard.models import HealthSignal, NodeStatus, Repair, Severity, SignalSource
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
