"""HyperPod instance groups grown and shrunk through the emulator (hyperguard_twin.aws and the
simulated cluster): BatchAddClusterNodes, DescribeClusterNode by NodeLogicalId and
BatchDeleteClusterNodes, as the botocore model shapes them, on the manual clock; and the
scheduler's scale-in of a node a burst added."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from tests.conftest import Stack
from tests.deadlines import loaded
from tests.integration.cluster_harness import (
    ACCOUNT,
    HYPERPOD,
    P5,
    REGION,
    ClusterApis,
    cluster_apis,
    ensure_queues,
    sagemaker,
    unchecked,
)
from tests.integration.scheduler_harness import scheduler

from hyperguard.bursting.plan import plan_burst
from hyperguard.bursting.requests import BurstJob, BurstRequest
from hyperguard.cluster.conventions import HEALTH_LABEL, INSTANCE_GROUP_LABEL
from hyperguard.cluster.karpenter import (
    IDLE_SINCE_ANNOTATION,
    LOGICAL_ID_ANNOTATION,
    idle_mark,
)
from hyperguard.messaging import Workflows
from hyperguard.models import Job, JobStatus
from hyperguard.models.nodes import BURST_LABEL
from hyperguard.policies.burst import BurstCapacity, BurstPolicy
from hyperguard_twin.cluster import SimTimings
from hyperguard_twin.plane.kube import NODES, PODS, wait_for

GROUP = "workers"
TIMINGS = SimTimings()  # the harness's cluster runs on the defaults


@pytest.fixture
def apis(stack: Stack) -> Iterator[ClusterApis]:
    with cluster_apis(hyperpod_nodes=2, burst_nodes=1) as running:
        yield running


def add(count: int, group: str = GROUP, **extra: Any) -> dict[str, Any]:
    response: dict[str, Any] = sagemaker().batch_add_cluster_nodes(
        ClusterName=HYPERPOD,
        NodesToAdd=[{"InstanceGroupName": group, "IncrementTargetCountBy": count}],
        **extra,
    )
    return response


def group_counts(group: str = GROUP) -> tuple[int, int]:
    """(TargetCount, CurrentCount) of the instance group."""
    cluster = sagemaker().describe_cluster(ClusterName=HYPERPOD)
    assert cluster["NodeProvisioningMode"] == "Continuous"
    found = next(g for g in cluster["InstanceGroups"] if g["InstanceGroupName"] == group)
    return found["TargetCount"], found["CurrentCount"]


def listed() -> dict[str, dict[str, Any]]:
    """ListClusterNodes' summaries by NodeLogicalId."""
    page = sagemaker().list_cluster_nodes(ClusterName=HYPERPOD, IncludeNodeLogicalIds=True)
    return {n["NodeLogicalId"]: n for n in page["ClusterNodeSummaries"]}


def node(logical_id: str) -> dict[str, Any]:
    details: dict[str, Any] = sagemaker().describe_cluster_node(
        ClusterName=HYPERPOD, NodeLogicalId=logical_id
    )["NodeDetails"]
    return details


def status(logical_id: str) -> str:
    return str(node(logical_id)["InstanceStatus"]["Status"])


def test_added_nodes_get_an_instance_then_join_kubernetes(apis: ClusterApis) -> None:
    assert group_counts() == (2, 2)
    answer = add(2)
    assert answer["Failed"] == []
    assert [(n["InstanceGroupName"], n["Status"]) for n in answer["Successful"]] == [
        (GROUP, "Pending")
    ] * 2
    added = [n["NodeLogicalId"] for n in answer["Successful"]]
    assert group_counts() == (4, 2)
    assert not set(added) & set(listed())
    assert all("InstanceId" not in node(a) and status(a) == "Pending" for a in added)

    apis.advance(TIMINGS.hyperpod_launch_s)
    summaries = listed()
    assert all(summaries[a]["InstanceStatus"]["Status"] == "Pending" for a in added)
    instance_ids = [summaries[a]["InstanceId"] for a in added]
    assert all(i.startswith("i-") for i in instance_ids)
    assert group_counts() == (4, 4)
    assert all(apis.kube.get(NODES, f"hyperpod-{i}") is None for i in instance_ids)

    apis.advance(TIMINGS.hyperpod_add_s - TIMINGS.hyperpod_launch_s)
    for logical_id, instance_id in zip(added, instance_ids, strict=True):
        details = node(logical_id)
        assert details["InstanceId"] == instance_id
        assert details["InstanceStatus"]["Status"] == "Running"
        labels = details["KubernetesConfig"]["CurrentLabels"]
        assert labels[HEALTH_LABEL] == "Schedulable"
        assert labels[INSTANCE_GROUP_LABEL] == GROUP
        assert apis.cluster.schedulable(instance_id)


def test_a_client_token_seen_before_adds_nothing(apis: ClusterApis) -> None:
    first = add(2, ClientToken="grow-once")
    again = add(2, ClientToken="grow-once")
    assert again["Successful"] == first["Successful"]
    assert group_counts() == (4, 2)
    other = add(1, ClientToken="grow-twice")
    assert len(other["Successful"]) == 1 and group_counts() == (5, 2)


def test_entries_hyperpod_cannot_grant_fail_whole(apis: ClusterApis) -> None:
    answer = sagemaker().batch_add_cluster_nodes(
        ClusterName=HYPERPOD,
        NodesToAdd=[
            {"InstanceGroupName": "nope", "IncrementTargetCountBy": 3},
            {"InstanceGroupName": GROUP, "IncrementTargetCountBy": 1, "InstanceTypes": [P5]},
            {
                "InstanceGroupName": GROUP,
                "IncrementTargetCountBy": 2,
                "InstanceTypes": ["ml.g5.xlarge"],
            },
            {
                "InstanceGroupName": GROUP,
                "IncrementTargetCountBy": 4,
                "AvailabilityZones": ["us-east-1b"],
            },
        ],
    )
    assert len(answer["Successful"]) == 1
    assert [
        (f["InstanceGroupName"], f["ErrorCode"], f["FailedCount"]) for f in answer["Failed"]
    ] == [
        ("nope", "InstanceGroupNotFound", 3),
        (GROUP, "IncompatibleInstanceTypes", 2),
        (GROUP, "IncompatibleAvailabilityZones", 4),
    ]
    assert group_counts() == (3, 2)


def test_a_launch_without_capacity_leaves_the_node_in_failure(apis: ClusterApis) -> None:
    apis.cluster.set_hyperpod_capacity(GROUP, 1)
    added = [n["NodeLogicalId"] for n in add(2)["Successful"]]
    apis.advance(TIMINGS.hyperpod_add_s)
    assert sorted(map(status, added)) == ["Failure", "Running"]
    failed = next(a for a in added if status(a) == "Failure")
    details = node(failed)
    assert "InstanceId" not in details
    assert "InsufficientInstanceCapacity" in details["InstanceStatus"]["Message"]
    assert failed not in listed()
    assert group_counts() == (4, 3)


def test_nodes_are_deleted_by_logical_or_instance_id(apis: ClusterApis) -> None:
    apis.cluster.set_hyperpod_capacity(GROUP, 1)
    running, failed = (n["NodeLogicalId"] for n in add(2)["Successful"])
    apis.advance(TIMINGS.hyperpod_add_s)
    if status(running) == "Failure":
        running, failed = failed, running
    running_id = node(running)["InstanceId"]
    pending = add(1)["Successful"][0]["NodeLogicalId"]
    original = apis.hyperpod[0]
    assert group_counts() == (5, 3)

    by_slot = sagemaker().batch_delete_cluster_nodes(
        ClusterName=HYPERPOD, NodeLogicalIds=[pending, failed, running]
    )
    assert by_slot["SuccessfulNodeLogicalIds"] == [pending, failed, running]
    assert "FailedNodeLogicalIds" not in by_slot and "Successful" not in by_slot
    by_id = sagemaker().batch_delete_cluster_nodes(ClusterName=HYPERPOD, NodeIds=[original])
    assert by_id["Successful"] == [original]

    assert group_counts() == (1, 1)
    assert sorted(n["InstanceId"] for n in listed().values()) == [apis.hyperpod[1]]
    for instance_id in (running_id, original):
        assert apis.kube.get(NODES, f"hyperpod-{instance_id}") is None
    apis.advance(TIMINGS.hyperpod_add_s)  # nothing due for the deleted nodes happens
    assert group_counts() == (1, 1)
    with pytest.raises(ClientError, match="ResourceNotFound"):
        node(pending)


def test_a_group_whose_nodes_are_all_deleted_is_still_listed(apis: ClusterApis) -> None:
    sagemaker().batch_delete_cluster_nodes(ClusterName=HYPERPOD, NodeIds=apis.hyperpod)
    assert group_counts() == (0, 0)
    assert len(add(1)["Successful"]) == 1


def test_deletes_fail_per_node(apis: ClusterApis) -> None:
    rebooting, unknown = apis.hyperpod[0], "i-0000000000000dead"
    sagemaker().batch_reboot_cluster_nodes(ClusterName=HYPERPOD, NodeIds=[rebooting])
    answer = sagemaker().batch_delete_cluster_nodes(
        ClusterName=HYPERPOD,
        NodeIds=[rebooting, unknown, apis.burst[0]],
        NodeLogicalIds=["no-such-node"],
    )
    assert "Successful" not in answer and "SuccessfulNodeLogicalIds" not in answer
    assert [(f["NodeId"], f["Code"]) for f in answer["Failed"]] == [
        (rebooting, "NodeIdInUse"),
        (unknown, "NodeIdNotFound"),
        (apis.burst[0], "NodeIdNotFound"),
    ]
    assert [(f["NodeLogicalId"], f["Code"]) for f in answer["FailedNodeLogicalIds"]] == [
        ("no-such-node", "NodeIdNotFound")
    ]
    assert group_counts() == (2, 2)


def test_requests_are_validated_like_the_model(apis: ClusterApis) -> None:
    entry = {"InstanceGroupName": GROUP, "IncrementTargetCountBy": 1}
    for nodes in ([], [entry] * 6, [{**entry, "IncrementTargetCountBy": 51}]):
        with pytest.raises(ClientError, match="ValidationException"):
            unchecked().batch_add_cluster_nodes(ClusterName=HYPERPOD, NodesToAdd=nodes)
    bad_group = [{**entry, "InstanceGroupName": "bad_name"}]
    with pytest.raises(ClientError, match="ValidationException"):
        unchecked().batch_add_cluster_nodes(ClusterName=HYPERPOD, NodesToAdd=bad_group)
    bad_ids: list[dict[str, list[str]]] = [
        {},
        {"NodeIds": []},
        {"NodeIds": ["node-1"]},
        {"NodeLogicalIds": ["-x"]},
    ]
    for ids in bad_ids:
        with pytest.raises(ClientError, match="ValidationException"):
            unchecked().batch_delete_cluster_nodes(ClusterName=HYPERPOD, **ids)
    with pytest.raises(ClientError, match="ResourceNotFound"):
        sagemaker().batch_add_cluster_nodes(ClusterName="other", NodesToAdd=[entry])
    assert group_counts() == (2, 2)


def test_describe_cluster_shapes_managed_autoscaling_as_the_model_does(apis: ClusterApis) -> None:
    described = sagemaker().describe_cluster(ClusterName=HYPERPOD)
    assert "AutoScaling" not in described  # never configured
    continuous, groups = apis.gateway.hyperpod_groups()
    assert continuous and not any(g.autoscaled for g in groups)

    apis.cluster.configure_scaling(autoscaling=True)
    # botocore keeps only the members its model names: a misnamed one would be dropped.
    described = sagemaker().describe_cluster(ClusterName=HYPERPOD)
    assert described["AutoScaling"] == {
        "Mode": "Enable",
        "AutoScalerType": "Karpenter",
        "Status": "InService",
    }
    assert described["NodeProvisioningMode"] == "Continuous"
    continuous, groups = apis.gateway.hyperpod_groups()
    assert continuous and groups and all(g.autoscaled for g in groups)

    apis.cluster.configure_scaling(autoscaling=False)
    assert sagemaker().describe_cluster(ClusterName=HYPERPOD)["AutoScaling"]["Mode"] == "Disable"
    assert not any(g.autoscaled for g in apis.gateway.hyperpod_groups()[1])


def test_a_burst_never_plans_nodes_for_a_group_the_autoscaler_manages(apis: ClusterApis) -> None:
    apis.cluster.configure_scaling(autoscaling=True)
    policy = BurstPolicy(
        capacity=BurstCapacity.model_validate(
            {"max_nodes": 8, "hyperpod_groups": [{"instanceGroupName": GROUP, "maxCount": 8}]}
        )
    )
    request = BurstRequest(
        burst_id="burst-0123456789abcdef",
        template="production",
        instance_type="p5.48xlarge",
        accelerators_per_node=8,
        jobs=[BurstJob(job_id="j1", team="alpha", nodes=1)],
    )
    _, groups = apis.gateway.hyperpod_groups()
    plan = plan_burst(
        request, policy, claims_elsewhere=0, spend_usd_per_hour={}, hyperpod_groups=groups
    )
    assert plan.options == []  # production bursts only onto HyperPod: nothing to buy
    assert any("managed autoscaling (Karpenter) is on" in why for why in plan.refused)


def test_without_continuous_provisioning_nodes_are_not_added(apis: ClusterApis) -> None:
    apis.cluster.configure_scaling(continuous=False)
    assert "NodeProvisioningMode" not in sagemaker().describe_cluster(ClusterName=HYPERPOD)
    assert apis.gateway.hyperpod_groups()[0] is False
    with pytest.raises(ClientError, match="ValidationException"):
        add(1)
    assert len(listed()) == 2


def test_a_deleted_node_loses_its_pods(apis: ClusterApis) -> None:
    target = apis.hyperpod[0]
    job = Job(
        job_id="pinned",
        team="nlp",
        priority_class="training",
        instance_type=P5,
        replicas=1,
        image="hyperguard/trainer:test",
        submitted_at=apis.clock.now(),
    )
    placed = job.model_copy(update={"status": JobStatus.RUNNING, "nodes": [target], "pool": GROUP})
    ensure_queues(apis, "nlp")
    apis.gateway.dispatch(placed, [target])
    apis.settle()
    on_target = f"spec.nodeName=hyperpod-{target}"

    def running() -> bool:
        run = apis.cluster.runs().get("pinned")
        return run is not None and run.state == "running"

    wait_for(running, loaded(60), "the pinned run to start")  # once Kueue admitted it (wall time)
    assert apis.kube.list_objects(PODS, field_selector=on_target)
    sagemaker().batch_delete_cluster_nodes(ClusterName=HYPERPOD, NodeIds=[target])
    # kube-controller-manager's pod garbage collector takes the pods of a node that is gone.
    wait_for(
        lambda: not apis.kube.list_objects(PODS, field_selector=on_target),
        loaded(120),
        "the deleted node's pods to go",
    )
    wait_for(lambda: apis.cluster.runs()["pinned"].state == "failed", loaded(60), "the run to fail")


BURSTS = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:hyperguard-BurstCapacity"


def test_scale_in_deletes_only_a_hyperpod_node_its_burst_says_it_added(
    stack: Stack, apis: ClusterApis
) -> None:
    """A node's burst label can be set by anyone who may patch the node (its own kubelet
    too), so before scale-in deletes an idle HyperPod node, the burst's execution output
    must list the node among those it added."""
    (logical_id,) = [n["NodeLogicalId"] for n in add(1)["Successful"]]
    apis.advance(TIMINGS.hyperpod_add_s + 1)
    instance_id = node(logical_id)["InstanceId"]
    an_hour_ago = apis.clock.now() - timedelta(hours=1)
    assert apis.gateway.kubernetes.mark_node(
        instance_id,
        labels={BURST_LABEL: "burst-forged"},
        annotations={
            LOGICAL_ID_ANNOTATION: logical_id,
            IDLE_SINCE_ANNOTATION: idle_mark(an_hour_ago),
        },
    )
    sfn = boto3.client("stepfunctions", region_name=REGION)
    service = scheduler(stack, apis)
    service.bursts = Workflows(BURSTS, sfn=sfn)
    described = {"executionArn": service.bursts.execution_arn("burst-forged")}
    with Stubber(sfn) as stub:
        stub.add_client_error(
            "describe_execution", "ExecutionDoesNotExist", expected_params=described
        )
        assert service.run_pass().released == []
        stub.assert_no_pending_responses()
    assert group_counts() == (3, 3)  # the node stays

    answer = {
        **described,
        "stateMachineArn": BURSTS,
        "status": "SUCCEEDED",
        "startDate": an_hour_ago,
        "output": json.dumps({"added": [logical_id]}),
    }
    with Stubber(sfn) as stub:
        stub.add_response("describe_execution", answer, described)
        assert service.run_pass().released == [logical_id]
    assert group_counts()[0] == 2  # BatchDeleteClusterNodes took it out of the group
