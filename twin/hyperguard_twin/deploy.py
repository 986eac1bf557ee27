"""Deploy the real template.yaml into the emulator, as `sam package` + `sam deploy` would.

Local code locations are zipped to the emulator's S3 (CodeUri, ContentUri) or inlined
(DefinitionUri), the SAM transform runs with aws-sam-translator, and the result is created
as a CloudFormation stack. Resource types the emulator cannot create are reported, never
silently skipped.
"""

from __future__ import annotations

import copy
import functools
import io
import json
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ARTIFACT_BUCKET = "hyperguard-twin-artifacts"

# What the twin does where the emulator cannot do what AWS does. Keyed by CloudFormation
# type, or by the API for what no resource of the template stands for.
EMULATOR_GAPS: dict[str, str] = {
    "AWS::Lambda::Function": "moto runs Lambda code only in Docker; the twin runs each "
    "function in its own worker processes (warm, reused, up to a concurrency cap; reserved "
    "concurrency throttles) with only the layer's packages and boto3, the function's code "
    "directory, exactly its environment and its execution role's credentials; the timeout "
    "is enforced, memory is not",
    "AWS::Lambda::LayerVersion": "uploaded, not mounted; the twin builds the same layer with "
    "the same recipe (shared/Makefile) for this machine and puts it on the workers' path",
    "AWS::Lambda::EventSourceMapping": "moto delivers SQS messages one at a time and ignores "
    "partial batch responses; the twin polls each queue like the Lambda service (batch size, "
    "ReportBatchItemFailures, redrive to the DLQ; failed records come back after 1 s), but "
    "never waits out MaximumBatchingWindowInSeconds: a batch goes as soon as it is received",
    "AWS::StepFunctions::StateMachine": "moto's CloudFormation ignores DefinitionSubstitutions "
    "and does not execute; the twin substitutes and registers the machine with moto's "
    'executing Step Functions interpreter, and puts the "Step Functions Execution Status '
    'Change" event AWS sends when an execution ends on the default bus, and passes '
    "SendTaskFailure's cause on to the Catch (moto drops it); its logging "
    "configuration is not applied (the emulator's Step Functions writes no execution logs)",
    "AWS::Events::Rule": "moto's default target input leaves `account` out of the event (the "
    "twin restores it); moto never fires a schedule and matches every bus event to a rule "
    "without a pattern: the twin fires schedules at their rate on the simulated cluster's "
    "clock, first at start, and matches schedule rules to nothing else",
    "AWS::IAM::Role": "moto enforces no IAM; the twin authorizes every call signed with a "
    "function's or the forwarder's role credentials against the role's policies as the "
    "emulator's IAM holds them (hyperguard_twin.iam: resource ARNs, transactions' per-item "
    "actions, condition keys), and refuses it as the service does; moto's CloudFormation kept "
    "inline policies as objects, which GetRolePolicy answered as Python's repr: stored as JSON",
    "AWS::CloudWatch::Alarm": "not created by the emulator's CloudFormation; `twin status` "
    "shows the queue depths the alarms watch",
    "AWS::Events::Connection": "moto's CloudFormation does not know it; the twin creates it "
    "(and the API destination) through the emulator's EventBridge API, where its condition "
    "holds, and puts their ARNs where the template refers to them",
    "AWS::Events::ApiDestination": "moto calls one without the event or the connection's "
    "key; the twin posts the transformed event with the key header, once, off the caller's "
    "thread: a failed post goes straight to the target's DLQ (EventBridge retries 429 and "
    "5xx first)",
    "AWS::KMS::Key": "created, but the emulator's SNS stores the topic's key without "
    "encrypting with it: neither the key policy nor the publishers' KMS permissions are "
    "exercised",
    "AWS::SQS::QueuePolicy": "not created by the emulator's CloudFormation, which enforces no "
    "resource policies: EventBridge delivers to the queues without them",
    "AWS::EKS::PodIdentityAssociation": "the emulator has no EKS Pod Identity; the twin "
    "assumes the forwarder's role itself and hands its credentials to the forwarder, as the "
    "Pod Identity agent would",
    "AWS::EKS::AccessEntry": "moto's EKS has no access entries and its CloudFormation does "
    "not know them: the twin adds the four AccessEntry operations to the emulator's EKS API "
    "(hyperguard_twin.eks_access) and creates each through it once the stack is up, with its "
    "principal's ARN resolved from the stack's role; kube-apiserver's token authenticator "
    "maps a function's EKS token to the entry's user and groups, and RBAC decides",
    "AWS::ApiGateway::RestApi": "moto cannot build SAM's REST API from its OpenAPI body; left "
    "out, with its Deployment, Stage and invoke permissions: the twin serves the API on "
    "127.0.0.1:3000 through the same function with API Gateway's proxy events; the caller "
    "names itself in X-HyperGuard-Principal instead of signing (no SigV4 check)",
    "AWS::ApiGateway::Account": "the account-wide setting naming the role API Gateway logs "
    "with is not created by the emulator's CloudFormation; the twin's API stand-in writes no "
    "access log",
    "SageMaker HyperPod API": "moto knows clusters as static records; the twin answers "
    "DescribeCluster, ListClusterNodes, DescribeClusterNode, BatchReboot/ReplaceClusterNodes "
    "and StartClusterHealthCheck from its simulated cluster",
    "EKS and Kubernetes API": "moto's EKS cluster answers DescribeCluster with the twin's "
    "Kubernetes: the upstream kube-apiserver (RBAC on, EKS tokens checked by a TokenReview "
    "webhook against STS and the access entries), kube-scheduler, kube-controller-manager, "
    "etcd, KWOK for the nodes' kubelets, Kueue and Karpenter's core, built from their Go "
    "modules (twin/components)",
    "EC2 RebootInstances": "reboots of the simulated burst nodes' instances reach the "
    "simulated cluster",
    "EC2 RunInstances and TerminateInstances": "Karpenter's launches find EC2 capacity (a knob "
    "of the world) or InsufficientInstanceCapacity; the instance boots and its kubelet "
    "registers its node; a termination takes the node's kubelet down",
}


# The emulator's CloudFormation fails the whole stack on these (SAM's REST API has a Body and
# no Name, which moto requires); the twin leaves them out and serves the API itself.
LEFT_OUT_TYPES = frozenset(
    {
        "AWS::ApiGateway::RestApi",
        "AWS::ApiGateway::Deployment",
        "AWS::ApiGateway::Stage",
    }
)


# The emulator's CloudFormation does not know these, but its EventBridge API does: the twin
# creates them through that API, as CloudFormation would, and puts their ARNs where the
# template refers to them.
BY_API_TYPES = ("AWS::Events::Connection", "AWS::Events::ApiDestination")
# Nor these, which nothing in the template refers to: the twin creates them through the
# emulator's (extended) EKS API once the stack and its roles exist.
AFTER_STACK_TYPES = ("AWS::EKS::AccessEntry",)


class DeployError(RuntimeError):
    pass


def _parameter(template: dict[str, Any], parameters: dict[str, str], name: str) -> Any:
    if name in parameters:
        return parameters[name]
    if name == "AWS::NoValue":
        return None
    return template.get("Parameters", {}).get(name, {}).get("Default")


def condition_holds(template: dict[str, Any], name: str, parameters: dict[str, str]) -> bool:
    """A template condition's value (Fn::Equals, Fn::Not, Fn::And, Fn::Or, Condition, Ref
    to a parameter): the only functions the twin needs to evaluate itself."""

    def value(node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        (function, argument), *_ = node.items()
        match function:
            case "Ref":
                return _parameter(template, parameters, argument)
            case "Condition":
                return condition_holds(template, argument, parameters)
            case "Fn::Equals":
                left, right = (value(a) for a in argument)
                return str(left) == str(right)
            case "Fn::Not":
                return not value(argument[0])
            case "Fn::And":
                return all(value(a) for a in argument)
            case "Fn::Or":
                return any(value(a) for a in argument)
        raise DeployError(f"the twin cannot evaluate {function} in condition {name}")

    return bool(value(template["Conditions"][name]))


def _substitute(node: Any, values: dict[str, Any]) -> Any:
    """`node` with each `Ref` to a key of `values` and each `Fn::GetAtt` of `<key>.Arn`
    replaced by its value."""
    if isinstance(node, list):
        return [_substitute(n, values) for n in node]
    if not isinstance(node, dict):
        return node
    if set(node) == {"Ref"} and node["Ref"] in values:
        return values[node["Ref"]]
    if set(node) == {"Fn::GetAtt"}:
        target = node["Fn::GetAtt"]
        logical_id, attribute = target if isinstance(target, list) else target.split(".", 1)
        if attribute == "Arn" and f"{logical_id}.Arn" in values:
            return values[f"{logical_id}.Arn"]
    return {k: _substitute(v, values) for k, v in node.items()}


def provision_by_api(
    template: dict[str, Any], parameters: dict[str, str], events: Any, stack_name: str
) -> tuple[dict[str, Any], dict[str, tuple[str, str]]]:
    """The template with its EventBridge connections and API destinations created through
    the emulator's EventBridge API (where their condition holds) and replaced by their
    ARNs; returns the template and what was created (logical id → (type, ARN))."""
    resources = dict(template["Resources"])
    values: dict[str, Any] = {
        name: _parameter(template, parameters, name) for name in template.get("Parameters", {})
    }
    created: dict[str, tuple[str, str]] = {}
    for kind in BY_API_TYPES:
        for logical_id, resource in list(resources.items()):
            if resource["Type"] != kind:
                continue
            del resources[logical_id]
            condition = resource.get("Condition")
            if condition and not condition_holds(template, condition, parameters):
                continue
            props = _substitute(resource["Properties"], values)
            name = f"{stack_name}-{logical_id}"[:64]
            if kind == "AWS::Events::Connection":
                arn = events.create_connection(Name=name, **props)["ConnectionArn"]
            else:
                arn = events.create_api_destination(Name=name, **props)["ApiDestinationArn"]
            values[f"{logical_id}.Arn"] = arn
            created[logical_id] = (kind, arn)
    arns = {k: v for k, v in values.items() if k.endswith(".Arn")}
    return {**template, "Resources": _substitute(resources, arns)}, created


def provision_after_stack(
    template: dict[str, Any],
    parameters: dict[str, str],
    resources: dict[str, dict[str, str]],
    *,
    eks: Any,
    iam: Any,
) -> dict[str, tuple[str, str]]:
    """The template's EKS access entries, created through the emulator's EKS API where their
    condition holds, each principal's ARN read from the stack's role; returns what was
    created (logical id → (type, ARN))."""
    values: dict[str, Any] = {
        name: _parameter(template, parameters, name) for name in template.get("Parameters", {})
    }
    for logical_id, resource in resources.items():
        if resource["type"] == "AWS::IAM::Role":
            role = iam.get_role(RoleName=resource["physical_id"])["Role"]
            values[f"{logical_id}.Arn"] = role["Arn"]
    created: dict[str, tuple[str, str]] = {}
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] not in AFTER_STACK_TYPES:
            continue
        condition = resource.get("Condition")
        if condition and not condition_holds(template, condition, parameters):
            continue
        props = _substitute(resource["Properties"], values)
        entry = eks.create_access_entry(
            clusterName=props["ClusterName"],
            principalArn=props["PrincipalArn"],
            kubernetesGroups=list(props.get("KubernetesGroups") or []),
            type=props.get("Type", "STANDARD"),
        )["accessEntry"]
        created[logical_id] = (resource["Type"], entry["accessEntryArn"])
    return created


def _refers_to(fragment: Any, logical_ids: set[str]) -> bool:
    text = json.dumps(fragment)
    return any(
        f'"Ref": "{i}"' in text or f'"Fn::GetAtt": ["{i}"' in text or "${" + i in text
        for i in logical_ids
    )


def leave_out_unsupported(template: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The template without the resources the emulator cannot create, and without what
    depends on them (their permissions, outputs); returns what was left out."""
    resources = template["Resources"]
    dropped = {i for i, r in resources.items() if r["Type"] in LEFT_OUT_TYPES}
    while True:
        more = {i for i, r in resources.items() if i not in dropped and _refers_to(r, dropped)}
        if not more:
            break
        dropped |= more
    kept = {i: r for i, r in resources.items() if i not in dropped}
    outputs = {k: v for k, v in template.get("Outputs", {}).items() if not _refers_to(v, dropped)}
    left_out = {i: str(resources[i]["Type"]) for i in sorted(dropped)}
    return {**template, "Resources": kept, "Outputs": outputs}, left_out


@dataclass
class Deployment:
    stack_name: str
    outputs: dict[str, str]
    resources: dict[str, dict[str, str]]  # logical id → {type, physical_id, status}
    functions: dict[str, dict[str, Any]]  # logical id → {code_dir, handler, name}
    skipped: dict[str, str] = field(default_factory=dict)  # logical id → type


def _zip_dir(path: Path) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for file in sorted(path.rglob("*")):
            if file.is_file() and "__pycache__" not in file.parts:
                zf.write(file, file.relative_to(path).as_posix())
    return buf.getvalue()


def load_template(path: Path) -> dict[str, Any]:
    """The template at `path` as SAM reads it (its tags as intrinsic functions): a copy of
    its last parse while the file is unchanged. A twin reads template.yaml twice as it
    starts (the stack, the API stage), and a test worker starts many: PyYAML's pure-Python
    parse took 0.35 CPU-s each, the copy 5 ms."""
    return copy.deepcopy(_parsed_template(path.read_text()))


@functools.lru_cache(maxsize=4)
def _parsed_template(text: str) -> dict[str, Any]:
    from samtranslator.yaml_helper import yaml_parse

    return dict(yaml_parse(text))


def create_tables(template: dict[str, Any], ddb: Any, prefix: str) -> dict[str, str]:
    """The template's DynamoDB tables (same keys and indexes) under `prefix`; logical id → name.

    For tests and benchmarks that want the real key design without a whole stack.
    """
    names = {}
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] != "AWS::DynamoDB::Table":
            continue
        props = resource["Properties"]
        kwargs = {k: props[k] for k in ("AttributeDefinitions", "KeySchema", "BillingMode")}
        if "GlobalSecondaryIndexes" in props:
            kwargs["GlobalSecondaryIndexes"] = props["GlobalSecondaryIndexes"]
        names[logical_id] = f"{prefix}{logical_id}"
        ddb.create_table(TableName=names[logical_id], **kwargs)
    return names


def package(template: dict[str, Any], root: Path, s3: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Returns the packaged template and, per function, where its code lives locally."""
    packaged = copy.deepcopy(template)
    functions: dict[str, Any] = {}
    globals_fn = packaged.get("Globals", {}).get("Function", {})
    s3.create_bucket(Bucket=ARTIFACT_BUCKET)
    for logical_id, resource in packaged["Resources"].items():
        props = resource.get("Properties", {})
        kind = resource["Type"]
        if kind == "AWS::Serverless::Function":
            code_dir = root / props["CodeUri"]
            key = f"{logical_id}.zip"
            s3.put_object(Bucket=ARTIFACT_BUCKET, Key=key, Body=_zip_dir(code_dir))
            props["CodeUri"] = {"Bucket": ARTIFACT_BUCKET, "Key": key}
            functions[logical_id] = {
                "code_dir": code_dir,
                "handler": props.get("Handler", globals_fn.get("Handler")),
                "timeout": props.get("Timeout", globals_fn.get("Timeout", 3)),
                "memory": props.get("MemorySize", globals_fn.get("MemorySize", 128)),
                "reserved_concurrency": props.get("ReservedConcurrentExecutions"),
            }
        elif kind == "AWS::Serverless::LayerVersion":
            key = f"{logical_id}.zip"
            s3.put_object(
                Bucket=ARTIFACT_BUCKET, Key=key, Body=_zip_dir(root / props["ContentUri"])
            )
            props["ContentUri"] = {"Bucket": ARTIFACT_BUCKET, "Key": key}
        elif kind == "AWS::Serverless::StateMachine" and "DefinitionUri" in props:
            props["Definition"] = json.loads((root / props.pop("DefinitionUri")).read_text())
    return packaged, functions


class _StaticPolicyLoader:
    """AWS managed policy ARNs for the transform (the emulator's IAM has none loaded)."""

    def load(self) -> dict[str, str]:
        names = {
            "AWSLambdaBasicExecutionRole": "service-role/AWSLambdaBasicExecutionRole",
            "AWSXrayWriteOnlyAccess": "AWSXrayWriteOnlyAccess",
            "AWSXRayDaemonWriteAccess": "AWSXRayDaemonWriteAccess",
            "AWSLambdaRole": "service-role/AWSLambdaRole",
        }
        return {name: f"arn:aws:iam::aws:policy/{path}" for name, path in names.items()}


def transform(packaged: dict[str, Any], parameters: dict[str, str]) -> dict[str, Any]:
    """SAM's transform of the packaged template: a copy of the last for the same template and
    parameters (0.2 CPU-s a twin's start, the copy a few ms)."""
    return copy.deepcopy(_transformed(json.dumps([packaged, parameters], sort_keys=True)))


@functools.lru_cache(maxsize=8)
def _transformed(packaged_and_parameters: str) -> dict[str, Any]:
    from samtranslator.translator.transform import transform as sam_transform

    packaged, parameters = json.loads(packaged_and_parameters)
    return dict(sam_transform(packaged, parameters, _StaticPolicyLoader()))


def deploy(
    *,
    root: Path,
    stack_name: str,
    parameters: dict[str, str],
    cfn: Any,
    s3: Any,
    events: Any,
    eks: Any = None,
    iam: Any = None,
    timeout_s: float = 120,
) -> Deployment:
    template = load_template(root / "template.yaml")
    packaged, functions = package(template, root, s3)
    provisioned, by_api = provision_by_api(
        transform(packaged, parameters), parameters, events, stack_name
    )
    transformed, left_out = leave_out_unsupported(provisioned)
    cfn.create_stack(
        StackName=stack_name,
        TemplateBody=json.dumps(transformed),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()],
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_AUTO_EXPAND"],
    )
    deadline = time.monotonic() + timeout_s
    while True:
        stack = cfn.describe_stacks(StackName=stack_name)["Stacks"][0]
        if not stack["StackStatus"].endswith("_IN_PROGRESS"):
            break
        if time.monotonic() > deadline:
            raise DeployError(f"stack {stack_name} still {stack['StackStatus']} after {timeout_s}s")
        time.sleep(0.2)
    if stack["StackStatus"] != "CREATE_COMPLETE":
        reason = stack.get("StackStatusReason", "")
        raise DeployError(f"stack {stack_name} ended {stack['StackStatus']}: {reason}")
    resources: dict[str, dict[str, str]] = {}
    for page in cfn.get_paginator("list_stack_resources").paginate(StackName=stack_name):
        for r in page["StackResourceSummaries"]:
            resources[r["LogicalResourceId"]] = {
                "type": r["ResourceType"],
                "physical_id": r.get("PhysicalResourceId", ""),
                "status": r["ResourceStatus"],
            }
    if eks is not None and iam is not None:
        by_api |= provision_after_stack(transformed, parameters, resources, eks=eks, iam=iam)
    for logical_id, (kind, arn) in by_api.items():
        resources[logical_id] = {"type": kind, "physical_id": arn, "status": "CREATE_COMPLETE"}
    skipped = left_out | {
        logical_id: res["Type"]
        for logical_id, res in transformed["Resources"].items()
        if logical_id not in resources
        and not (
            "Condition" in res and not condition_holds(transformed, res["Condition"], parameters)
        )
    }
    for logical_id, fn in functions.items():
        fn["name"] = resources[logical_id]["physical_id"]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    return Deployment(stack_name, outputs, resources, functions, skipped)
