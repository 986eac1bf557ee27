"""Did IAM allow what HyperGuard's identities did on the twin? The emulator authorizes every
call a function or the forwarder makes against its role's policies as deployed
(hyperguard_twin.iam), so a call a role does not allow fails at run time; at a twin's end,
no call may have been refused unless a test refused it on purpose. What the emulator let
through undecided (an operation whose resources the twin does not derive, a condition it
does not evaluate: `IamEnforcement.unjudged`) is checked here instead, by its action against
the role's policies in template.yaml; its resources are checked by review
(docs/security.md)."""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any

from tests.conftest import template

from hyperguard_twin.runtime import Twin

SAM_POLICY_TEMPLATES = {
    "StepFunctionsExecutionPolicy": ["states:StartExecution"],
    "SNSPublishMessagePolicy": ["sns:Publish"],
    "EventBridgePutEventsPolicy": ["events:PutEvents"],
    "LambdaInvokePolicy": ["lambda:InvokeFunction"],
}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _statements(resource: dict[str, Any]) -> list[dict[str, Any]]:
    properties = resource["Properties"]
    if resource["Type"] == "AWS::IAM::Role":
        return [s for p in properties.get("Policies", []) for s in p["PolicyDocument"]["Statement"]]
    statements: list[dict[str, Any]] = []
    for policy in properties.get("Policies", []):
        for name, value in policy.items():
            if name == "Statement":
                statements += value
            else:
                statements.append({"Effect": "Allow", "Action": SAM_POLICY_TEMPLATES[name]})
    return statements


def allowed_actions() -> dict[str, list[str]]:
    """A function's or role's logical id → the actions its policies allow."""
    actions: dict[str, list[str]] = {}
    for logical, resource in template()["Resources"].items():
        if resource["Type"] in ("AWS::Serverless::Function", "AWS::IAM::Role"):
            statements = _statements(resource)
            assert all(s["Effect"] == "Allow" for s in statements)
            actions[logical] = [a for s in statements for a in _list(s["Action"])]
    return actions


def assert_roles_allow_what_functions_did(twin: Twin, *, refusals_expected: bool = False) -> None:
    """The emulator refused none of the functions' and the forwarder's calls (unless the
    tests refuse some on purpose), and every call it could not judge is one the role's
    policies name."""
    unauthenticated = sorted(twin.emulator.iam.unauthenticated)
    assert unauthenticated == [], f"calls whose signature or token was refused: {unauthenticated}"
    if not refusals_expected:
        refused = sorted(twin.emulator.iam.denied)
        assert refused == [], f"calls IAM refused on the twin: {refused}"
    policies = allowed_actions()
    missing = sorted(
        {
            (who, call, why)
            for (who, call, why) in twin.emulator.iam.unjudged
            if not any(fnmatchcase(call.lower(), a.lower()) for a in policies[who])
        }
    )
    assert missing == [], f"calls the roles do not allow (not judged at run time): {missing}"


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
