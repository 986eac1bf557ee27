"""Facts about template.yaml that a reviewer would otherwise check by eye."""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
from pathlib import Path
from typing import Any

from tests.conftest import ROOT, template

from hyperguard.tools.layer_requirements import canonical, layer_requirements, read_lock


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
        and name not in ("HyperPodClusterChangeRule", "JobStatusRule", "WebhookRule")
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
        "detail-type": ["Kubernetes Job Status Changed", "Kubernetes Workload Held"],
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


def test_functions_behind_the_api_end_before_api_gateways_integration_timeout() -> None:
    """API Gateway (REST) gives an integration at most 29 s (its default and, without a
    quota increase, its limit) and answers 504 then, while the function runs on and may still
    write. A function behind the API must time out first, with room for a cold start's init,
    which API Gateway counts and the function's timeout does not (D212)."""
    functions = _resources("AWS::Serverless::Function")
    default = template()["Globals"]["Function"]["Timeout"]
    behind_api = {
        name: function["Properties"].get("Timeout", default)
        for name, function in functions.items()
        if any(e["Type"] == "Api" for e in function["Properties"].get("Events", {}).values())
    }
    assert behind_api == {"ApiFunction": behind_api["ApiFunction"]}
    assert all(timeout <= 25 for timeout in behind_api.values()), behind_api


def test_layer_requirements_match_pyproject_and_the_lock() -> None:
    assert (ROOT / "shared" / "requirements.txt").read_text() == layer_requirements()


def test_the_lock_holds_every_dependency_pyproject_names() -> None:
    """One lock for the tests, the twin and the layer: `make lock` after a dependency change."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [
        *project["dependencies"],
        *(d for ds in project["optional-dependencies"].values() for d in ds),
    ]
    locked = read_lock((ROOT / "requirements" / "dev.lock").read_text())
    wanted = {canonical(re.split(r"[\[<>=~!; ]", n, maxsplit=1)[0]) for n in names}
    assert wanted - {"hyperguard"} <= set(locked)


def test_the_layer_takes_what_its_packages_require_from_the_lock(tmp_path: Path) -> None:
    lock = tmp_path / "dev.lock"
    lock.write_text(
        "a==1\n    # via hyperguard (pyproject.toml)\nb==2 ; sys_platform != 'win32'\n"
        "    # via\n    #   a\n    #   moto\nc==3\n    # via moto\nd==4\n    # via b\n"
    )
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\ndependencies = ["a[extra]>=1"]\n')
    lines = layer_requirements(pyproject, lock).splitlines()[1:]
    # b because a needs it, d because b does; c only moto (a test dependency) needs
    assert lines == ["a==1", "b==2 ; sys_platform != 'win32'", "d==4"]


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
    assert "OPERATOR_SIDE := hyperguard/cli hyperguard/tools" in makefile
    # the twin is not in the library the layer is built from at all (twin/, D158)
    assert not (ROOT / "shared" / "hyperguard" / "twin").exists()


def _packages(project: Path) -> list[str]:
    """The packages a project's wheel holds, found as setuptools' `packages.find` finds
    them: folders with an __init__.py under `where`, kept when a name matches `include`."""
    find = tomllib.loads((project / "pyproject.toml").read_text())["tool"]["setuptools"]
    where = project / find["packages"]["find"]["where"][0]
    names = [".".join(i.parent.relative_to(where).parts) for i in where.rglob("__init__.py")]
    include = find["packages"]["find"]["include"]
    return sorted(n for n in names if any(fnmatch.fnmatchcase(n, pattern) for pattern in include))


def test_the_product_wheel_holds_no_twin_module_and_the_twin_is_its_own() -> None:
    product = _packages(ROOT)
    assert {"hyperguard", "hyperguard.cli", "hyperguard.governance"} <= set(product)
    assert [p for p in product if "twin" in p] == []
    twin = _packages(ROOT / "twin")
    assert {"hyperguard_twin", "hyperguard_twin.cloud", "hyperguard_twin.plane"} <= set(twin)
    assert all(p.startswith("hyperguard_twin") for p in twin)
    project = tomllib.loads((ROOT / "twin" / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["hyperguard.cli"] == {
        "twin": "hyperguard_twin.commands:add_parsers"
    }


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
    # each in its own group (tests/unit/test_kubernetes_rbac.py checks what each may do)
    groups = [g for e in entries.values() for g in e["Properties"]["KubernetesGroups"]]
    assert len(set(groups)) == len(entries) and all(g.startswith("hyperguard-") for g in groups)
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


# ---- observability --------------------------------------------------------------------
_METRIC_CALL = re.compile(r'(?:add_metric|single_metric)\(\s*name=(f?)"([^"]+)"')


def _metric_families() -> dict[str, set[str]]:
    """The metrics named from a variable: prefix → the values that variable takes."""
    from hyperguard.governance.service import PassResult
    from hyperguard.ingestion import Outcome
    from hyperguard.recovery.steps import STEPS
    from hyperguard.scaling.steps import STEPS as BURST_STEPS

    steps_source = (ROOT / "shared" / "hyperguard" / "recovery" / "steps.py").read_text()
    milestones = re.findall(r'self\._mark\(incident, "(\w+)"\)', steps_source)
    return {
        "Signals_": {o.value for o in Outcome},
        "Scheduler_": set(PassResult().counts()),
        "RecoveryStep_": set(STEPS),
        "BurstStep_": set(BURST_STEPS),
        "Incident_": {f"signal_to_{m}_s" for m in milestones},
    }


def _metric_calls() -> list[tuple[bool, str]]:
    sources = [*(ROOT / "shared" / "hyperguard").rglob("*.py"), *(ROOT / "functions").rglob("*.py")]
    return [
        (bool(f), name) for path in sources for f, name in _METRIC_CALL.findall(path.read_text())
    ]


def emitted_metrics() -> set[str]:
    """Every EMF metric name the code can emit, read from its add_metric and single_metric
    calls."""
    families = _metric_families()
    calls = _metric_calls()
    prefixes = {name.partition("{")[0] for is_f, name in calls if is_f}
    assert prefixes == set(families), "a metric family is missing from _metric_families"
    return {name for is_f, name in calls if not is_f} | {
        prefix + suffix for prefix, suffixes in families.items() for suffix in suffixes
    }


def _alarms() -> dict[str, dict[str, Any]]:
    return {k: v["Properties"] for k, v in _resources("AWS::CloudWatch::Alarm").items()}


def _alarm_metrics(alarm: dict[str, Any]) -> list[dict[str, Any]]:
    if "MetricName" in alarm:
        return [alarm]
    return [m["MetricStat"]["Metric"] for m in alarm["Metrics"] if "MetricStat" in m]


def _dashboard_body() -> dict[str, Any]:
    """The dashboard's JSON, with every ${...} replaced by a stand-in value."""
    doc = template()
    (dashboard,) = _resources("AWS::CloudWatch::Dashboard").values()
    body = dashboard["Properties"]["DashboardBody"]["Fn::Sub"]
    known = set(doc["Resources"]) | set(doc["Parameters"]) | {"AWS::Region"}
    for ref in re.findall(r"\$\{([^}]+)\}", body):
        assert ref.split(".")[0] in known, f"dashboard refers to unknown {ref}"
    numbers = {p for p, v in doc["Parameters"].items() if v["Type"] == "Number"}
    body = re.sub(r"\$\{([^}]+)\}", lambda m: "1" if m[1] in numbers else f"stand-in-{m[1]}", body)
    return dict(json.loads(body))


def _single_metric_dimensions() -> dict[str, set[str]]:
    """A single_metric's name → the dimensions the code adds to it (read from the source:
    the add_dimension calls in its `with` block)."""
    found: dict[str, set[str]] = {}
    block = re.compile(
        r'single_metric\(\s*name="(\w+)"(?s:.*?)\) as metric:\n'
        r"((?:[ \t]+metric\.add_dimension\([^\n]*\n)+)"
    )
    for path in (ROOT / "shared" / "hyperguard").rglob("*.py"):
        for name, body in block.findall(path.read_text()):
            found.setdefault(name, set()).update(re.findall(r'add_dimension\(name="(\w+)"', body))
    return found


SINGLE_METRIC_DIMENSIONS = _single_metric_dimensions()


def _dashboard_metrics() -> list[tuple[str, str, dict[str, str]]]:
    metrics = []
    for widget in _dashboard_body()["widgets"]:
        for entry in widget["properties"].get("metrics", []):
            fields = [f for f in entry if not isinstance(f, dict)]
            if not fields:  # a metric math expression
                continue
            namespace, name, *dims = fields
            metrics.append((namespace, name, dict(zip(dims[::2], dims[1::2], strict=True))))
    return metrics


def test_every_function_logs_to_its_own_group_with_a_retention() -> None:
    groups = {
        g["Properties"]["LogGroupName"]["Fn::Sub"]: g
        for g in _resources("AWS::Logs::LogGroup").values()
        if "LogGroupName" in g["Properties"]
    }
    for name in _resources("AWS::Serverless::Function"):
        group = groups.get(f"/aws/lambda/${{{name}}}")
        assert group is not None, f"{name} has no log group"
        assert group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}, name
    for logical_id, group in _resources("AWS::Logs::LogGroup").items():
        assert group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}, logical_id
    # Lambda would create a group without retention if invoked before the stack's exists.
    for mapping in _resources("AWS::Lambda::EventSourceMapping").values():
        function = mapping["Properties"]["FunctionName"]["Ref"]
        assert mapping["DependsOn"] == f"{function}Logs"


def test_the_recovery_state_machine_logs_errors_without_execution_data() -> None:
    machine = _resources("AWS::Serverless::StateMachine")["NodeRecoveryStateMachine"]
    logging = machine["Properties"]["Logging"]
    assert logging["Level"] in ("ERROR", "ALL")
    assert logging["IncludeExecutionData"] is False
    (destination,) = logging["Destinations"]
    group = destination["CloudWatchLogsLogGroup"]["LogGroupArn"]["Fn::GetAtt"][0]
    assert group in _resources("AWS::Logs::LogGroup")
    actions = {
        a
        for p in machine["Properties"]["Policies"]
        if "Statement" in p
        for s in p["Statement"]
        for a in s["Action"]
    }
    assert {"logs:CreateLogDelivery", "logs:PutResourcePolicy", "logs:DescribeLogGroups"} <= (
        actions
    )


def test_the_api_stage_writes_access_logs() -> None:
    api = _resources("AWS::Serverless::Api")["HyperGuardApi"]["Properties"]
    setting = api["AccessLogSetting"]
    assert setting["DestinationArn"] == {"Fn::GetAtt": ["ApiAccessLogs", "Arn"]}
    assert "$context.requestId" in setting["Format"]
    assert "$context.identity.userArn" in setting["Format"]


def test_the_escalation_topic_uses_a_rotated_key_alarms_and_rules_may_use() -> None:
    topic = _resources("AWS::SNS::Topic")["EscalationTopic"]["Properties"]
    assert topic["KmsMasterKeyId"] == {"Ref": "EscalationTopicKey"}
    key = _resources("AWS::KMS::Key")["EscalationTopicKey"]["Properties"]
    assert key["EnableKeyRotation"] is True
    statements = key["KeyPolicy"]["Statement"]
    services: set[str] = set()
    for s in statements:
        principal = s["Principal"].get("Service", [])
        if principal:
            assert set(s["Action"]) == {"kms:GenerateDataKey*", "kms:Decrypt"}
            services |= set(principal)
    assert services == {"cloudwatch.amazonaws.com", "events.amazonaws.com"}
    assert any(s["Action"] == "kms:*" and "AWS" in s["Principal"] for s in statements)
    for name, fn in _resources("AWS::Serverless::Function").items():
        policies = fn["Properties"]["Policies"]
        if not any("SNSPublishMessagePolicy" in p for p in policies):
            continue
        statements = [s for p in policies if "Statement" in p for s in p["Statement"]]
        assert any(
            set(s["Action"]) == {"kms:GenerateDataKey", "kms:Decrypt"}
            and s["Resource"] == {"Fn::GetAtt": ["EscalationTopicKey", "Arn"]}
            for s in statements
        ), name


def test_every_dlq_has_an_alarm() -> None:
    text = json.dumps(template()["Resources"])
    dlqs = set(re.findall(r'"(?:deadLetterTargetArn|Arn)": \{"Fn::GetAtt": \["(\w+DLQ)"', text))
    assert dlqs == {"HealthDLQ", "SchedulerDLQ", "InventoryDLQ", "EventsDLQ"}
    watched = {
        a["Dimensions"][0]["Value"]["Fn::GetAtt"][0]
        for a in _alarms().values()
        if a.get("Namespace") == "AWS/SQS"
    }
    assert watched == dlqs


def test_every_function_has_errors_and_throttles_alarms() -> None:
    watched = {
        (a["MetricName"], a["Dimensions"][0]["Value"]["Ref"])
        for a in _alarms().values()
        if a.get("Namespace") == "AWS/Lambda"
    }
    functions = set(_resources("AWS::Serverless::Function"))
    assert watched == {(m, f) for m in ("Errors", "Throttles") for f in functions}


def test_recovery_escalation_and_time_budget_alarms() -> None:
    alarms = _alarms()
    failed = {m["MetricName"] for m in _alarm_metrics(alarms["RecoveryFailedAlarm"])}
    assert failed == {"ExecutionsFailed", "ExecutionsTimedOut", "ExecutionsAborted"}
    escalated = {m["MetricName"] for m in _alarm_metrics(alarms["EscalationsAlarm"])}
    assert escalated == {"RecoveryStep_escalate", "Signals_escalated"}
    budget = alarms["RecoveryOverBudgetAlarm"]
    assert budget["MetricName"] == "Incident_signal_to_resolved_s"
    assert budget["Statistic"] == "Maximum"
    assert budget["Threshold"] == {"Ref": "RecoveryTimeBudgetSeconds"}


def test_every_alarm_notifies_the_escalation_topic() -> None:
    for name, alarm in _alarms().items():
        assert alarm["AlarmActions"] == [{"Ref": "EscalationTopic"}], name


def test_alarms_and_dashboard_name_only_metrics_that_exist() -> None:
    from hyperguard.observability import NAMESPACE, SERVICE

    emitted = emitted_metrics()
    referenced = [
        (m["Namespace"], m["MetricName"], {d["Name"]: d["Value"] for d in m.get("Dimensions", [])})
        for alarm in _alarms().values()
        for m in _alarm_metrics(alarm)
    ] + _dashboard_metrics()
    for namespace, name, dimensions in referenced:
        if namespace.startswith("AWS/"):
            continue
        assert namespace == NAMESPACE, name
        assert name in emitted, f"{name} is not emitted by the code"
        # Powertools puts the service dimension on every metric it emits; a single_metric
        # adds its own (the dashboard names them all: a metric is its full dimension set).
        assert dimensions.get("service") == SERVICE, name
        extra = set(dimensions) - {"service"}
        assert extra <= SINGLE_METRIC_DIMENSIONS.get(name, set()), (name, extra)


def test_the_dashboard_shows_what_operators_ask_about() -> None:
    names = {name for _, name, _ in _dashboard_metrics()}
    assert {
        "Signals_opened",
        "Signals_escalated",
        "RecoveryStep_escalate",
        "Incident_signal_to_resolved_s",
        "ExecutionsStarted",
        "ExecutionsSucceeded",
        "ExecutionsFailed",
        "ApproximateNumberOfMessagesVisible",
        "Errors",
        "Throttles",
        "Duration",
        "SchedulerPassMs",
    } <= names
    stats = {
        m[-1]["stat"]
        for w in _dashboard_body()["widgets"]
        for m in w["properties"]["metrics"]
        if m[1:2] == ["Incident_signal_to_resolved_s"]
    }
    assert {"p50", "p90"} <= stats


def test_operations_documents_every_emitted_metric() -> None:
    doc = (ROOT / "docs" / "operations.md").read_text()
    families = _metric_families()
    for name in emitted_metrics():
        prefix = next((p for p in families if name.startswith(p)), None)
        if prefix is None:
            assert f"`{name}`" in doc, name
            continue
        row = next(line for line in doc.splitlines() if line.startswith(f"| `{prefix}<"))
        assert f"`{name.removeprefix(prefix)}`" in row, name


def test_every_api_route_is_deployed_with_its_methods() -> None:
    """A route the API serves (docs/openapi.json) without an Api event on ApiFunction would
    work on the twin and answer 403 Missing Authentication Token on AWS."""
    events = template()["Resources"]["ApiFunction"]["Properties"]["Events"].values()
    deployed: dict[str, set[str]] = {}
    for event in events:
        if event["Type"] == "Api":
            props = event["Properties"]
            deployed.setdefault(props["Path"], set()).add(props["Method"].upper())
    spec = json.loads((ROOT / "docs" / "openapi.json").read_text())
    missing = [
        f"{method.upper()} {path}"
        for path, operations in spec["paths"].items()
        for method in operations
        if method in {"get", "post", "put", "patch", "delete"}
        and not deployed.get(path, set()) & {method.upper(), "ANY"}
    ]
    assert missing == []


def test_the_webhook_is_an_api_destination_only_when_a_url_is_given() -> None:
    """The operator's HTTPS endpoint gets IncidentOpened, IncidentEscalated and
    IncidentResolved, through EventBridge's retries and the events DLQ, with no function."""
    t = template()
    parameters = t["Parameters"]
    assert parameters["WebhookUrl"]["Default"] == ""
    assert re.fullmatch(parameters["WebhookUrl"]["AllowedPattern"], "https://hooks.slack.com/x")
    assert not re.fullmatch(parameters["WebhookUrl"]["AllowedPattern"], "http://plain.example")
    assert parameters["WebhookAuthValue"]["NoEcho"] is True
    assert t["Conditions"]["HasWebhook"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "WebhookUrl"}, ""]}]
    }
    webhook = ("WebhookConnection", "WebhookDestination", "WebhookRole", "WebhookRule")
    for name in webhook:
        assert t["Resources"][name]["Condition"] == "HasWebhook", name
    rule = t["Resources"]["WebhookRule"]["Properties"]
    assert rule["EventPattern"]["detail-type"] == [
        "IncidentOpened",
        "IncidentEscalated",
        "IncidentResolved",
    ]
    (target,) = rule["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": ["WebhookDestination", "Arn"]}
    assert target["DeadLetterConfig"]["Arn"] == {"Fn::GetAtt": ["EventsDLQ", "Arn"]}
    # Every placeholder of the default template is one the transformer fills.
    placeholders = set(re.findall(r"<([a-z-]+)>", parameters["WebhookTemplate"]["Default"]))
    assert placeholders <= set(target["InputTransformer"]["InputPathsMap"])
    json.loads(parameters["WebhookTemplate"]["Default"])  # a JSON body (Slack's shape)
    (statement,) = t["Resources"]["WebhookRole"]["Properties"]["Policies"][0]["PolicyDocument"][
        "Statement"
    ]
    assert statement["Action"] == "events:InvokeApiDestination"
    assert statement["Resource"] == {"Fn::GetAtt": ["WebhookDestination", "Arn"]}
