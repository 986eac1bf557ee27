"""IAM's policy evaluation as the twin's emulator applies it (hyperguard_twin.iam.policy.decide):
an applying Deny wins, else an applying Allow allows, else the call is implicitly denied;
what the twin cannot evaluate it says so instead of guessing."""

from __future__ import annotations

from typing import Any

import pytest

from hyperguard_twin.iam.policy import Authorization, CannotJudge, decide

TABLE = "arn:aws:dynamodb:us-east-1:123456789012:table/incidents"
INSTANCE = "arn:aws:ec2:us-east-1:123456789012:instance/i-0abc"


def policy(*statements: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"Version": "2012-10-17", "Statement": list(statements)}]


def allow(action: Any, resource: Any = "*", **more: Any) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": action, "Resource": resource, **more}


def test_action_names_ignore_case_and_resources_take_iams_wildcards() -> None:
    documents = policy(allow("DynamoDB:Get*", f"{TABLE[:-9]}incident?"))
    assert decide(documents, Authorization("dynamodb:GetItem", TABLE)) == "allowed"
    assert decide(documents, Authorization("dynamodb:PutItem", TABLE)) == "implicit deny"
    assert decide(documents, Authorization("dynamodb:GetItem", TABLE + "/index/x")) == (
        "implicit deny"
    )
    # An action with no resource type is authorized on "*", which a scoped grant is not.
    assert decide(
        policy(allow("ec2:Describe*", TABLE)), Authorization("ec2:DescribeTags", "*")
    ) == ("implicit deny")


def test_an_applying_deny_wins_over_any_allow() -> None:
    documents = policy(allow("dynamodb:*", "*")) + policy(
        {"Effect": "Deny", "NotAction": "dynamodb:GetItem", "NotResource": TABLE + "/index/*"}
    )
    assert decide(documents, Authorization("dynamodb:GetItem", TABLE)) == "allowed"
    assert decide(documents, Authorization("dynamodb:PutItem", TABLE)) == "explicit deny"
    assert decide(documents, Authorization("dynamodb:PutItem", TABLE + "/index/x")) == "allowed"


def tagged(**tags: str) -> Authorization:
    context = {f"aws:resourcetag/{k.lower()}": v for k, v in tags.items()}
    return Authorization("ec2:RebootInstances", INSTANCE, context, ("aws:resourcetag/",))


def test_a_condition_on_a_key_the_request_lacks_fails_unless_negated_or_if_exists() -> None:
    reboot = allow(
        "ec2:RebootInstances",
        Condition={
            "StringEquals": {"aws:ResourceTag/eks:eks-cluster-name": "hyperguard-eks"},
            "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"},
        },
    )
    ok = tagged(**{"eks:eks-cluster-name": "hyperguard-eks", "karpenter.sh/nodepool": "gpu"})
    assert decide(policy(reboot), ok) == "allowed"
    assert decide(policy(reboot), tagged(**{"eks:eks-cluster-name": "hyperguard-eks"})) == (
        "implicit deny"
    )
    assert decide(policy(reboot), tagged()) == "implicit deny"
    negated = allow(
        "ec2:RebootInstances",
        Condition={"StringNotEquals": {"aws:ResourceTag/protected": "true"}},
    )
    assert decide(policy(negated), tagged()) == "allowed"
    assert decide(policy(negated), tagged(protected="true")) == "implicit deny"
    if_exists = allow(
        "ec2:RebootInstances", Condition={"StringEqualsIfExists": {"aws:ResourceTag/team": "a"}}
    )
    assert decide(policy(if_exists), tagged()) == "allowed"
    assert decide(policy(if_exists), tagged(team="b")) == "implicit deny"
    null = allow("ec2:RebootInstances", Condition={"Null": {"aws:ResourceTag/team": "false"}})
    assert decide(policy(null), tagged(team="b")) == "allowed"
    assert decide(policy(null), tagged()) == "implicit deny"


@pytest.mark.parametrize(
    "statement",
    [
        allow("ec2:RebootInstances", Condition={"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}),
        allow("ec2:RebootInstances", Condition={"StringEquals": {"aws:PrincipalTag/team": "a"}}),
        allow(
            "ec2:RebootInstances",
            Condition={"ForAnyValue:StringEquals": {"aws:ResourceTag/team": "a"}},
        ),
        allow("ec2:RebootInstances", "arn:aws:ec2:*:*:instance/${aws:username}"),
    ],
    ids=["operator", "key", "set operator", "policy variable"],
)
def test_what_the_twin_cannot_evaluate_is_not_guessed(statement: dict[str, Any]) -> None:
    with pytest.raises(CannotJudge):
        decide(policy(statement), tagged(team="a"))
