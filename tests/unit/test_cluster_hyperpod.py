"""HyperPod adapter: moto where it implements the call (ListClusterNodes,
DescribeClusterNode), botocore's Stubber with model-validated responses where it does not
(BatchReboot/ReplaceClusterNodes, and DescribeClusterNode's Kubernetes/capacity fields)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws
from tests.conftest import catalogue

from hyperguard.cluster import ClusterError, NodeNotFoundError
from hyperguard.cluster.hyperpod import HyperPodAdapter, accelerators_of
from hyperguard.models import NodeStatus

CATALOGUE = catalogue()

REGION = "us-east-1"
CLUSTER = "ml-cluster"


def instance_id(n: int) -> str:
    return f"i-{n:017x}"


@pytest.fixture(autouse=True)
def fake_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)


@pytest.fixture
def moto_sagemaker() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("sagemaker", region_name=REGION)
        client.create_cluster(
            ClusterName=CLUSTER,
            InstanceGroups=[
                instance_group("gpu-workers", "ml.p5.48xlarge", 50),
                instance_group("controllers", "ml.m5.xlarge", 2),
            ],
        )
        yield client


def instance_group(name: str, instance_type: str, count: int) -> dict[str, Any]:
    return {
        "InstanceGroupName": name,
        "InstanceType": instance_type,
        "InstanceCount": count,
        "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-lifecycle/", "OnCreate": "on_create.sh"},
        "ExecutionRole": "arn:aws:iam::123456789012:role/hyperpod",
        "ThreadsPerCore": 1,
    }


Stubbed = tuple[Any, Stubber]
"""A SageMaker client and the Stubber that answers it."""


@pytest.fixture
def stubbed() -> Iterator[Stubbed]:
    client = boto3.client("sagemaker", region_name=REGION)
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


# inventory and status


def test_list_nodes_from_moto(moto_sagemaker: Any) -> None:
    calls: list[dict[str, Any]] = []
    moto_sagemaker.meta.events.register(
        "provide-client-params.sagemaker.ListClusterNodes",
        lambda params, **_: calls.append(dict(params)),
    )

    nodes = HyperPodAdapter(CLUSTER, catalogue=CATALOGUE, client=moto_sagemaker).list_nodes()

    assert calls == [{"ClusterName": CLUSTER, "MaxResults": 100, "IncludeNodeLogicalIds": True}]
    assert len(nodes) == 52
    gpu = next(n for n in nodes if n.pool == "gpu-workers")
    assert gpu.platform == "hyperpod"
    assert gpu.cluster == CLUSTER
    assert gpu.instance_type == "ml.p5.48xlarge"
    assert gpu.accelerators == 8
    assert gpu.status is NodeStatus.RUNNING
    assert gpu.healthy
    assert gpu.launch_time is not None
    assert next(n for n in nodes if n.pool == "controllers").accelerators == 0


def summary(n: int, status: str = "Running") -> dict[str, Any]:
    return {
        "InstanceGroupName": "gpu-workers",
        "InstanceId": instance_id(n),
        "InstanceType": "ml.p5.48xlarge",
        "LaunchTime": datetime(2025, 1, 1, tzinfo=UTC),
        "InstanceStatus": {"Status": status, "Message": ""},
    }


def test_list_nodes_follows_next_token_over_more_than_100_nodes(stubbed: Stubbed) -> None:
    # moto 5.2.5's ListClusterNodes paginator restarts from the first node on every page
    # (its pagination model keys nodes on an attribute they lack), so this one is stubbed.
    client, stubber = stubbed
    stubber.add_response(
        "list_cluster_nodes",
        {"ClusterNodeSummaries": [summary(n) for n in range(100)], "NextToken": "page-2"},
        {"ClusterName": CLUSTER, "MaxResults": 100, "IncludeNodeLogicalIds": True},
    )
    stubber.add_response(
        "list_cluster_nodes",
        {"ClusterNodeSummaries": [summary(n, "Failure") for n in range(100, 130)]},
        {
            "ClusterName": CLUSTER,
            "MaxResults": 100,
            "IncludeNodeLogicalIds": True,
            "NextToken": "page-2",
        },
    )

    nodes = HyperPodAdapter(CLUSTER, catalogue=CATALOGUE, client=client).list_nodes()

    assert [n.instance_id for n in nodes] == [instance_id(n) for n in range(130)]
    assert nodes[129].status is NodeStatus.FAILURE
    assert not nodes[129].healthy


def test_a_repeated_next_token_stops_listing_instead_of_looping(stubbed: Stubbed) -> None:
    client, stubber = stubbed
    for _ in range(2):
        stubber.add_response(
            "list_cluster_nodes", {"ClusterNodeSummaries": [summary(1)], "NextToken": "same"}
        )
    with pytest.raises(ClusterError):
        HyperPodAdapter(CLUSTER, catalogue=CATALOGUE, client=client).list_nodes()


def test_node_status_from_moto(moto_sagemaker: Any) -> None:
    node = HyperPodAdapter(CLUSTER, catalogue=CATALOGUE, client=moto_sagemaker).node_status(
        "gpu-workers-3"
    )
    assert node.instance_id == "gpu-workers-3"
    assert node.pool == "gpu-workers"
    assert node.status is NodeStatus.RUNNING


def test_unknown_node_is_node_not_found_with_moto(moto_sagemaker: Any) -> None:
    # moto answers ValidationException, as the real service does for an unknown node id
    with pytest.raises(NodeNotFoundError) as raised:
        HyperPodAdapter(CLUSTER, catalogue=CATALOGUE, client=moto_sagemaker).node_status(
            "i-0000000000000dead"
        )
    assert raised.value.instance_id == "i-0000000000000dead"


def test_resource_not_found_is_node_not_found(stubbed: Stubbed) -> None:
    client, stubber = stubbed
    stubber.add_client_error("describe_cluster_node", "ResourceNotFound", "no such node")
    with pytest.raises(NodeNotFoundError):
        HyperPodAdapter(CLUSTER, catalogue=CATALOGUE, client=client).node_status(instance_id(1))


def test_other_errors_are_retryable_cluster_errors(stubbed: Stubbed) -> None:
    client, stubber = stubbed
    stubber.add_client_error("describe_cluster_node", "ThrottlingException", "slow down", 400)
    with pytest.raises(ClusterError) as raised:
        HyperPodAdapter(CLUSTER, catalogue=CATALOGUE, client=client).node_status(instance_id(1))
    assert not isinstance(raised.value, NodeNotFoundError)


def test_node_status_maps_capacity_kubernetes_labels_and_taints(stubbed: Stubbed) -> None:
    client, stubber = stubbed
    stubber.add_response(
        "describe_cluster_node",
        {
            "NodeDetails": {
                "InstanceGroupName": "trn-workers",
                "InstanceId": instance_id(7),
                "NodeLogicalId": "df268d19-f035-4f28-9b80-b956b92ae21e",
                "InstanceStatus": {"Status": "Failure", "Message": "Node health check failed"},
                "InstanceType": "ml.trn1.32xlarge",
                "LaunchTime": datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC),
                "CapacityType": "Spot",
                "KubernetesConfig": {
                    "CurrentLabels": {
                        "sagemaker.amazonaws.com/node-health-status": "Unschedulable"
                    },
                    "CurrentTaints": [
                        {
                            "Key": "sagemaker.amazonaws.com/node-health-status",
                            "Value": "Unschedulable",
                            "Effect": "NoSchedule",
                        }
                    ],
                },
            }
        },
        {"ClusterName": CLUSTER, "NodeId": instance_id(7)},
    )

    node = HyperPodAdapter(CLUSTER, catalogue=CATALOGUE, client=client).node_status(instance_id(7))

    assert node.pool == "trn-workers"
    assert node.logical_id == "df268d19-f035-4f28-9b80-b956b92ae21e"  # survives a replace
    assert node.capacity_type == "Spot"
    assert node.accelerators == 16
    assert node.status is NodeStatus.FAILURE
    assert not node.healthy
    assert node.labels == {"sagemaker.amazonaws.com/node-health-status": "Unschedulable"}
    assert node.taints == [
        {
            "key": "sagemaker.amazonaws.com/node-health-status",
            "value": "Unschedulable",
            "effect": "NoSchedule",
        }
    ]


@pytest.mark.parametrize(
    ("instance_type", "accelerators"),
    [
        ("ml.p5.48xlarge", 8),
        ("ml.p4d.24xlarge", 8),
        ("ml.g5.12xlarge", 4),
        ("g6e.48xlarge", 8),
        ("ml.trn2.48xlarge", 16),
        ("ml.c5.2xlarge", 0),
        ("ml.x9.unknown", 0),  # EC2 does not know it: counted as none, not a crash
    ],
)
def test_accelerators_come_from_ec2s_figures(instance_type: str, accelerators: int) -> None:
    assert accelerators_of(CATALOGUE, instance_type) == accelerators


# reboot and replace


def ok(node_ids: list[str]) -> dict[str, Any]:
    return {"Successful": node_ids, "Failed": []}


def failed(node_id: str, code: str) -> dict[str, Any]:
    return {"NodeId": node_id, "ErrorCode": code, "Message": f"{code} for {node_id}"}


@pytest.mark.parametrize("operation", ["reboot", "replace"])
def test_sixty_nodes_go_in_chunks_of_25_25_10(stubbed: Stubbed, operation: str) -> None:
    client, stubber = stubbed
    api = f"batch_{operation}_cluster_nodes"
    ids = [instance_id(n) for n in range(60)]
    for chunk in (ids[:25], ids[25:50], ids[50:]):
        stubber.add_response(api, ok(chunk), {"ClusterName": CLUSTER, "NodeIds": chunk})

    outcome = getattr(HyperPodAdapter(CLUSTER, catalogue=CATALOGUE, client=client), operation)(ids)

    assert outcome.successful == ids
    assert outcome.failed == []


def test_duplicate_ids_are_sent_once(stubbed: Stubbed) -> None:
    client, stubber = stubbed
    stubber.add_response(
        "batch_reboot_cluster_nodes",
        ok([instance_id(1)]),
        {"ClusterName": CLUSTER, "NodeIds": [instance_id(1)]},
    )
    outcome = HyperPodAdapter(CLUSTER, catalogue=CATALOGUE, client=client).reboot(
        [instance_id(1), instance_id(1)]
    )
    assert outcome.successful == [instance_id(1)]


def test_transient_per_node_failures_are_retried_with_backoff_until_they_succeed(
    stubbed: Stubbed,
) -> None:
    client, stubber = stubbed
    a, b, c = instance_id(1), instance_id(2), instance_id(3)
    stubber.add_response(
        "batch_reboot_cluster_nodes",
        {
            "Successful": [a],
            "Failed": [failed(b, "InvalidInstanceStatus"), failed(c, "InternalServerError")],
        },
        {"ClusterName": CLUSTER, "NodeIds": [a, b, c]},
    )
    stubber.add_response(
        "batch_reboot_cluster_nodes",
        {"Successful": [c], "Failed": [failed(b, "InvalidInstanceStatus")]},
        {"ClusterName": CLUSTER, "NodeIds": [b, c]},
    )
    stubber.add_response(
        "batch_reboot_cluster_nodes", ok([b]), {"ClusterName": CLUSTER, "NodeIds": [b]}
    )
    sleeps = Sleeps()

    outcome = HyperPodAdapter(
        CLUSTER, catalogue=CATALOGUE, client=client, sleep=sleeps, base_delay_s=2
    ).reboot([a, b, c])

    assert outcome.successful == [a, c, b]
    assert outcome.failed == []
    assert sleeps == [2, 4]


def test_instance_id_not_found_is_never_retried(stubbed: Stubbed) -> None:
    client, stubber = stubbed
    a, gone = instance_id(1), instance_id(2)
    stubber.add_response(
        "batch_replace_cluster_nodes",
        {"Successful": [a], "Failed": [failed(gone, "InstanceIdNotFound")]},
        {"ClusterName": CLUSTER, "NodeIds": [a, gone]},
    )
    sleeps = Sleeps()

    outcome = HyperPodAdapter(CLUSTER, catalogue=CATALOGUE, client=client, sleep=sleeps).replace(
        [a, gone]
    )

    assert outcome.successful == [a]
    assert [(f.node_id, f.error_code) for f in outcome.failed] == [(gone, "InstanceIdNotFound")]
    assert outcome.failed[0].message == f"InstanceIdNotFound for {gone}"
    assert sleeps == []


def test_exhausted_retries_are_reported_as_failed(stubbed: Stubbed) -> None:
    client, stubber = stubbed
    busy = instance_id(9)
    for _ in range(3):
        stubber.add_response(
            "batch_reboot_cluster_nodes",
            # the model gives Successful a minimum length of 1: an all-failed batch omits it
            {"Failed": [failed(busy, "InternalServerError")]},
            {"ClusterName": CLUSTER, "NodeIds": [busy]},
        )
    sleeps = Sleeps()

    outcome = HyperPodAdapter(
        CLUSTER, catalogue=CATALOGUE, client=client, sleep=sleeps, max_attempts=3, base_delay_s=1
    ).reboot([busy])

    assert outcome.successful == []
    assert [(f.node_id, f.error_code) for f in outcome.failed] == [(busy, "InternalServerError")]
    assert sleeps == [1, 2]


def test_a_node_already_being_repaired_is_reported_at_once_not_retried(stubbed: Stubbed) -> None:
    """InstanceIdInUse: the node is being rebooted or replaced, for minutes. Retried here it
    cost 2 + 4 + 8 s of the Lambda's time before the same answer reached the Repair step,
    which adopts that repair (D184, D187)."""
    client, stubber = stubbed
    a, busy = instance_id(1), instance_id(2)
    stubber.add_response(
        "batch_replace_cluster_nodes",
        {"Successful": [a], "Failed": [failed(busy, "InstanceIdInUse")]},
        {"ClusterName": CLUSTER, "NodeIds": [a, busy]},
    )
    sleeps = Sleeps()

    outcome = HyperPodAdapter(CLUSTER, catalogue=CATALOGUE, client=client, sleep=sleeps).replace(
        [a, busy]
    )

    assert outcome.successful == [a]
    assert [(f.node_id, f.error_code) for f in outcome.failed] == [(busy, "InstanceIdInUse")]
    assert sleeps == []
    stubber.assert_no_pending_responses()


def test_a_chunk_that_fails_as_a_whole_fails_its_nodes_and_keeps_the_others(
    stubbed: Stubbed,
) -> None:
    client, stubber = stubbed
    ids = [instance_id(n) for n in range(30)]
    stubber.add_response(
        "batch_reboot_cluster_nodes", ok(ids[:25]), {"ClusterName": CLUSTER, "NodeIds": ids[:25]}
    )
    stubber.add_client_error(
        "batch_reboot_cluster_nodes",
        "ThrottlingException",
        "Rate exceeded",
        400,
        expected_params={"ClusterName": CLUSTER, "NodeIds": ids[25:]},
    )

    outcome = HyperPodAdapter(CLUSTER, catalogue=CATALOGUE, client=client).reboot(ids)

    assert outcome.successful == ids[:25]
    assert {f.node_id for f in outcome.failed} == set(ids[25:])
    assert {f.error_code for f in outcome.failed} == {"ThrottlingException"}


def test_no_client_is_created_until_first_use(monkeypatch: pytest.MonkeyPatch) -> None:
    created: list[str] = []
    monkeypatch.setattr("hyperguard.cluster.hyperpod.client", created.append)
    adapter = HyperPodAdapter(CLUSTER, catalogue=CATALOGUE)
    assert created == []
    with pytest.raises(AttributeError):
        adapter.list_nodes()
    assert created == ["sagemaker"]
