"""Static checks of every state machine definition against the template that wires it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import ROOT, template

LAMBDA_SERVICE_ERRORS = {
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
}
ASL_FILES = sorted((ROOT / "statemachines").glob("*.asl.json"))


def _wiring() -> dict[str, dict[str, Any]]:
    """ASL file → its state machine resource's DefinitionSubstitutions."""
    wiring = {}
    for resource in template()["Resources"].values():
        if resource["Type"] == "AWS::Serverless::StateMachine":
            props = resource["Properties"]
            wiring[props["DefinitionUri"]] = props.get("DefinitionSubstitutions", {})
    return wiring


def _states(definition: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every state, nested Parallel branches and Map iterators included."""
    found = {}
    for name, state in definition["States"].items():
        found[name] = state
        for branch in state.get("Branches", []):
            found |= _states(branch)
        for key in ("Iterator", "ItemProcessor"):
            if key in state:
                found |= _states(state[key])
    return found


def test_there_are_state_machines_and_each_is_wired_in_the_template() -> None:
    assert ASL_FILES, "no statemachines/*.asl.json"
    wired = _wiring()
    for path in ASL_FILES:
        assert path.relative_to(ROOT).as_posix() in wired, f"{path.name} is not in template.yaml"


@pytest.mark.parametrize("path", ASL_FILES, ids=lambda p: p.name)
def test_substitutions_are_all_defined(path: Path) -> None:
    text = path.read_text()
    used = set(re.findall(r"\$\{(\w+)\}", text))
    defined = set(_wiring()[path.relative_to(ROOT).as_posix()])
    assert used <= defined, f"undefined substitutions: {sorted(used - defined)}"
    assert defined <= used, f"substitutions defined but unused: {sorted(defined - used)}"


@pytest.mark.parametrize("path", ASL_FILES, ids=lambda p: p.name)
def test_every_task_retries_lambda_service_errors_and_catches(path: Path) -> None:
    definition = json.loads(path.read_text())
    states = _states(definition)
    tasks = {name: s for name, s in states.items() if s["Type"] == "Task"}
    assert tasks
    for name, task in tasks.items():
        retried = {e for r in task.get("Retry", []) for e in r["ErrorEquals"]}
        assert retried >= LAMBDA_SERVICE_ERRORS, (
            f"{name} does not retry {LAMBDA_SERVICE_ERRORS - retried}"
        )
        caught = {e for c in task.get("Catch", []) for e in c["ErrorEquals"]}
        assert "States.ALL" in caught, f"{name} does not catch States.ALL"
        for c in task.get("Catch", []):
            assert c["Next"] in states, f"{name} catches into unknown state {c['Next']}"


@pytest.mark.parametrize("path", ASL_FILES, ids=lambda p: p.name)
def test_transitions_point_at_real_states_and_every_state_is_reachable(path: Path) -> None:
    definition = json.loads(path.read_text())
    states = definition["States"]
    assert definition["StartAt"] in states
    edges: dict[str, set[str]] = {}
    for name, state in states.items():
        targets = {state["Next"]} if "Next" in state else set()
        targets |= {c["Next"] for c in state.get("Catch", [])}
        targets |= {c["Next"] for c in state.get("Choices", [])}
        if "Default" in state:
            targets.add(state["Default"])
        assert targets <= set(states), f"{name} → {targets - set(states)}"
        assert targets or state.get("End") or state["Type"] in ("Succeed", "Fail"), name
        edges[name] = targets
    seen, todo = set(), [definition["StartAt"]]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(edges[name])
    assert seen == set(states), f"unreachable: {set(states) - seen}"


def test_burst_capacity_buys_only_what_is_still_wanted_and_its_rollbacks_persist() -> None:
    """RequestCapacity's re-check can withdraw the purchase (→ RollBack); every step retries
    throttles that outlast the SDK's retries; the two rollbacks retry any error, with
    backoff, before giving up (a failed rollback may leave capacity paid for)."""
    states = _states(json.loads((ROOT / "statemachines" / "burst_capacity.asl.json").read_text()))
    route = states["RouteRequest"]
    assert states["RequestCapacity"]["Next"] == "RouteRequest"
    assert route["Choices"] == [
        {"Variable": "$.capacity", "StringEquals": "requested", "Next": "WaitForNodes"}
    ]
    assert route["Default"] == "RollBack"
    for name, state in states.items():
        if state["Type"] != "Task":
            continue
        errors = [set(r["ErrorEquals"]) for r in state["Retry"]]
        if name in ("RollBack", "RollBackOnError"):
            last = state["Retry"][-1]
            assert last["ErrorEquals"] == ["States.ALL"] and last["MaxAttempts"] >= 8, name
            assert last["BackoffRate"] > 1 and last["MaxDelaySeconds"] <= 60, name
        else:
            assert any({"ThrottlingException", "ClientError"} <= e for e in errors), name
