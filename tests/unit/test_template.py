"""Facts about template.yaml that a reviewer would otherwise check by eye."""

from __future__ import annotations

from typing import Any

from tests.conftest import ROOT, template

from hyperguard.tools.layer_requirements import layer_requirements


def _resources(kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template()["Resources"].items() if v["Type"] == kind}


def test_functions_run_python313_on_arm64_with_the_layer() -> None:
    fn = template()["Globals"]["Function"]
    assert fn["Runtime"] == "python3.13"
    assert fn["Architectures"] == ["arm64"]
    assert fn["Layers"] == [{"Ref": "HyperGuardLayer"}]
    assert (ROOT / ".python-version").read_text().strip() == "3.13"


def test_every_function_has_its_own_least_privilege_policies_and_a_real_handler() -> None:
    functions = _resources("AWS::Serverless::Function")
    assert {"IngestHealthFunction", "RecoveryFunction"} <= set(functions)
    for name, fn in functions.items():
        props = fn["Properties"]
        assert props.get("Policies"), f"{name} has no policies"
        for policy in props["Policies"]:
            assert isinstance(policy, dict), f"{name}: managed policy {policy} is too broad"
        module, _, attr = props["Handler"].rpartition(".")
        source = (ROOT / props["CodeUri"] / f"{module}.py").read_text()
        assert f"def {attr}(" in source


def test_tables_have_pitr_and_encryption() -> None:
    tables = _resources("AWS::DynamoDB::Table")
    assert {"IncidentsTable", "NodesTable", "JobsTable", "TeamsTable", "IdempotencyTable"} <= set(
        tables
    )
    for name, table in tables.items():
        props = table["Properties"]
        assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"], name
        assert props["SSESpecification"]["SSEEnabled"], name
    assert tables["IdempotencyTable"]["Properties"]["TimeToLiveSpecification"] == {
        "AttributeName": "expiration",
        "Enabled": True,
    }


def test_every_health_rule_targets_the_queue_with_retries_and_a_dlq() -> None:
    # aws.states: the recovery backstop (RecoveryEndedRule) rides the same queue.
    health_sources = {
        "aws.sagemaker",
        "aws.ec2",
        "aws.health",
        "hyperguard.node-forwarder",
        "aws.states",
    }
    rules = {
        name: rule
        for name, rule in _resources("AWS::Events::Rule").items()
        if "EventPattern" in rule["Properties"]
        and name not in ("HyperPodClusterChangeRule", "JobStatusRule")
    }
    assert set().union(*(r["Properties"]["EventPattern"]["source"] for r in rules.values())) == (
        health_sources
    )
    patterns = {name: r["Properties"]["EventPattern"] for name, r in rules.items()}
    detail_types = {t for p in patterns.values() for t in p["detail-type"]}
    assert {
        "SageMaker HyperPod Cluster Node Health Event",
        "SageMaker HyperPod Cluster Event",
        "EC2 Spot Instance Interruption Warning",
        "EC2 Instance Rebalance Recommendation",
        "EC2 Instance State-change Notification",
        "EC2 Capacity Reservation Instance Interruption Warning",
        "AWS Health Event",
        "Kubernetes Node Condition Changed",
        "Step Functions Execution Status Change",
    } <= detail_types
    for name, rule in rules.items():
        for target in rule["Properties"]["Targets"]:
            assert target["Arn"] == {"Fn::GetAtt": ["HealthQueue", "Arn"]}, name
            assert target["DeadLetterConfig"]["Arn"] == {"Fn::GetAtt": ["HealthDLQ", "Arn"]}, name
            assert target["RetryPolicy"]["MaximumRetryAttempts"] == 185, name
    assert patterns["AwsHealthEc2Rule"]["detail"] == {"service": ["EC2"]}


def test_job_status_changes_wake_the_scheduler_on_its_fifo_group() -> None:
    rule = _resources("AWS::Events::Rule")["JobStatusRule"]["Properties"]
    assert rule["EventPattern"] == {
        "source": ["hyperguard.node-forwarder"],
        "detail-type": ["Kubernetes Job Status Changed"],
    }
    (target,) = rule["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": ["SchedulerQueue", "Arn"]}
    assert target["SqsParameters"] == {"MessageGroupId": "scheduler"}
    assert target["DeadLetterConfig"]["Arn"] == {"Fn::GetAtt": ["EventsDLQ", "Arn"]}


def test_the_ingest_function_reports_partial_batch_failures_and_the_queue_redrives() -> None:
    mappings = _resources("AWS::Lambda::EventSourceMapping")
    mapping = mappings["IngestHealthQueueMapping"]["Properties"]
    assert mapping["FunctionName"] == {"Ref": "IngestHealthFunction"}
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": ["HealthQueue", "Arn"]}
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    queue = _resources("AWS::SQS::Queue")["HealthQueue"]["Properties"]
    assert queue["RedrivePolicy"]["deadLetterTargetArn"] == {"Fn::GetAtt": ["HealthDLQ", "Arn"]}
    # AWS's advice: visibility timeout at least six times the function timeout.
    assert queue["VisibilityTimeout"] >= 6 * template()["Globals"]["Function"]["Timeout"]


def test_layer_requirements_match_pyproject() -> None:
    assert (ROOT / "shared" / "requirements.txt").read_text() == layer_requirements()


def test_nothing_in_the_template_is_for_the_twin() -> None:
    doc = template()
    assert not {"ClusterBackend", "TimeScale"} & set(doc["Parameters"])
    variables = doc["Globals"]["Function"]["Environment"]["Variables"]
    assert not {"CLUSTER_BACKEND", "TIME_SCALE"} & set(variables)


def test_the_layer_is_built_by_the_shared_makefile_without_the_operator_side() -> None:
    layer = _resources("AWS::Serverless::LayerVersion")["HyperGuardLayer"]
    assert layer["Metadata"] == {"BuildMethod": "makefile", "BuildArchitecture": "arm64"}
    makefile = (ROOT / "shared" / "Makefile").read_text()
    assert "build-HyperGuardLayer:" in makefile
    assert "OPERATOR_SIDE := hyperguard/cli hyperguard/twin hyperguard/tools" in makefile


def test_schedules_reach_their_functions_through_queues_with_retries_and_a_dlq() -> None:
    rules = {
        name: rule["Properties"]
        for name, rule in _resources("AWS::Events::Rule").items()
        if "ScheduleExpression" in rule["Properties"]
    }
    assert {r["ScheduleExpression"] for r in rules.values()} == {
        "rate(1 minute)",
        "rate(5 minutes)",
    }
    queues = _resources("AWS::SQS::Queue")
    for name, rule in rules.items():
        (target,) = rule["Targets"]
        queue = target["Arn"]["Fn::GetAtt"][0]
        assert queue in queues, name
        assert target["DeadLetterConfig"]["Arn"] == {"Fn::GetAtt": ["EventsDLQ", "Arn"]}, name
        assert target["RetryPolicy"]["MaximumRetryAttempts"] == 185, name
        assert "RedrivePolicy" in queues[queue]["Properties"], name
    # EventBridge delivers to a FIFO queue only with content-based deduplication.
    scheduler_queue = queues["SchedulerQueue"]["Properties"]
    assert scheduler_queue["FifoQueue"] and scheduler_queue["ContentBasedDeduplication"]


def test_every_function_has_an_eks_access_entry_and_the_catalogue_permission() -> None:
    entries = _resources("AWS::EKS::AccessEntry")
    functions = _resources("AWS::Serverless::Function")
    principals = {e["Properties"]["PrincipalArn"]["Fn::GetAtt"][0] for e in entries.values()}
    assert principals == {f"{name}Role" for name in functions}
    assert all(e["Properties"]["KubernetesGroups"] == ["hyperguard"] for e in entries.values())
    assert all(e["Condition"] == "EksAccessEntries" for e in entries.values())
    rbac = (ROOT / "deploy" / "kubernetes" / "hyperguard-rbac.yaml").read_text()
    assert "name: hyperguard" in rbac and "pods/eviction" in rbac
    for name, fn in functions.items():
        actions = [
            s["Action"]
            for p in fn["Properties"]["Policies"]
            if "Statement" in p
            for s in p["Statement"]
        ]
        assert "ec2:DescribeInstanceTypes" in actions, name
