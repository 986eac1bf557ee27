"""The demo scenario on the twin: real samples and a duplicate storm, exact outcomes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.conftest import EVENTS

from hyperguard.store import IncidentStore
from hyperguard.twin.demo import REDELIVERIES, REPORTS, run_scenario
from hyperguard.twin.runtime import Twin


@pytest.fixture(scope="module")
def published_queue(twin: Twin) -> str:
    """A subscriber to HyperGuard's own events on its bus."""
    assert twin.deployment is not None
    sqs, events = twin.client("sqs"), twin.client("events")
    url = sqs.create_queue(QueueName="hyperguard-events-subscriber")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    bus = twin.deployment.outputs["EventBusName"]
    events.put_rule(
        Name="subscriber", EventBusName=bus, EventPattern=json.dumps({"source": ["hyperguard"]})
    )
    events.put_targets(Rule="subscriber", EventBusName=bus, Targets=[{"Id": "q", "Arn": arn}])
    return url


@pytest.fixture(scope="module")
def result(twin: Twin, published_queue: str) -> dict[str, Any]:
    return run_scenario(twin, EVENTS, say=lambda _line: None)


def test_the_scenario_settles_with_no_errors_and_an_empty_dlq(result: dict[str, Any]) -> None:
    assert result["settled"]
    assert result["dlq_depth"] == 0
    assert result["function_errors"] == {}


def test_each_event_gets_exactly_the_outcome_its_facts_call_for(result: dict[str, Any]) -> None:
    well_formed = 8
    assert result["signals"] == {
        "opened": 3,  # GPU fault (the health agent's event), spot interruption, retirement
        # the fault reported again, AWS Health on the faulty node, and the re-reports
        "merged": 2 + REPORTS,
        "notified": 1,  # HyperPod's failed replacement, attached to the node's incident
        "duplicate": well_formed * REDELIVERIES,
        "ignored": 2,  # state change to pending, rebalance recommendation
        "foreign": 1,  # the sample as published names another cluster
        "malformed": 1,
    }
    agent = 1  # the simulated health agent's own report of the fault
    assert result["deliveries"] == agent + well_formed + 1 + REPORTS + well_formed * REDELIVERIES


def test_one_incident_and_one_execution_per_faulty_node(twin: Twin, result: dict[str, Any]) -> None:
    incidents = {i["kind"]: i for i in result["incidents"]}
    assert set(incidents) == {
        "hyperpod_node_health",
        "spot_interruption",
        "health_scheduled_change",
    }
    gpu = incidents["hyperpod_node_health"]
    assert gpu["signals"] == 4 + REPORTS and gpu["sources"] == ["aws_health", "hyperpod"]
    assert incidents["spot_interruption"]["repair"] == "drain"
    assert all(
        i["execution"] == "SUCCEEDED" and i["status"] == "resolved" for i in result["incidents"]
    )
    assert {k: i["resolution"] for k, i in incidents.items()} == {
        "hyperpod_node_health": "replaced",
        "spot_interruption": "drained",  # the instance goes away; AWS replaces spot capacity
        "health_scheduled_change": "replaced",  # its start time has passed: act now
    }
    # Each replaced node has its own replacement (HyperPod's NodeLogicalId names it).
    replacements = [i["replacement"] for i in result["incidents"] if i["replacement"]]
    assert len(replacements) == len(set(replacements)) == 2
    # The faulty node's job moved to a hot spare, from its latest complete checkpoint.
    (job,) = gpu["jobs"]
    assert job["strategy"] == "hot_spare" and job["checkpoint_step"] >= 1200
    (moved,) = [j for j in result["jobs"].values() if j["job_id"] == job["job_id"]]
    assert moved["run"].endswith("-run-1")  # a new run, on the spare
    assert moved["step"] >= job["checkpoint_step"]  # resumed, not started over
    assert result["executions"] == {"SUCCEEDED": 3}
    assert twin.deployment is not None
    sfn = twin.client("stepfunctions")
    names = {
        e["name"]
        for e in sfn.list_executions(
            stateMachineArn=twin.deployment.outputs["NodeRecoveryStateMachineArn"]
        )["executions"]
    }
    assert names == {i["incident_id"] for i in result["incidents"]}


def test_detection_is_timed_and_incident_opened_is_published(
    twin: Twin, result: dict[str, Any], published_queue: str
) -> None:
    assert twin.deployment is not None
    outputs = twin.deployment.outputs
    store = IncidentStore(outputs["IncidentsTableName"], outputs["NodesTableName"])
    for incident in store.recent():
        assert "signal_to_detected_s" in incident.timings
    sqs = twin.client("sqs")
    published = []
    while batch := sqs.receive_message(QueueUrl=published_queue, MaxNumberOfMessages=10).get(
        "Messages"
    ):
        published += [json.loads(m["Body"]) for m in batch]
        for m in batch:
            sqs.delete_message(QueueUrl=published_queue, ReceiptHandle=m["ReceiptHandle"])
    opened = [e for e in published if e["detail-type"] == "IncidentOpened"]
    assert sorted(e["detail"]["incident_id"] for e in opened) == sorted(
        i["incident_id"] for i in result["incidents"]
    )


def test_status_names_every_emulator_gap_it_covers(twin: Twin, result: dict[str, Any]) -> None:
    status = twin.status()
    assert set(status["not_created"].values()) == {
        "AWS::SQS::QueuePolicy",
        "AWS::CloudWatch::Alarm",
        "AWS::ApiGateway::RestApi",
        "AWS::ApiGateway::Deployment",
        "AWS::ApiGateway::Stage",
        "AWS::ApiGateway::Account",  # API Gateway's logging role, set once per account
        "AWS::Lambda::Permission",  # the right to invoke, left out with the callers
        "AWS::EKS::AccessEntry",
    }
    covered = {g["type"] for g in status["emulator_gaps"]}
    assert {
        "AWS::Lambda::Function",
        "AWS::Lambda::EventSourceMapping",
        "AWS::StepFunctions::StateMachine",
        "AWS::SQS::QueuePolicy",
        "AWS::CloudWatch::Alarm",
        "AWS::ApiGateway::RestApi",
        "AWS::EKS::AccessEntry",
        "AWS::Events::Rule",
        "SageMaker HyperPod API",
        "EKS and Kubernetes API",
    } <= covered
    assert all(
        g["created"] is False
        for g in status["emulator_gaps"]
        if g["type"] in status["not_created"].values()
    )
