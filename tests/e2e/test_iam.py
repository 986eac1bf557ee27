"""IAM on the twin is enforced as AWS enforces it: every AWS call a function makes is
authorized against its execution role's policies as the emulator's IAM holds them
(hyperguard_twin.iam), so a call the role does not allow fails at run time. This module
breaks a role on purpose; every other e2e module checks that IAM refused nothing
(tests/e2e/iam.py)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from tests.e2e.broken_recovery import BrokenRecovery
from tests.e2e.conftest import running_twin

from hyperguard_twin.runtime import Twin

REBOOT = "sagemaker:BatchRebootClusterNodes"


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    with running_twin(hyperpod_nodes=10, iam_refusals_expected=True) as running:
        yield running


def role_policy(iam: Any, role: str, name: str) -> dict[str, Any]:
    document = iam.get_role_policy(RoleName=role, PolicyName=name)["PolicyDocument"]
    return document if isinstance(document, dict) else dict(json.loads(document))


def test_an_action_removed_from_the_recovery_role_fails_recovery_until_restored(
    twin: Twin,
) -> None:
    """The recovery role's policy loses BatchRebootClusterNodes in the emulator's IAM (as a
    stack update without it would leave it): the reboot is refused with SageMaker's
    AccessDeniedException at run time, and the incident goes to an operator; the policy
    restored, a re-drive reboots the node and resolves it."""
    assert twin.deployment is not None
    recovery = BrokenRecovery(twin)
    iam = twin.client("iam")
    role = twin.deployment.resources["RecoveryFunctionRole"]["physical_id"]
    policies = {
        name: role_policy(iam, role, name)
        for name in iam.list_role_policies(RoleName=role)["PolicyNames"]
    }
    name, policy = next((n, p) for n, p in policies.items() if REBOOT in json.dumps(p))
    # SAM writes no Version (IAM's default is 2008-10-17); the emulator's PutRolePolicy asks
    # for one. The same statements under 2012-10-17 mean the same without policy variables.
    policy = {"Version": "2012-10-17", **policy}
    narrowed = copy.deepcopy(policy)
    for statement in narrowed["Statement"]:
        if isinstance(statement["Action"], list) and REBOOT in statement["Action"]:
            statement["Action"].remove(REBOOT)
    assert REBOOT not in json.dumps(narrowed)

    iam.put_role_policy(RoleName=role, PolicyName=name, PolicyDocument=json.dumps(narrowed))
    try:
        _, incident = recovery.fails()
        assert set(twin.emulator.iam.denied) == {
            ("RecoveryFunction", REBOOT, twin.config.cluster_arn)
        }
        history = recovery.sfn.get_execution_history(
            executionArn=incident.execution_arn, maxResults=1000
        )
        assert "AccessDeniedException" in json.dumps(history["events"], default=str)
    finally:
        iam.put_role_policy(RoleName=role, PolicyName=name, PolicyDocument=json.dumps(policy))
    refused = sum(twin.emulator.iam.denied.values())
    recovery.heals(incident)
    assert sum(twin.emulator.iam.denied.values()) == refused  # the reboot is allowed again
