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
    rules = _resources("AWS::Events::Rule")
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
    } <= detail_types
    for name, rule in rules.items():
        for target in rule["Properties"]["Targets"]:
            assert target["Arn"] == {"Fn::GetAtt": ["HealthQueue", "Arn"]}, name
            assert target["DeadLetterConfig"]["Arn"] == {"Fn::GetAtt": ["HealthDLQ", "Arn"]}, name
            assert target["RetryPolicy"]["MaximumRetryAttempts"] == 185, name
    assert patterns["AwsHealthEc2Rule"]["detail"] == {"service": ["EC2"]}


def test_the_ingest_function_reports_partial_batch_failures_and_the_queue_redrives() -> None:
    fn = _resources("AWS::Serverless::Function")["IngestHealthFunction"]["Properties"]
    sqs = fn["Events"]["HealthQueue"]["Properties"]
    assert sqs["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    queue = _resources("AWS::SQS::Queue")["HealthQueue"]["Properties"]
    assert queue["RedrivePolicy"]["deadLetterTargetArn"] == {"Fn::GetAtt": ["HealthDLQ", "Arn"]}
    # AWS's advice: visibility timeout at least six times the function timeout.
    assert queue["VisibilityTimeout"] >= 6 * template()["Globals"]["Function"]["Timeout"]


def test_layer_requirements_match_pyproject() -> None:
    assert (ROOT / "shared" / "requirements.txt").read_text() == layer_requirements()
