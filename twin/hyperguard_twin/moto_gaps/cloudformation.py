"""CloudFormation: moto's ignores a state machine's `DefinitionSubstitutions` and registers
it in a backend that does not execute it (the twin substitutes and registers it with moto's
executing Step Functions interpreter instead), and keeps a role's inline policies as the
template's objects (stored as JSON here, as IAM keeps them)."""

from __future__ import annotations

import json
from typing import Any


def install() -> None:
    _create_executable_state_machines()
    _store_role_policies_as_json()


def substitute(definition: str, substitutions: dict[str, Any]) -> str:
    """Apply DefinitionSubstitutions the way Step Functions does: `${Name}` → value."""
    for name, value in substitutions.items():
        definition = definition.replace("${" + name + "}", str(value))
    return definition


def _create_executable_state_machines() -> None:
    from moto.stepfunctions.models import StateMachine
    from moto.stepfunctions.responses import get_backend

    def create(
        cls: Any,
        /,
        resource_name: str,
        cloudformation_json: Any,
        account_id: str,
        region_name: str,
        **_: Any,
    ) -> Any:
        props = cloudformation_json["Properties"]
        definition = substitute(
            props.get("DefinitionString", ""), props.get("DefinitionSubstitutions") or {}
        )
        json.loads(definition)  # an unresolved or broken definition fails the stack, loudly
        return get_backend(account_id, region_name).create_state_machine(
            name=props.get("StateMachineName", resource_name),
            definition=definition,
            roleArn=props.get("RoleArn", ""),
            tags=[{"key": t["Key"], "value": t["Value"]} for t in props.get("Tags", [])],
        )

    StateMachine.create_from_cloudformation_json = classmethod(create)  # type: ignore[method-assign, assignment]


def _store_role_policies_as_json() -> None:
    """moto's CloudFormation keeps an AWS::IAM::Role's inline policies as the template's
    objects, which GetRolePolicy then answers as Python's repr of them; IAM keeps and answers
    JSON. They are stored as JSON."""
    from moto.iam.models import Role

    original = Role.put_policy
    if getattr(original, "stores_json", False):
        return

    def put_policy(self: Any, policy_name: str, policy_json: Any) -> None:
        document = policy_json if isinstance(policy_json, str) else json.dumps(policy_json)
        original(self, policy_name, document)

    put_policy.stores_json = True  # type: ignore[attr-defined]
    Role.put_policy = put_policy  # type: ignore[method-assign]
