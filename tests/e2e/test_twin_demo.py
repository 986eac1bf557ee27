"""The demo scenario on the twin: real samples and a duplicate storm, exact outcomes."""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import EVENTS
from tests.deadlines import loaded

from hyperguard.store import IncidentStore, NodeStore
from hyperguard_twin.browser import chromium, rendered_charts
from hyperguard_twin.demo import REDELIVERIES, REPORTS, report_data, run_scenario
from hyperguard_twin.plane.processes import GO_GC_PERCENT
from hyperguard_twin.report import write_report
from hyperguard_twin.runtime import Twin


@pytest.fixture(scope="module")
def published_queue(twin: Twin) -> str:
    """A subscriber to HyperGuard's own events on its bus."""
    assert twin.deployment is not None
    sqs, events = twin.client("sqs"), twin.client("events")
    url: str = sqs.create_queue(QueueName="hyperguard-events-subscriber")["QueueUrl"]
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
def story() -> list[str]:
    return []


@pytest.fixture(scope="module")
def result(twin: Twin, published_queue: str, story: list[str]) -> dict[str, Any]:
    return run_scenario(twin, EVENTS, say=story.append)


def test_the_story_follows_each_recovery_state_by_state(
    result: dict[str, Any], story: list[str]
) -> None:
    for incident in result["incidents"]:
        node = incident["instance_id"]
        told = [line.split(node, 1)[1].split()[0] for line in story if f"  {node} " in line]
        assert told[0] == "incident" and told[-1] == "recovery"
        path = [name for name in told[1:-1] if name != "WaitForRepair"]
        expected = ["Diagnose", "Cordon", "GuardBlastRadius", "ProtectJobs", "Drain"]
        if incident["repair"] == "drain":
            expected += ["ResumeJobs", "CloseIncident"]
        else:
            expected += ["Repair", "ReturnToService", "ResumeJobs", "CloseIncident"]
        assert path == expected
        # the health-polling loop is announced while it runs, summed up once when it ends
        polls = [line for line in story if f"  {node} " in line and "WaitForRepair" in line]
        if incident["repair"] == "drain":
            assert polls == []
        else:
            assert 1 <= len(polls) <= 2 and "health checks over" in polls[-1]


def test_time_to_resolution_is_a_metric_per_pool_and_outcome(
    twin: Twin, result: dict[str, Any]
) -> None:
    metrics = twin.client("cloudwatch").list_metrics(
        Namespace="HyperGuard", MetricName="IncidentResolvedSeconds"
    )["Metrics"]
    seen = {tuple(sorted((d["Name"], d["Value"]) for d in m["Dimensions"])) for m in metrics}
    assert twin.deployment is not None
    nodes = NodeStore(twin.deployment.outputs["NodesTableName"])
    pools: dict[str, str] = {}
    for i in result["incidents"]:
        node = nodes.get(i["instance_id"])
        assert node is not None, i
        pools[i["instance_id"]] = node.pool
    assert seen == {
        (("outcome", i["resolution"]), ("pool", pools[i["instance_id"]]), ("service", "hyperguard"))
        for i in result["incidents"]
    }
    assert {dict(s)["pool"] for s in seen} == {"workers", "gpu-burst"}


def test_the_summary_table_gives_each_event_its_outcome(result: dict[str, Any]) -> None:
    outcomes = {row["event"]: row["outcome"] for row in result["summary"]}
    assert outcomes["GPU fault (simulated health agent)"] == "opened incident: resolved, replaced"
    assert outcomes["same fault, reported again"] == "merged into incident: resolved, replaced"
    assert outcomes["spot interruption warning"] == "opened incident: resolved, drained"
    assert outcomes["rebalance recommendation"] == "counted, no action"
    assert outcomes["foreign cluster (sample as published)"].startswith("another cluster")
    assert outcomes["malformed (constructed)"] == "1 counted as malformed, acknowledged"
    assert outcomes[f"8 deliveries, each redelivered x{REDELIVERIES}"] == (
        f"{8 * REDELIVERIES} counted as duplicates, dropped"
    )


def test_the_report_draws_every_recovery_and_renders_in_chromium(
    result: dict[str, Any], tmp_path: Path
) -> None:
    recoveries = result["recoveries"]
    assert len(recoveries) == len(result["incidents"]) == 3
    for recovery in recoveries:
        names = [p["name"] for p in recovery["phases"]]
        assert names[0] == "detect" and names[-1] == "close"
        assert all(p["start"] <= p["end"] for p in recovery["phases"])
    teams = result["gpu_use"]["teams"]
    assert set(teams) == {"nlp", "vision"} and max(teams["nlp"]) == 8 * (4 + 2)
    assert result["gpu_use"]["capacity"] == 8 * 16  # the twin's 16 ml.p5.48xlarge
    # Each job's outcome: a job a recovery stopped says so, and resumed from a step it had
    # reached, never beyond.
    outcomes = {row["job"]: row for row in result["job_outcomes"]}
    assert set(outcomes) == set(result["jobs"])
    stopped = {j["job_id"] for incident in result["incidents"] for j in incident["jobs"]}
    assert stopped, "the demo's recoveries took jobs off their nodes"
    for name, row in outcomes.items():
        if result["jobs"][name]["job_id"] in stopped:
            assert row["interruptions"] >= 1 and row["seconds_down"] > 0, row
        assert all(step <= row["step"] for step in row["resumed_from"]), row
    report = write_report(tmp_path / "demo.html", report_data(result))
    if chromium() is None and not os.environ.get("CI"):
        pytest.skip("Chromium is not installed (make browser)")
    rendered = rendered_charts(report, timeout_s=loaded(60))
    assert set(rendered) == {
        "chart-recoveries",
        "chart-gpu-use",
        "chart-executions",
        "chart-tradeoff",
    }
    assert all(marks > 0 for marks in rendered.values()), rendered


def test_the_scenario_settles_with_no_errors_and_an_empty_dlq(result: dict[str, Any]) -> None:
    assert result["settled"]
    assert result["dlq_depth"] == 0
    assert result["function_errors"] == {}


def test_each_event_gets_exactly_the_outcome_its_facts_call_for(result: dict[str, Any]) -> None:
    well_formed = 8
    signals = dict(result["signals"])
    # The forwarder's node conditions (D132): the faulty node's AcceleratedHardwareReady=False,
    # and a replaced node's kubelet going NotReady while its instance shuts down, when the
    # forwarder sees that before the node is gone (two nodes are replaced).
    conditions = signals.pop("merged") - (2 + REPORTS)
    assert 1 <= conditions <= 3, result["signals"]
    assert signals == {
        "opened": 3,  # GPU fault (the health agent's event), spot interruption, retirement
        # the fault reported again, AWS Health on the faulty node, and the re-reports
        "notified": 1,  # HyperPod's failed replacement, attached to the node's incident
        "duplicate": well_formed * REDELIVERIES,
        "ignored": 2,  # state change to pending, rebalance recommendation
        "foreign": 1,  # the sample as published names another cluster
        "malformed": 1,
    }
    agent = 1  # the simulated health agent's own report of the fault
    # Every message the ingest function took: the forwarder's condition events too.
    assert result["deliveries"] == (
        agent + well_formed + 1 + REPORTS + well_formed * REDELIVERIES + conditions
    )


def test_one_incident_and_one_execution_per_faulty_node(twin: Twin, result: dict[str, Any]) -> None:
    incidents = {i["kind"]: i for i in result["incidents"]}
    assert set(incidents) == {
        "hyperpod_node_health",
        "spot_interruption",
        "health_scheduled_change",
    }
    gpu = incidents["hyperpod_node_health"]
    # HyperPod's and AWS Health's reports, and the node's conditions the forwarder sends
    # (AcceleratedHardwareReady=False; NotReady while it is replaced, when seen in time).
    assert 4 + REPORTS + 1 <= gpu["signals"] <= 4 + REPORTS + 2
    assert gpu["sources"] == ["aws_health", "hyperpod", "kubernetes"]
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
        "AWS::EKS::PodIdentityAssociation",  # the forwarder's credentials on EKS
    }
    # The access entries are created through the emulator's (extended) EKS API (D130).
    assert {r["type"] for r in status["resources"].values()} >= {"AWS::EKS::AccessEntry"}
    covered = {g["type"] for g in status["emulator_gaps"]}
    assert {
        "AWS::Lambda::Function",
        "AWS::Lambda::EventSourceMapping",
        "AWS::StepFunctions::StateMachine",
        "AWS::SQS::QueuePolicy",
        "AWS::CloudWatch::Alarm",
        "AWS::ApiGateway::RestApi",
        "AWS::EKS::AccessEntry",
        "AWS::EKS::PodIdentityAssociation",
        "AWS::IAM::Role",  # IAM enforced for the stack's roles (hyperguard_twin.iam)
        "AWS::Events::Rule",
        "SageMaker HyperPod API",
        "EKS and Kubernetes API",
    } <= covered
    assert all(
        g["created"] is False
        for g in status["emulator_gaps"]
        if g["type"] in status["not_created"].values()
    )


def test_the_twin_spends_on_its_own_processes_as_it_says(twin: Twin) -> None:
    """Every Go component of the plane runs with the twin's collector setting, and what the
    twin's start made is left out of the process's collections (D194)."""
    assert twin.plane is not None
    for process in twin.plane.processes.by_name.values():
        environ = dict(
            item.split("=", 1)
            for item in Path(f"/proc/{process.popen.pid}/environ").read_text().split("\0")
            if "=" in item
        )
        assert environ["GOGC"] == str(GO_GC_PERCENT), process.name
    assert gc.get_freeze_count() > 100_000
