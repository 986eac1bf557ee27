"""NodeRecovery end to end on the twin: the real state machine on moto's interpreter,
the real handlers, the simulated cluster on x60 time. Nine HyperPod nodes, all busy, so a
job waits for its node's repair or replacement (no hot spare)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests.conftest import ROOT, load_event
from tests.e2e.conftest import free_port

from hyperguard.messaging import RecoveryWorkflows
from hyperguard.models import IncidentStatus, JobStatus, NodeStatus
from hyperguard.recovery.operator import RecoveryOperator
from hyperguard.store import IncidentStore, JobStore, NodeStore
from hyperguard.twin.inject import put_entry, retarget
from hyperguard.twin.runtime import Twin, TwinConfig

WALL_LIMIT_S = 120  # the bound for a full recovery, replacement included


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    running = Twin(TwinConfig(root=ROOT, port=free_port(), api_port=free_port(), hyperpod_nodes=9))
    running.up()
    yield running
    running.down()


class Service:
    def __init__(self, twin: Twin) -> None:
        assert twin.deployment is not None
        out = twin.deployment.outputs
        self.twin = twin
        self.out = out
        self.incidents = IncidentStore(out["IncidentsTableName"], out["NodesTableName"])
        self.nodes = NodeStore(out["NodesTableName"])
        self.jobs = JobStore(out["JobsTableName"])
        self.sfn = twin.client("stepfunctions")
        self.operator = RecoveryOperator(
            self.incidents, self.nodes, RecoveryWorkflows(out["NodeRecoveryStateMachineArn"])
        )

    def job(self, job_id: str) -> Any:
        return next(j for j in self.twin.cluster.jobs() if j.job_id == job_id)

    def incident_for(self, instance_id: str, timeout_s: float = 20) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for incident in self.incidents.recent():
                if incident.instance_id == instance_id and incident.execution_arn:
                    return incident
            time.sleep(0.2)
        raise AssertionError(f"no incident for {instance_id}")

    def finish(self, execution_arn: str, timeout_s: float = WALL_LIMIT_S) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            execution = self.sfn.describe_execution(executionArn=execution_arn)
            if execution["status"] != "RUNNING":
                return dict(execution)
            time.sleep(0.5)
        raise AssertionError(f"{execution_arn} still running after {timeout_s}s")

    def states(self, execution_arn: str) -> list[str]:
        events = self.sfn.get_execution_history(executionArn=execution_arn, maxResults=1000)[
            "events"
        ]
        return [
            e["stateEnteredEventDetails"]["name"] for e in events if "stateEnteredEventDetails" in e
        ]

    def wait_for_status(
        self, incident_id: str, status: IncidentStatus, timeout_s: float = 30
    ) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            incident = self.incidents.get(incident_id)
            if incident and incident.status is status:
                return incident
            time.sleep(0.25)
        raise AssertionError(f"{incident_id} never became {status}")


@pytest.fixture(scope="module")
def service(twin: Twin) -> Service:
    time.sleep(6)  # let the jobs train and checkpoint a little (x60: ~12 steps)
    return Service(twin)


def test_a_gpu_fault_ends_with_a_replaced_node_and_the_job_resumed_from_its_checkpoint(
    service: Service,
) -> None:
    job = service.job("llama3-70b-pretrain")
    faulty = job.nodes[1]
    started = time.monotonic()
    service.twin.fault(faulty)
    incident = service.incident_for(faulty)
    execution = service.finish(incident.execution_arn)
    wall_s = time.monotonic() - started
    assert execution["status"] == "SUCCEEDED", execution
    assert wall_s < WALL_LIMIT_S
    states = service.states(incident.execution_arn)
    assert states[:9] == [
        "Diagnose",
        "RouteDiagnosis",
        "GuardBlastRadius",
        "RouteGuard",
        "Cordon",
        "ProtectJobs",
        "Drain",
        "RouteRepair",
        "Repair",
    ]
    assert states[-3:] == ["ReturnToService", "ResumeJobs", "CloseIncident"]
    assert set(states[9:-3]) == {"WaitForRepair", "CheckHealth", "RouteHealth"}
    closed = service.incidents.get(incident.incident_id)
    assert closed is not None and closed.status is IncidentStatus.RESOLVED
    assert closed.resolution == "replaced" and closed.replacement_instance_id
    plan = closed.jobs[0]
    assert (plan.job_id, plan.strategy) == ("llama3-70b-pretrain", "wait_for_repair")
    assert plan.checkpoint_step is not None and plan.checkpoint_step > 1200

    with pytest.raises(Exception, match="not in the cluster"):
        service.twin.cluster.node_status(faulty)
    replacement = closed.replacement_instance_id
    time.sleep(3)  # restart overhead (60 s virtual) and a few steps
    progress = service.twin.cluster.progress()["llama3-70b-pretrain"]
    assert replacement in progress.job.nodes and faulty not in progress.job.nodes
    assert progress.step > plan.checkpoint_step  # it continued; it did not start over
    stored = service.jobs.get("llama3-70b-pretrain")
    assert stored is not None and stored.restart_count == 1 and stored.status is JobStatus.RUNNING
    retired = service.nodes.get(faulty)
    assert retired is not None and retired.status is NodeStatus.NOT_FOUND
    assert set(closed.timings) >= {
        "signal_to_detected_s",
        "signal_to_cordoned_s",
        "signal_to_repair_requested_s",
        "signal_to_healthy_s",
        "signal_to_resumed_s",
    }


def test_one_fault_from_three_sources_each_delivered_twice_is_one_recovery(
    service: Service,
) -> None:
    twin = service.twin
    faulty = service.job("vit-h14-pretrain").nodes[0]
    twin.cluster.inject_fault(faulty)
    hyperpod = retarget(
        load_event("hyperpod-node-health-unhealthy"), faulty, twin.config.cluster_name
    )
    health = retarget(load_event("aws-health-ec2-retirement"), faulty)
    # Constructed: the EC2 state-change sample, for a node that is stopping.
    stopping = retarget(load_event("ec2-instance-state-change"), faulty)
    stopping["detail"]["state"] = "stopping"
    events = twin.client("events")
    sqs = twin.client("sqs")
    for event in (hyperpod, health, stopping):
        entry = events.put_events(Entries=[put_entry(event, service.out["EventBusName"])])[
            "Entries"
        ][0]
        # the same delivery again, as EventBridge's at-least-once may
        again = {**event, "id": entry["EventId"], "account": twin.account, "region": twin.region}
        sqs.send_message(QueueUrl=service.out["HealthQueueUrl"], MessageBody=json.dumps(again))
    incident = service.incident_for(faulty)
    assert service.finish(incident.execution_arn)["status"] == "SUCCEEDED"
    related = [i for i in service.incidents.recent() if i.instance_id == faulty]
    assert len(related) == 1
    assert related[0].signal_count == 3 and related[0].sources == ["aws_health", "ec2", "hyperpod"]
    executions = service.sfn.list_executions(
        stateMachineArn=service.out["NodeRecoveryStateMachineArn"]
    )
    mine = [e for e in executions["executions"] if e["name"].startswith(faulty)]
    assert len(mine) == 1
    replacements = [
        n for n in twin.cluster.list_nodes() if twin.cluster.replacement_of(faulty) == n.instance_id
    ]
    assert len(replacements) == 1


def test_throttling_and_refused_repairs_are_retried_and_the_recovery_still_succeeds(
    service: Service,
) -> None:
    twin = service.twin
    faulty = service.job("vit-h14-pretrain").nodes[1]
    twin.executor.inject("RecoveryFunction", "throttle", 2)
    twin.executor.inject("RecoveryFunction", "service", 1)
    twin.cluster.fail_next_repairs("InstanceIdInUse", 1)
    twin.fault(faulty)
    incident = service.incident_for(faulty)
    execution = service.finish(incident.execution_arn)
    assert execution["status"] == "SUCCEEDED"
    history = service.sfn.get_execution_history(
        executionArn=incident.execution_arn, maxResults=1000
    )
    errors = [
        e["taskFailedEventDetails"]["error"] for e in history["events"] if e["type"] == "TaskFailed"
    ]
    assert errors.count("Lambda.TooManyRequestsException") == 2
    assert "Lambda.ServiceException" in errors and "RepairRetryableError" in errors


def test_a_replacement_that_never_gets_healthy_escalates_and_leaves_the_node_cordoned(
    service: Service,
) -> None:
    twin = service.twin
    faulty = service.job("vit-h14-pretrain").nodes[2]
    twin.cluster.replacement_never_healthy(faulty)
    twin.fault(faulty)
    incident = service.incident_for(faulty)
    execution = service.finish(incident.execution_arn)
    assert execution["status"] == "FAILED" and execution.get("error") == "RecoveryEscalated"
    escalated = service.incidents.get(incident.incident_id)
    assert escalated is not None and escalated.status is IncidentStatus.NEEDS_OPERATOR
    assert "RecoveryTimeoutError" in escalated.notes[-1]
    assert escalated.jobs and escalated.jobs[0].checkpoint_step is not None  # nothing lost


def test_an_operator_veto_pauses_the_repair_until_approval(service: Service) -> None:
    twin = service.twin
    faulty = service.job("mistral-7b-sft").nodes[0]
    service.operator.veto_node(faulty, "firmware investigation")
    twin.fault(faulty)
    incident = service.incident_for(faulty)
    paused = service.wait_for_status(incident.incident_id, IncidentStatus.AWAITING_APPROVAL)
    assert paused.task_token
    assert twin.cluster.node_status(faulty).schedulable  # nothing touched while paused
    service.operator.approve(incident.incident_id, "ops@example.com")
    assert service.finish(incident.execution_arn)["status"] == "SUCCEEDED"
    assert "AwaitOperatorApproval" in service.states(incident.execution_arn)


def test_a_function_error_escalates_and_a_redrive_completes_the_recovery(service: Service) -> None:
    twin = service.twin
    faulty = service.job("llama3-70b-pretrain").nodes[0]
    twin.executor.inject("RecoveryFunction", "error", 1)  # the function itself fails once
    twin.fault(faulty)
    incident = service.incident_for(faulty)
    failed = service.finish(incident.execution_arn)
    assert failed["status"] == "FAILED"
    escalated = service.incidents.get(incident.incident_id)
    assert escalated is not None and escalated.status is IncidentStatus.NEEDS_OPERATOR
    assert "InjectedFault" in escalated.notes[-1]  # function errors are not retried blindly

    redriven = service.operator.redrive(incident.incident_id)
    assert redriven["execution_arn"].endswith(f"{incident.incident_id}-r1")
    # With another escalated node still cordoned in this 9-node pool (an earlier test's),
    # two unhealthy nodes exceed the 20 % brake: the re-drive waits for approval.
    deadline = time.monotonic() + WALL_LIMIT_S
    while time.monotonic() < deadline:
        current = service.incidents.get(incident.incident_id)
        assert current is not None
        if current.status is IncidentStatus.AWAITING_APPROVAL:
            service.operator.approve(incident.incident_id, "ops@example.com")
        status = service.sfn.describe_execution(executionArn=redriven["execution_arn"])["status"]
        if status != "RUNNING":
            break
        time.sleep(0.5)
    assert status == "SUCCEEDED"
    closed = service.incidents.get(incident.incident_id)
    assert closed is not None and closed.status is IncidentStatus.RESOLVED
    assert closed.resolution == "replaced" and closed.redrives == 1
