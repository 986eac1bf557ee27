"""The ingest Lambda handler on SQS batches of the real sample events (moto for AWS, the
simulated cluster behind SageMaker and the Kubernetes API for instances it looks up)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import boto3
import pytest
from tests.conftest import REGION, Stack, load_event
from tests.integration import handler_harness
from tests.integration.cluster_harness import ClusterApis, cluster_apis

from hyperguard.cluster import ClusterError
from hyperguard.models import Node
from hyperguard.store import IncidentStore, NodeStore

OURS = {
    # instance id → cluster, as the published samples name them
    "i-12345678abcdefghi": "sample-cluster",
    "i-1234567890abcdef0": "sample-cluster",
    "i-0b662ef9931388ba0": "sample-cluster",
}


def load_handler(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return handler_harness.load_handler("ingest_health", env, monkeypatch)


def context() -> Any:
    return handler_harness.context("ingest")


def record(body: str) -> dict[str, Any]:
    return handler_harness.sqs_record(body, "test-health")


@pytest.fixture(autouse=True)
def apis(stack: Stack) -> Iterator[ClusterApis]:
    """The HyperPod and EKS clusters the handler looks unknown instances up in."""
    with cluster_apis(hyperpod_nodes=2, burst_nodes=1) as running:
        yield running


@pytest.fixture
def seeded(stack: Stack) -> Stack:
    NodeStore(stack.tables["NodesTable"]).upsert_inventory(
        [
            Node(
                instance_id=i,
                cluster=c,
                pool="workers",
                platform="hyperpod",
                instance_type="ml.p5.48xlarge",
            )
            for i, c in OURS.items()
        ]
    )
    return stack


def executions(stack: Stack) -> list[str]:
    sfn = boto3.client("stepfunctions", region_name=REGION)
    return sorted(
        e["name"]
        for e in sfn.list_executions(stateMachineArn=stack.state_machine_arn)["executions"]
    )


def test_a_mixed_batch_opens_exactly_the_incidents_the_facts_call_for(
    seeded: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = load_handler(seeded.env(), monkeypatch)
    hyperpod = json.dumps(load_event("hyperpod-node-health-unhealthy"))
    batch = [
        record(hyperpod),
        record(json.dumps(load_event("aws-health-ec2-retirement"))),
        record(json.dumps(load_event("ec2-instance-state-change"))),  # pending: informational
        record(json.dumps(load_event("ec2-spot-interruption-warning"))),
        record(json.dumps(load_event("ec2-rebalance-recommendation"))),  # ignored by default
        record("{not json"),
        record(hyperpod),  # redelivery of the first event
    ]
    result = app.handler({"Records": batch}, context())
    assert result == {"batchItemFailures": []}
    assert app.ingestor.counts == {"opened": 3, "ignored": 2, "malformed": 1, "duplicate": 1}
    incidents = IncidentStore(seeded.tables["IncidentsTable"], seeded.tables["NodesTable"]).recent()
    by_node = {i.instance_id: i for i in incidents}
    assert set(by_node) == set(OURS)
    assert by_node["i-0b662ef9931388ba0"].repair.value == "drain"
    assert by_node["i-1234567890abcdef0"].not_before is not None
    assert executions(seeded) == sorted(i.incident_id for i in incidents)
    assert all(i.execution_arn and i.execution_arn.endswith(i.incident_id) for i in incidents)


def test_a_transient_failure_fails_only_its_record_and_the_retry_completes_it(
    seeded: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = load_handler(seeded.env(), monkeypatch)
    real_start: Callable[[str, dict[str, Any]], str] = app.ingestor.workflows.ensure_started
    calls = {"n": 0}

    def flaky_start(incident_id: str, payload: dict[str, Any]) -> str:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ConnectionError("Step Functions endpoint unreachable")
        return real_start(incident_id, payload)

    monkeypatch.setattr(app.ingestor.workflows, "ensure_started", flaky_start)
    failing = record(json.dumps(load_event("hyperpod-node-health-unhealthy")))
    healthy = record(json.dumps(load_event("ec2-spot-interruption-warning")))
    result = app.handler({"Records": [failing, healthy]}, context())
    assert result == {"batchItemFailures": [{"itemIdentifier": failing["messageId"]}]}
    store = IncidentStore(seeded.tables["IncidentsTable"], seeded.tables["NodesTable"])
    pending = store.open_incident_for("i-12345678abcdefghi")
    assert pending is not None and pending.execution_arn is None  # written, not yet started

    retry = app.handler({"Records": [failing]}, context())
    assert retry == {"batchItemFailures": []}
    incident = store.open_incident_for("i-12345678abcdefghi")
    assert incident is not None and incident.execution_arn is not None
    assert incident.incident_id == pending.incident_id
    assert len(executions(seeded)) == 2  # one per incident, none lost, none doubled


def test_an_instance_the_cluster_refuses_to_describe_holds_back_none_of_its_events_others(
    seeded: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One AWS Health event names two instances, and SageMaker refuses to describe the one
    the inventory has not seen: the other's incident opens at once; the record fails alone
    and is delivered again until the refused one is looked up too."""
    app = load_handler(seeded.env(), monkeypatch)
    refused = "i-0aaaaaaaaaaaaaaa0"
    real_status: Callable[[str], Node] = app.ingestor.lookup.gateway.node_status
    refusing = {"on": True}

    def node_status(instance_id: str) -> Node:
        if instance_id == refused and refusing["on"]:
            raise ClusterError(f"DescribeClusterNode {instance_id}: AccessDeniedException")
        return real_status(instance_id)

    monkeypatch.setattr(app.ingestor.lookup.gateway, "node_status", node_status)
    event = load_event("aws-health-ec2-retirement")
    [ours] = event["detail"]["affectedEntities"]
    # Constructed: the published sample naming a second instance, before ours.
    event["detail"]["affectedEntities"] = [{**ours, "entityValue": refused}, ours]
    body = record(json.dumps(event))
    pending = record(json.dumps(load_event("ec2-instance-state-change")))  # informational
    failed = {"batchItemFailures": [{"itemIdentifier": body["messageId"]}]}
    assert app.handler({"Records": [body, pending]}, context()) == failed
    store = IncidentStore(seeded.tables["IncidentsTable"], seeded.tables["NodesTable"])
    opened = store.open_incident_for("i-1234567890abcdef0")
    assert opened is not None and opened.execution_arn is not None
    assert executions(seeded) == [opened.incident_id]

    refusing["on"] = False  # delivered again: the refused instance is not one of ours
    assert app.handler({"Records": [body]}, context()) == {"batchItemFailures": []}
    assert app.ingestor.counts == {"ignored": 1, "duplicate": 1, "foreign": 1}
    assert executions(seeded) == [opened.incident_id]  # nothing opened twice


def test_events_for_other_clusters_and_unknown_instances_are_dropped(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    NodeStore(stack.tables["NodesTable"]).upsert_inventory(
        [
            Node(
                instance_id="i-12345678abcdefghi",
                cluster="our-cluster",
                pool="w",
                platform="hyperpod",
                instance_type="ml.p5.48xlarge",
            )
        ]
    )
    app = load_handler(stack.env(), monkeypatch)
    batch = [
        record(json.dumps(load_event("hyperpod-node-health-unhealthy"))),  # sample-cluster ≠ ours
        record(json.dumps(load_event("ec2-spot-interruption-warning"))),  # unknown instance
    ]
    assert app.handler({"Records": batch}, context()) == {"batchItemFailures": []}
    assert app.ingestor.counts == {"foreign": 2}
    assert executions(stack) == []


def test_a_missing_setting_fails_at_init_naming_it(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hyperguard.settings import SettingsError

    env = stack.env()
    del env["NODES_TABLE"]
    monkeypatch.delenv("NODES_TABLE", raising=False)
    with pytest.raises(SettingsError, match="NODES_TABLE"):
        load_handler(env, monkeypatch)
    env = stack.env() | {"RECOVERY_STATE_MACHINE_ARN": ""}
    with pytest.raises(SettingsError, match="RECOVERY_STATE_MACHINE_ARN"):
        load_handler(env, monkeypatch)


def test_kubernetes_conditions_name_the_eks_cluster_and_still_reach_hyperpod_nodes(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    instance = "i-0abc1234def567890"
    NodeStore(stack.tables["NodesTable"]).upsert_inventory(
        [
            Node(
                instance_id=instance,
                cluster="hyperpod-prod",
                pool="workers",
                platform="hyperpod",
                instance_type="ml.p5.48xlarge",
            )
        ]
    )
    app = load_handler(stack.env() | {"EKS_CLUSTER_NAME": "training-eks"}, monkeypatch)

    def condition(cluster: str, event_id: str) -> str:
        # Constructed: HyperGuard's own forwarder contract (docs/events.md), not an AWS sample.
        return json.dumps(
            {
                "version": "0",
                "id": event_id,
                "detail-type": "Kubernetes Node Condition Changed",
                "source": "hyperguard.node-forwarder",
                "account": "123456789012",
                "time": "2026-03-01T12:00:00Z",
                "region": REGION,
                "resources": [],
                "detail": {
                    "clusterName": cluster,
                    "nodeName": f"hyperpod-{instance}",
                    "providerId": f"aws:///us-east-1a/{instance}",
                    "conditionType": "AcceleratedHardwareReady",
                    "status": "False",
                    "reason": "NvidiaXID79Error",
                    "message": "GPU has fallen off the bus",
                    "observedTime": "2026-03-01T11:59:58Z",
                },
            }
        )

    batch = [record(condition("other-eks", "e-1")), record(condition("training-eks", "e-2"))]
    assert app.handler({"Records": batch}, context()) == {"batchItemFailures": []}
    assert app.ingestor.counts == {"foreign": 1, "opened": 1}


def test_an_instance_the_inventory_has_not_seen_yet_is_looked_up_in_the_cluster(
    stack: Stack, apis: ClusterApis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node added since the last inventory sync: ingestion asks SageMaker before it
    calls the event foreign, stores the node, and opens the incident."""
    app = load_handler(stack.env(), monkeypatch)
    newcomer = apis.hyperpod[0]
    event = load_event("hyperpod-node-health-unhealthy")
    event["detail"]["InstanceId"] = newcomer  # constructed: the sample aimed at our node
    event["detail"]["ClusterName"] = "hyperguard-twin"
    assert app.handler({"Records": [record(json.dumps(event))]}, context()) == {
        "batchItemFailures": []
    }
    assert app.ingestor.counts == {"opened": 1}
    stored = NodeStore(stack.tables["NodesTable"]).get(newcomer)
    assert stored is not None and stored.cluster == "hyperguard-twin" and stored.accelerators == 8


def test_a_storm_for_an_unknown_instance_costs_one_lookup_per_window(
    stack: Stack, apis: ClusterApis, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = load_handler(stack.env(), monkeypatch)
    looked_up: list[str] = []
    real = app.ingestor.lookup.gateway.node_status

    def counted(instance_id: str) -> Any:
        looked_up.append(instance_id)
        return real(instance_id)

    monkeypatch.setattr(app.ingestor.lookup.gateway, "node_status", counted)
    spot = load_event("ec2-spot-interruption-warning")
    batch = []
    for n in range(20):
        event = dict(spot, id=f"storm-{n}")  # constructed: 20 deliveries of new events
        batch.append(record(json.dumps(event)))
    assert app.handler({"Records": batch[:10]}, context()) == {"batchItemFailures": []}
    assert app.handler({"Records": batch[10:]}, context()) == {"batchItemFailures": []}
    assert app.ingestor.counts == {"foreign": 20}
    assert looked_up == [spot["detail"]["instance-id"]]


def execution_ended(execution_arn: str, status: str, state_machine_arn: str) -> dict[str, Any]:
    """A "Step Functions Execution Status Change" event as Step Functions sends it (the
    documented fields: docs.aws.amazon.com/step-functions/latest/dg/cw-events.html)."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Step Functions Execution Status Change",
        "source": "aws.states",
        "account": "123456789012",
        "time": "2026-11-22T10:00:00Z",
        "region": REGION,
        "resources": [execution_arn],
        "detail": {
            "executionArn": execution_arn,
            "stateMachineArn": state_machine_arn,
            "name": execution_arn.rsplit(":", 1)[1],
            "status": status,
            "startDate": 1795860000000,
            "stopDate": 1795860060000,
            "input": "{}",
            "output": None,
            "inputDetails": {"included": True},
            "outputDetails": None,
        },
    }


def test_an_execution_that_ends_with_its_incident_open_hands_it_to_an_operator(
    seeded: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = load_handler(seeded.env(), monkeypatch)
    app.handler(
        {"Records": [record(json.dumps(load_event("hyperpod-node-health-unhealthy")))]}, context()
    )
    store = IncidentStore(seeded.tables["IncidentsTable"], seeded.tables["NodesTable"])
    incident = store.open_incident_for("i-12345678abcdefghi")
    assert incident is not None and incident.execution_arn is not None
    arn, machine = incident.execution_arn, seeded.state_machine_arn
    # What the service bus carries from here on (IncidentEscalated is for programs).
    events, sqs = boto3.client("events"), boto3.client("sqs")
    published = sqs.create_queue(QueueName="published")["QueueUrl"]
    events.put_rule(
        Name="escalated",
        EventBusName=seeded.bus_name,
        EventPattern=json.dumps({"detail-type": ["IncidentEscalated"]}),
    )
    events.put_targets(
        Rule="escalated",
        EventBusName=seeded.bus_name,
        Targets=[
            {
                "Id": "q",
                "Arn": sqs.get_queue_attributes(QueueUrl=published, AttributeNames=["QueueArn"])[
                    "Attributes"
                ]["QueueArn"],
            }
        ],
    )

    stale = arn + "-r1"  # an execution the incident does not run (any more)
    batch = [
        record(json.dumps(execution_ended(arn, "SUCCEEDED", machine))),
        record(json.dumps(execution_ended(stale, "FAILED", machine))),
        record(json.dumps(execution_ended(arn, "TIMED_OUT", machine))),
        record(json.dumps(execution_ended(arn, "ABORTED", machine))),  # already handed over
        record(json.dumps({**execution_ended(arn, "FAILED", machine), "detail": {"x": 1}})),
    ]
    assert app.handler({"Records": batch}, context()) == {"batchItemFailures": []}
    assert app.ingestor.counts["escalated"] == 1
    assert app.ingestor.counts["ignored"] == 3
    assert app.ingestor.counts["malformed"] == 1
    handed = store.get(incident.incident_id)
    assert handed is not None and handed.status.value == "needs_operator"
    assert "ended TIMED_OUT" in handed.notes[-1]
    # The lock stays: the node is not given a second recovery while an operator decides.
    assert store.open_incident_for("i-12345678abcdefghi") == handed
    messages = sqs.receive_message(QueueUrl=published, MaxNumberOfMessages=10)["Messages"]
    (escalated,) = [json.loads(m["Body"]) for m in messages]
    assert escalated["detail"]["incident_id"] == incident.incident_id
    assert escalated["detail"]["note"] == handed.notes[-1]
