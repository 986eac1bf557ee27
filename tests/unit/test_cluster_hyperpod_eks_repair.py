"""The HyperPod-on-EKS gateway with EKS burst nodes: who repairs which node, and how burst
nodes appear in the inventory.

SageMaker is botocore's Stubber (moto does not implement BatchReboot/ReplaceClusterNodes),
the API server is the in-memory fake of test_cluster_kubernetes, EC2 is moto.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from tests.conftest import catalogue
from tests.unit.test_cluster_ec2 import Recorded, moto_ec2
from tests.unit.test_cluster_kubernetes import (
    BURST_CLAIM,
    BURST_INSTANCE,
    BURST_NODE,
    INSTANCE,
    NODE,
    NODECLAIMS,
    OTHER_INSTANCE,
    OTHER_NODE,
    FakeApiServer,
    SageMaker,
    burst_node_json,
    lightkube_client,
    node_json,
    nodeclaim_json,
    summary,
)

from hyperguard.cluster import ClusterError, NodeNotFoundError
from hyperguard.cluster.ec2 import Ec2Adapter
from hyperguard.cluster.hyperpod import HyperPodAdapter
from hyperguard.cluster.hyperpod_eks import HyperPodEksGateway
from hyperguard.cluster.karpenter import LOGICAL_ID_ANNOTATION
from hyperguard.cluster.kubernetes import KubernetesAdapter
from hyperguard.models import NodeStatus
from hyperguard.models.nodes import BURST_LABEL

CATALOGUE = catalogue()

REGION = "us-west-2"
CLUSTER = "ml-cluster"
UNKNOWN = "i-0000000000000dead"
SYSTEM_INSTANCE = "i-0d0d0d0d0d0d0d0d0"
SYSTEM_NODE = "ip-10-0-1-5.us-west-2.compute.internal"

Ec2Instance = tuple[Any, str, Recorded]
"""A moto EC2 client, its one running instance, and its RebootInstances calls."""
NodeChange = Callable[[dict[str, Any]], None]


def system_node() -> dict[str, Any]:
    """A managed node group node: neither HyperPod's nor Karpenter's."""
    node = node_json(SYSTEM_NODE, SYSTEM_INSTANCE)
    node["metadata"]["labels"] = {
        "kubernetes.io/hostname": SYSTEM_NODE,
        "node.kubernetes.io/instance-type": "m5.xlarge",
        "eks.amazonaws.com/nodegroup": "system",
    }
    return node


def all_ready(node: dict[str, Any]) -> dict[str, Any]:
    for condition in node["status"]["conditions"]:
        condition["status"] = "True"
    return node


@pytest.fixture
def api() -> FakeApiServer:
    server = FakeApiServer()
    server.add_node(node_json(NODE, INSTANCE))
    server.add_node(node_json(OTHER_NODE, OTHER_INSTANCE))
    server.add_node(all_ready(burst_node_json(BURST_NODE, BURST_INSTANCE)))
    server.add_nodeclaim(nodeclaim_json(BURST_INSTANCE, BURST_NODE))
    server.add_node(system_node())
    return server


@pytest.fixture
def ec2() -> Iterator[Ec2Instance]:
    """A moto EC2 with one running instance, and a record of RebootInstances calls."""
    with moto_ec2(1) as (client, (instance_id,), calls):
        yield client, instance_id, calls


@pytest.fixture
def sagemaker() -> Iterator[SageMaker]:
    client = boto3.client(
        "sagemaker", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x"
    )
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


@pytest.fixture
def gateway(sagemaker: SageMaker, api: FakeApiServer, ec2: Ec2Instance) -> HyperPodEksGateway:
    return HyperPodEksGateway(
        HyperPodAdapter(CLUSTER, catalogue=CATALOGUE, client=sagemaker[0], max_attempts=1),
        KubernetesAdapter("gpu-eks", client=lightkube_client(api)),
        ec2=Ec2Adapter(client=ec2[0]),
    )


def hyperpod_inventory(stubber: Stubber, *instance_ids: str) -> None:
    stubber.add_response(
        "list_cluster_nodes",
        {"ClusterNodeSummaries": [summary(i) for i in instance_ids]},
        {"ClusterName": CLUSTER, "MaxResults": 100, "IncludeNodeLogicalIds": True},
    )


# repairs go to whoever owns the node


def test_a_mixed_replace_splits_by_owner_and_merges_the_outcomes(
    gateway: HyperPodEksGateway, sagemaker: SageMaker, api: FakeApiServer, ec2: Ec2Instance
) -> None:
    _, stubber = sagemaker
    hyperpod_inventory(stubber, INSTANCE, OTHER_INSTANCE)
    stubber.add_response(
        "batch_replace_cluster_nodes",
        {"Successful": [INSTANCE, OTHER_INSTANCE]},
        {"ClusterName": CLUSTER, "NodeIds": [INSTANCE, OTHER_INSTANCE]},
    )

    outcome = gateway.replace([INSTANCE, BURST_INSTANCE, UNKNOWN, OTHER_INSTANCE])

    assert outcome.successful == [INSTANCE, OTHER_INSTANCE, BURST_INSTANCE]
    assert [(f.node_id, f.error_code) for f in outcome.failed] == [(UNKNOWN, "InstanceIdNotFound")]
    assert [(r.method, r.path) for r in api.requests][:3] == [
        ("GET", "/api/v1/nodes"),
        ("GET", NODECLAIMS),
        ("DELETE", f"{NODECLAIMS}/{BURST_CLAIM}"),
    ]
    # Then an Event on each node whose replacement was accepted (D93).
    events = [r for r in api.requests[3:] if r.method == "POST"]
    assert [r.path for r in events] == ["/api/v1/namespaces/default/events"] * 3
    assert api.nodeclaims[BURST_CLAIM]["metadata"]["deletionTimestamp"]
    assert ec2[2] == []


def test_a_mixed_reboot_reboots_burst_nodes_through_ec2(
    gateway: HyperPodEksGateway, sagemaker: SageMaker, api: FakeApiServer, ec2: Ec2Instance
) -> None:
    _, stubber = sagemaker
    _, burst_instance, reboots = ec2
    api.add_node(
        all_ready(burst_node_json("ip-10-0-12-99.us-west-2.compute.internal", burst_instance))
    )
    hyperpod_inventory(stubber, INSTANCE, OTHER_INSTANCE)
    stubber.add_response(
        "batch_reboot_cluster_nodes",
        # the model gives Successful a minimum length of 1: an all-failed batch omits it
        {
            "Successful": [OTHER_INSTANCE],
            "Failed": [
                {"NodeId": INSTANCE, "ErrorCode": "InstanceIdInUse", "Message": "replacing"}
            ],
        },
        {"ClusterName": CLUSTER, "NodeIds": [OTHER_INSTANCE, INSTANCE]},
    )

    outcome = gateway.reboot([OTHER_INSTANCE, UNKNOWN, burst_instance, INSTANCE])

    assert outcome.successful == [OTHER_INSTANCE, burst_instance]
    assert [(f.node_id, f.error_code) for f in outcome.failed] == [
        (INSTANCE, "InstanceIdInUse"),
        (UNKNOWN, "InstanceIdNotFound"),
    ]
    assert reboots == [{"InstanceIds": [burst_instance]}]
    assert api.calls("DELETE") == []


def test_a_burst_node_whose_instance_is_gone_fails_its_reboot(
    gateway: HyperPodEksGateway, sagemaker: SageMaker, ec2: Ec2Instance
) -> None:
    _, stubber = sagemaker
    hyperpod_inventory(stubber, INSTANCE)

    outcome = gateway.reboot([BURST_INSTANCE])

    assert outcome.successful == []
    assert [(f.node_id, f.error_code) for f in outcome.failed] == [
        (BURST_INSTANCE, "InstanceIdNotFound")
    ]
    assert ec2[2] == [{"InstanceIds": [BURST_INSTANCE]}]


def test_replacing_a_burst_node_again_succeeds_without_deleting_again(
    gateway: HyperPodEksGateway, sagemaker: SageMaker, api: FakeApiServer
) -> None:
    _, stubber = sagemaker
    hyperpod_inventory(stubber, INSTANCE)
    hyperpod_inventory(stubber, INSTANCE)

    first = gateway.replace([BURST_INSTANCE])
    second = gateway.replace([BURST_INSTANCE])

    assert first.successful == second.successful == [BURST_INSTANCE]
    assert first.failed == second.failed == []
    assert len(api.calls("DELETE")) == 1


def test_a_failed_nodeclaim_delete_fails_that_node_and_keeps_sagemakers_result(
    gateway: HyperPodEksGateway, sagemaker: SageMaker, api: FakeApiServer
) -> None:
    _, stubber = sagemaker
    hyperpod_inventory(stubber, INSTANCE)
    stubber.add_response(
        "batch_replace_cluster_nodes",
        {"Successful": [INSTANCE]},
        {"ClusterName": CLUSTER, "NodeIds": [INSTANCE]},
    )
    api.errors[("DELETE", f"{NODECLAIMS}/{BURST_CLAIM}")] = 500

    outcome = gateway.replace([INSTANCE, BURST_INSTANCE])

    assert outcome.successful == [INSTANCE]
    (failure,) = outcome.failed
    assert (failure.node_id, failure.error_code) == (BURST_INSTANCE, "ClusterError")
    assert BURST_CLAIM in failure.message


def test_a_node_neither_hyperpod_nor_karpenter_owns_is_not_repaired(
    gateway: HyperPodEksGateway, sagemaker: SageMaker, api: FakeApiServer, ec2: Ec2Instance
) -> None:
    _, stubber = sagemaker
    hyperpod_inventory(stubber, INSTANCE)
    hyperpod_inventory(stubber, INSTANCE)

    for repair in (gateway.replace, gateway.reboot):
        outcome = repair([SYSTEM_INSTANCE])
        assert outcome.successful == []
        assert [(f.node_id, f.error_code) for f in outcome.failed] == [
            (SYSTEM_INSTANCE, "InstanceIdNotFound")
        ]
    assert api.calls("DELETE") == []
    assert ec2[2] == []


def test_the_ec2_adapter_is_created_only_for_a_burst_reboot(
    sagemaker: SageMaker, api: FakeApiServer, ec2: Ec2Instance, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, burst_instance, reboots = ec2
    api.add_node(
        all_ready(burst_node_json("ip-10-0-12-99.us-west-2.compute.internal", burst_instance))
    )
    created: list[Any] = []

    def factory(service: str) -> Any:
        created.append(client)
        return client

    monkeypatch.setattr("hyperguard.cluster.ec2.client", factory)
    gateway = HyperPodEksGateway(
        HyperPodAdapter(CLUSTER, catalogue=CATALOGUE, client=sagemaker[0]),
        KubernetesAdapter("gpu-eks", client=lightkube_client(api)),
    )
    _, stubber = sagemaker
    hyperpod_inventory(stubber, INSTANCE)
    hyperpod_inventory(stubber, INSTANCE)

    assert gateway.replace([BURST_INSTANCE]).successful == [BURST_INSTANCE]
    assert created == []
    assert gateway.reboot([burst_instance]).successful == [burst_instance]
    assert created == [client]
    assert reboots == [{"InstanceIds": [burst_instance]}]


# burst nodes in the inventory


def test_list_nodes_adds_karpenter_nodes_to_hyperpods(
    gateway: HyperPodEksGateway, sagemaker: SageMaker, api: FakeApiServer
) -> None:
    _, stubber = sagemaker
    # HyperPod's own Karpenter-based autoscaling labels its nodes too: SageMaker's
    # inventory still decides that the node is HyperPod's.
    api.nodes[NODE]["metadata"]["labels"]["karpenter.sh/nodepool"] = "hyperpod-autoscaling"
    on_demand = burst_node_json(
        "ip-10-0-13-7.us-west-2.compute.internal",
        "i-0e0e0e0e0e0e0e0e0",
        nodepool="gpu-burst-od",
        capacity_type="on-demand",
    )
    on_demand["metadata"]["labels"]["node.kubernetes.io/instance-type"] = "trn1.32xlarge"
    api.add_node(on_demand)
    hyperpod_inventory(stubber, INSTANCE, OTHER_INSTANCE)

    nodes = {n.instance_id: n for n in gateway.list_nodes()}

    assert sorted(nodes) == sorted(
        [INSTANCE, OTHER_INSTANCE, BURST_INSTANCE, "i-0e0e0e0e0e0e0e0e0"]
    )
    assert nodes[INSTANCE].platform == "hyperpod" and nodes[INSTANCE].pool == "gpu-workers"
    burst = nodes[BURST_INSTANCE]
    assert (burst.platform, burst.cluster, burst.pool) == ("eks", "gpu-eks", "gpu-burst")
    assert (burst.instance_type, burst.capacity_type, burst.accelerators) == (
        "p5.48xlarge",
        "Spot",
        8,
    )
    assert burst.node_name == BURST_NODE
    assert burst.status is NodeStatus.RUNNING and burst.healthy and burst.schedulable
    assert burst.launch_time is not None
    trn = nodes["i-0e0e0e0e0e0e0e0e0"]
    assert (trn.pool, trn.capacity_type, trn.accelerators) == ("gpu-burst-od", "OnDemand", 16)
    # node_json's AcceleratedHardwareReady=False (XID 79): Running, but not healthy
    assert trn.status is NodeStatus.RUNNING and not trn.healthy


def test_a_pass_reads_the_nodes_and_the_claims_with_one_listing_of_each(
    gateway: HyperPodEksGateway, sagemaker: SageMaker, api: FakeApiServer
) -> None:
    """`nodes_and_claims` answers what `list_nodes` and `burst_claims` answer apart, from one
    listing of the Nodes and one of the NodeClaims (apart, each is listed twice)."""
    _, stubber = sagemaker
    # HyperGuard's claim of a burst whose node is leaving (its claim is being deleted), a
    # claim of the same burst still launching, and a HyperPod node a burst added.
    api.nodeclaims[BURST_CLAIM]["metadata"]["labels"][BURST_LABEL] = "burst-1"
    api.nodeclaims[BURST_CLAIM]["metadata"]["deletionTimestamp"] = "2025-01-01T02:00:00Z"
    launching = nodeclaim_json("i-0c0c0c0c0c0c0c0c0", None)
    launching["metadata"]["labels"][BURST_LABEL] = "burst-1"
    api.add_nodeclaim(launching)
    added = api.nodes[OTHER_NODE]["metadata"]
    added["labels"][BURST_LABEL] = "burst-2"
    added.setdefault("annotations", {})[LOGICAL_ID_ANNOTATION] = "i-logical-2"
    hyperpod_inventory(stubber, INSTANCE, OTHER_INSTANCE)
    apart = (gateway.list_nodes(), gateway.burst_claims())
    assert len(api.calls("GET")) == 4  # the Nodes and the NodeClaims, twice each
    api.requests.clear()
    hyperpod_inventory(stubber, INSTANCE, OTHER_INSTANCE)

    together = gateway.nodes_and_claims()

    assert sorted(r.path for r in api.calls("GET")) == ["/api/v1/nodes", NODECLAIMS]
    assert together == apart
    nodes, claims = together
    assert {n.instance_id: n.status for n in nodes}[BURST_INSTANCE] is NodeStatus.SHUTTING_DOWN
    assert isinstance(claims, list)
    assert sorted((c.platform, c.burst_id, c.deleting) for c in claims) == [
        ("eks", "burst-1", False),
        ("eks", "burst-1", True),
        ("hyperpod", "burst-2", False),
    ]


def test_unreadable_claims_leave_the_nodes_unless_karpenter_has_nodes(
    gateway: HyperPodEksGateway, sagemaker: SageMaker, api: FakeApiServer
) -> None:
    """A NodeClaim listing that fails is handed back in place of the claims while no node is
    Karpenter's; with a Karpenter node, whose state needs its claim, it fails the read."""
    _, stubber = sagemaker
    api.errors[("GET", NODECLAIMS)] = 500

    with pytest.raises(ClusterError):  # before SageMaker is asked anything
        gateway.nodes_and_claims()

    del api.nodes[BURST_NODE]
    hyperpod_inventory(stubber, INSTANCE, OTHER_INSTANCE)
    nodes, claims = gateway.nodes_and_claims()
    assert isinstance(claims, ClusterError)
    assert {n.instance_id for n in nodes} == {INSTANCE, OTHER_INSTANCE}


def set_condition(node: dict[str, Any], kind: str, value: str) -> None:
    for condition in node["status"]["conditions"]:
        if condition["type"] == kind:
            condition["status"] = value


def add_condition(kind: str, value: str) -> NodeChange:
    def change(node: dict[str, Any]) -> None:
        node["status"]["conditions"].append(
            {"type": kind, "status": value, "lastTransitionTime": "2025-01-01T00:30:00Z"}
        )

    return change


def no_conditions(node: dict[str, Any]) -> None:
    node["status"]["conditions"] = []


def deleted(node: dict[str, Any]) -> None:
    node["metadata"]["deletionTimestamp"] = "2025-01-01T02:00:00Z"


@pytest.mark.parametrize(
    ("change", "status", "healthy"),
    [
        (lambda node: None, NodeStatus.RUNNING, True),
        (lambda node: set_condition(node, "Ready", "Unknown"), NodeStatus.FAILURE, False),
        (add_condition("KernelReady", "False"), NodeStatus.RUNNING, False),
        (add_condition("MemoryPressure", "False"), NodeStatus.RUNNING, True),
        (add_condition("KernelDeadlock", "True"), NodeStatus.RUNNING, False),
        (
            lambda node: set_condition(node, "AcceleratedHardwareReady", "False"),
            NodeStatus.RUNNING,
            False,
        ),
        (no_conditions, NodeStatus.PENDING, False),
        (deleted, NodeStatus.SHUTTING_DOWN, False),
    ],
)
def test_node_status_of_a_burst_node(
    gateway: HyperPodEksGateway,
    sagemaker: SageMaker,
    api: FakeApiServer,
    change: NodeChange,
    status: NodeStatus,
    healthy: bool,
) -> None:
    _, stubber = sagemaker
    change(api.nodes[BURST_NODE])
    stubber.add_client_error(
        "describe_cluster_node",
        "ValidationException",
        f"Node {BURST_INSTANCE} not found in cluster {CLUSTER}",
        expected_params={"ClusterName": CLUSTER, "NodeId": BURST_INSTANCE},
    )

    node = gateway.node_status(BURST_INSTANCE)

    assert (node.instance_id, node.platform, node.pool) == (BURST_INSTANCE, "eks", "gpu-burst")
    assert (node.status, node.healthy) == (status, healthy)


@pytest.mark.parametrize("instance_id", [SYSTEM_INSTANCE, UNKNOWN])
def test_node_status_of_a_node_nobody_owns_is_not_found(
    gateway: HyperPodEksGateway, sagemaker: SageMaker, instance_id: str
) -> None:
    _, stubber = sagemaker
    stubber.add_client_error("describe_cluster_node", "ValidationException", "not found")
    with pytest.raises(NodeNotFoundError):
        gateway.node_status(instance_id)
