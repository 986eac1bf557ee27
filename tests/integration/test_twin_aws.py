"""The emulator's extensions the twin adds (hyperguard_twin.aws): HyperPod's node API in
SageMaker as its botocore model says, and EventBridge schedules."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit
from botocore.exceptions import ClientError
from tests.conftest import REGION, Stack
from tests.integration.cluster_harness import (
    HYPERPOD,
    ClusterApis,
    cluster_apis,
    sagemaker,
    unchecked,
)

from hyperguard_twin.aws import ScheduleRunner, attach, schedule_period_s
from hyperguard_twin.ids import hyperpod_cluster_id
from hyperguard_twin.telemetry import STREAM, CloudWatchSink


@pytest.fixture
def apis(stack: Stack) -> Iterator[ClusterApis]:
    with cluster_apis(hyperpod_nodes=5, burst_nodes=1) as running:
        yield running


def test_list_cluster_nodes_pages_and_names_logical_ids_only_when_asked(apis: ClusterApis) -> None:
    first = sagemaker().list_cluster_nodes(ClusterName=HYPERPOD, MaxResults=2)
    assert len(first["ClusterNodeSummaries"]) == 2 and first["NextToken"]
    assert all("NodeLogicalId" not in n for n in first["ClusterNodeSummaries"])
    seen, token = [], None
    while True:
        page = sagemaker().list_cluster_nodes(
            ClusterName=HYPERPOD,
            MaxResults=2,
            IncludeNodeLogicalIds=True,
            **({"NextToken": token} if token else {}),
        )
        seen += page["ClusterNodeSummaries"]
        token = page.get("NextToken")
        if not token:
            break
    assert sorted(n["InstanceId"] for n in seen) == sorted(apis.hyperpod)  # no burst nodes
    assert all(n["NodeLogicalId"] for n in seen)
    with pytest.raises(ClientError, match="ValidationException"):
        unchecked().list_cluster_nodes(ClusterName=HYPERPOD, MaxResults=101)


def test_describe_cluster_node_by_instance_or_logical_id(apis: ClusterApis) -> None:
    by_id = sagemaker().describe_cluster_node(ClusterName=HYPERPOD, NodeId=apis.hyperpod[0])
    logical = by_id["NodeDetails"]["NodeLogicalId"]
    by_slot = sagemaker().describe_cluster_node(ClusterName=HYPERPOD, NodeLogicalId=logical)
    assert by_slot["NodeDetails"]["InstanceId"] == apis.hyperpod[0]
    labels = by_id["NodeDetails"]["KubernetesConfig"]["CurrentLabels"]
    assert labels["sagemaker.amazonaws.com/node-health-status"] == "Schedulable"
    with pytest.raises(ClientError, match="ResourceNotFound"):
        sagemaker().describe_cluster_node(ClusterName=HYPERPOD, NodeId="i-0000000000000dead")


def test_batch_repairs_validate_like_the_model_and_fail_per_node(apis: ClusterApis) -> None:
    too_many = [f"i-0{n:016x}" for n in range(26)]
    for bad in (too_many, ["node-1"], []):
        with pytest.raises(ClientError, match="ValidationException"):
            unchecked().batch_reboot_cluster_nodes(ClusterName=HYPERPOD, NodeIds=bad)
    a, b = apis.hyperpod[:2]
    first = sagemaker().batch_replace_cluster_nodes(ClusterName=HYPERPOD, NodeIds=[a])
    assert first["Successful"] == [a]
    again = sagemaker().batch_reboot_cluster_nodes(
        ClusterName=HYPERPOD, NodeIds=[a, b, "i-0000000000000dead"]
    )
    assert again["Successful"] == [b]
    assert {(f["NodeId"], f["ErrorCode"]) for f in again["Failed"]} == {
        (a, "InstanceIdInUse"),
        ("i-0000000000000dead", "InstanceIdNotFound"),
    }


def test_start_cluster_health_check_runs_on_the_named_nodes(apis: ClusterApis) -> None:
    target = apis.hyperpod[2]
    answer = sagemaker().start_cluster_health_check(
        ClusterName=HYPERPOD,
        DeepHealthCheckConfigurations=[
            {
                "InstanceGroupName": "workers",
                "InstanceIds": [target],
                "DeepHealthChecks": ["InstanceStress"],
            }
        ],
    )
    # The ARN names the cluster by its 12-character id, as botocore's ClusterArn pattern has it.
    assert answer["ClusterArn"].endswith(f"cluster/{hyperpod_cluster_id(HYPERPOD)}")
    status = sagemaker().describe_cluster_node(ClusterName=HYPERPOD, NodeId=target)
    assert status["NodeDetails"]["InstanceStatus"]["Status"] == "DeepHealthCheckInProgress"
    apis.advance(600)
    status = sagemaker().describe_cluster_node(ClusterName=HYPERPOD, NodeId=target)
    assert status["NodeDetails"]["InstanceStatus"]["Status"] == "Running"
    labels = status["NodeDetails"]["KubernetesConfig"]["CurrentLabels"]
    assert labels["sagemaker.amazonaws.com/deep-health-check-status"] == "Passed"
    with pytest.raises(ClientError, match="ResourceNotFound"):
        sagemaker().start_cluster_health_check(
            ClusterName=HYPERPOD,
            DeepHealthCheckConfigurations=[
                {"InstanceGroupName": "nope", "DeepHealthChecks": ["InstanceStress"]}
            ],
        )


def test_ec2_reboots_of_burst_instances_reach_the_cluster(apis: ClusterApis) -> None:
    boto3.client("ec2", region_name=REGION).reboot_instances(InstanceIds=[apis.burst[0]])
    instance = apis.cluster.instance(apis.burst[0])
    assert instance is not None and instance.status.value == "Pending"


def test_schedules_fire_at_their_rate_and_match_no_bus_event(stack: Stack) -> None:
    events, sqs = (
        boto3.client("events", region_name=REGION),
        boto3.client("sqs", region_name=REGION),
    )
    url = sqs.create_queue(QueueName="ticks")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    events.put_rule(Name="tick", ScheduleExpression="rate(1 minute)")
    events.put_targets(Rule="tick", Targets=[{"Id": "q", "Arn": arn}])
    attach(None)  # the emulator, extended; no cluster behind it
    events.put_events(
        Entries=[{"Source": "app", "DetailType": "Anything", "Detail": json.dumps({"a": 1})}]
    )
    runner = ScheduleRunner("123456789012", REGION, speed=60)
    assert runner.fire_due(now=100.0) == 1  # the first firing is at start
    assert runner.fire_due(now=100.5) == 0
    assert runner.fire_due(now=101.0) == 1  # 60 s at speed 60
    bodies = [
        json.loads(m["Body"])
        for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    ]
    assert [b["detail-type"] for b in bodies] == ["Scheduled Event", "Scheduled Event"]
    assert schedule_period_s("rate(5 minutes)") == 300
    assert schedule_period_s("cron(0 12 * * ? *)") is None


def test_a_functions_output_reaches_its_log_group_and_its_emf_lines_become_metrics(
    aws_env: None,
) -> None:
    """Lambda's log delivery, into the emulator's backends: every line of each invocation in
    the function's group, in order, and each EMF point a metric that the CloudWatch API
    reads back with its dimensions, unit and value."""
    # The line as powertools prints it in a function (its own serializer). Ephemeral: every
    # `Metrics` of a process shares one metric set, and a handler an earlier test of this
    # worker ran in process may have left its metrics in it (CI, stop 69).
    metrics = EphemeralMetrics(namespace="HyperGuard", service="hyperguard")
    metrics.add_metric(name="Signals_opened", unit=MetricUnit.Count, value=1.0)
    metrics.add_metric(name="Signals_opened", unit=MetricUnit.Count, value=2.0)
    emf = json.dumps(metrics.serialize_metric_set())
    sink = CloudWatchSink("123456789012", REGION)
    sink.ship("fn", f"START RequestId: 1\n{emf}\n\n   \nEND RequestId: 1\n")
    sink.ship("fn", "START RequestId: 2\n")  # the group and stream exist now
    sink.ship("fn", "\n")  # nothing to deliver
    logs = boto3.client("logs", region_name=REGION)
    events = logs.get_log_events(logGroupName="/aws/lambda/fn", logStreamName=STREAM)["events"]
    assert [e["message"] for e in events] == [
        "START RequestId: 1",
        emf,
        "END RequestId: 1",
        "START RequestId: 2",
    ]
    cloudwatch = boto3.client("cloudwatch", region_name=REGION)
    (metric,) = cloudwatch.list_metrics(Namespace="HyperGuard")["Metrics"]
    assert metric["MetricName"] == "Signals_opened"
    assert metric["Dimensions"] == [{"Name": "service", "Value": "hyperguard"}]
    now = datetime.now(UTC)
    (point,) = cloudwatch.get_metric_statistics(
        Namespace="HyperGuard",
        MetricName="Signals_opened",
        Dimensions=metric["Dimensions"],
        StartTime=now - timedelta(minutes=5),
        EndTime=now + timedelta(minutes=5),
        Period=600,
        Statistics=["Sum", "SampleCount"],
    )["Datapoints"]
    assert (point["Sum"], point["SampleCount"], point["Unit"]) == (3.0, 2.0, "Count")
    # A stopped twin's sink delivers nothing more: the backends outlive it (process-global).
    sink.close()
    sink.ship("fn", f"late\n{emf}\n")
    events = logs.get_log_events(logGroupName="/aws/lambda/fn", logStreamName=STREAM)["events"]
    assert events[-1]["message"] == "START RequestId: 2"
    assert len(cloudwatch.list_metrics(Namespace="HyperGuard")["Metrics"]) == 1
