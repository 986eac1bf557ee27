"""Do the deployed functions' roles allow what the functions did? Every AWS call a function
made on the twin is matched against its role's policy in template.yaml: the action, and for
DynamoDB tables and indexes, the S3 checkpoint bucket and the EKS cluster, the resource.
(moto enforces no IAM, so the twin proves the calls happen; this proves the roles allow
them. Resources of other services are checked by review: docs/security.md.)"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any

from tests.conftest import template

from hyperguard.twin.runtime import Twin

SAM_POLICY_TEMPLATES = {
    "StepFunctionsExecutionPolicy": ["states:StartExecution"],
    "SNSPublishMessagePolicy": ["sns:Publish"],
    "EventBridgePutEventsPolicy": ["events:PutEvents"],
    "LambdaInvokePolicy": ["lambda:InvokeFunction"],
}
NEEDS_NO_PERMISSION = {"sts:GetCallerIdentity"}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _resource(value: Any, twin: Twin, physical: dict[str, str]) -> str:
    """A policy resource in the emulator's short form, or "*" where the check is by review."""
    if value == "*":
        return "*"
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        target = value["Fn::GetAtt"][0]
        if target.endswith("Table"):
            return f"table/{physical[target]}"
        return "*"
    if isinstance(value, dict) and "Fn::Sub" in value:
        text = value["Fn::Sub"] if isinstance(value["Fn::Sub"], str) else value["Fn::Sub"][0]
        if text.startswith("${") and ".Arn}" in text:
            target = text[2 : text.index(".Arn}")]
            return f"table/{physical[target]}{text[text.index('.Arn}') + 5 :]}"
        if ":s3:::${CheckpointBucketName}" in text:
            rest = text.split("${CheckpointBucketName}", 1)[1]
            return twin.config.parameters["CheckpointBucketName"] + rest
        if ":cluster/${EksClusterName}" in text:
            return f"cluster/{twin.config.eks_cluster_name}"
    return "*"


def allowed(twin: Twin) -> dict[str, list[tuple[str, str]]]:
    """Function logical id → its role's (action pattern, resource pattern) grants."""
    assert twin.deployment is not None
    physical = {k: v.get("physical_id", "") for k, v in twin.deployment.resources.items()}
    grants: dict[str, list[tuple[str, str]]] = {}
    for logical, resource in template()["Resources"].items():
        if resource["Type"] != "AWS::Serverless::Function":
            continue
        mine: list[tuple[str, str]] = []
        for policy in resource["Properties"].get("Policies", []):
            for name, value in policy.items():
                if name == "Statement":
                    for statement in value:
                        assert statement["Effect"] == "Allow"
                        mine += [
                            (action, _resource(res, twin, physical))
                            for action in _list(statement["Action"])
                            for res in _list(statement["Resource"])
                        ]
                else:
                    mine += [(action, "*") for action in SAM_POLICY_TEMPLATES[name]]
        grants[logical] = mine
    return grants


def assert_roles_allow_what_functions_did(twin: Twin) -> None:
    policies = allowed(twin)
    missing = sorted(
        {
            (function, action, resource)
            for (function, action, resource) in twin.function_grants()
            if action not in NEEDS_NO_PERMISSION
            and not any(
                fnmatchcase(action, a) and fnmatchcase(resource, r) for a, r in policies[function]
            )
        }
    )
    assert missing == [], f"calls the functions' roles do not allow: {missing}"


def assert_rbac_allowed_what_functions_did(twin: Twin) -> None:
    """The Kubernetes side: kube-apiserver's RBAC authorizer answered every request of
    HyperGuard's functions and forwarder (its audit log, `ControlPlane.requests`), and refused
    none. A refusal here is a verb missing from deploy/kubernetes/hyperguard-rbac.yaml."""
    assert twin.plane is not None
    refused = sorted(
        {
            (r["user"], r["verb"], r["resource"], r["namespace"] or "")
            for r in twin.plane.requests()
            if not r["authorized"]
        }
    )
    assert refused == [], f"Kubernetes calls RBAC refused: {refused}"
