"""The recovery state as a typed model: parsed from the JSON the state machine passes and
dumped back to the same JSON, with what a step changed; the ASL's paths name its fields."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from tests.conftest import ROOT

from hyperguard.models import Repair
from hyperguard.recovery.state import Recovery

# What an execution's state holds after Repair, as the steps wrote it before the model, with
# what the state machine added (a Catch's error, an approval, a wait's wake-up).
AFTER_REPAIR: dict[str, Any] = {
    "incident_id": "i-0abc-20260301T120000Z-1a2b3c",
    "instance_id": "i-0abc",
    "cluster": "hyperguard-twin",
    "repair": "replace",
    "kind": "hyperpod_node_health",
    "poll_s": 30,
    "round": 1,
    "urgency": 0,
    "action": "replace",
    "reason": "fatal: act at once",
    "verdict": "proceed",
    "hold_reasons": [],
    "approval": {"approved_by": "ops", "approved_at": "2026-03-01T12:01:00.123456+00:00"},
    "woken": {"Error": "States.Timeout", "Cause": "The task timed out."},
    "jobs": ["llama3-70b-pretrain"],
    "drain": {"evicted": 3, "forced": 0},
    "moved": [],
    "pool_before": ["i-0abc", "i-0def"],
    "logical_ids_before": {"i-0abc": "worker-1"},
    "repair_requested_at": "2026-03-01T12:02:03.456789+00:00",
    "health_deadline": "2026-03-01T12:47:03.456789+00:00",
    "health": "pending",
}


@pytest.mark.parametrize(
    "state",
    [
        AFTER_REPAIR,
        {"incident_id": "x", "instance_id": "i-0abc", "redrive": 2},
        {"incident_id": "x", "health": "healthy", "replacement": None, "action": "replace"},
        {"incident_id": "x", "error": {"Error": "ClusterError", "Cause": "throttled"}},
        {"incident_id": "x", "error": {"Error": "Runtime.ExitError"}, "later_key": [1, {"a": 2}]},
        {},
    ],
)
def test_the_state_dumps_back_to_the_json_it_was_parsed_from(state: dict[str, Any]) -> None:
    assert Recovery.model_validate(state).dump() == state


def test_a_step_adds_and_forgets_keys_and_the_rest_passes_through() -> None:
    r = Recovery.model_validate(AFTER_REPAIR)
    r.forget("health", "replacement", "jobs")
    r.verdict = "repair"
    r.health_deadline = datetime(2026, 3, 1, 13, 0, tzinfo=UTC)
    dumped = r.dump()
    assert "health" not in dumped and "replacement" not in dumped and "jobs" not in dumped
    assert dumped["verdict"] == "repair"
    assert dumped["health_deadline"] == "2026-03-01T13:00:00+00:00"
    assert dumped["woken"] == AFTER_REPAIR["woken"]


def test_typed_reads_of_the_keys_steps_need() -> None:
    r = Recovery.model_validate(AFTER_REPAIR)
    assert r.repairing is Repair.REPLACE
    assert r.deadline == datetime(2026, 3, 1, 12, 47, 3, 456789, tzinfo=UTC)
    assert Recovery().this_round == 1 and Recovery(round=0).this_round == 0
    with pytest.raises(KeyError):
        _ = Recovery().repairing
    with pytest.raises(KeyError):
        Recovery().take_task_token()
    waiting = Recovery.model_validate({"incident_id": "x", "task_token": "t0k"})
    assert waiting.take_task_token() == "t0k"
    assert waiting.dump() == {"incident_id": "x"}


def _paths(node: Any) -> set[str]:
    """The top-level state keys the ASL reads or writes (`$.key` paths)."""
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key in {"Variable", "SecondsPath", "TimeoutSecondsPath", "CausePath", "ResultPath"}:
                found |= set(re.findall(r"^\$\.(\w+)", value))
            else:
                found |= _paths(value)
    elif isinstance(node, list):
        for item in node:
            found |= _paths(item)
    return found


def test_every_key_the_state_machine_reads_or_writes_for_a_step_is_a_field() -> None:
    definition = json.loads((ROOT / "statemachines" / "node_recovery.asl.json").read_text())
    paths = _paths(definition)
    assert {"verdict", "action", "health", "poll_s", "wait_s", "cause", "error"} <= paths
    # `woken` and `escalation_error` no step reads: they pass through as they came.
    assert paths - {"woken", "escalation_error"} <= set(Recovery.model_fields)


def test_a_caught_lambda_error_is_one_line_without_its_stack_frames() -> None:
    """A Task's Catch hands on Lambda's error document as the Cause (errorMessage, errorType,
    requestId, stackTrace): the operator's note keeps the message, never the frames."""
    from hyperguard.recovery.state import CaughtError

    cause = json.dumps(
        {
            "errorMessage": "i-0abc: InstanceIdInUse a reboot is in progress\nmore detail",
            "errorType": "RepairRetryableError",
            "requestId": "5b0e8c1a-0000-4000-8000-000000000000",
            "stackTrace": [
                '  File "/var/task/app.py", line 40, in handler\n    return steps.run()\n'
            ],
        }
    )
    caught = CaughtError.model_validate({"Error": "RepairRetryableError", "Cause": cause})
    assert (
        caught.summary() == "RepairRetryableError: i-0abc: InstanceIdInUse a reboot is in progress"
    )
    plain = CaughtError.model_validate({"Error": "States.Timeout", "Cause": "The task timed out."})
    assert plain.summary() == "States.Timeout: The task timed out."
    assert CaughtError.model_validate({"Error": "Runtime.ExitError", "Cause": ""}).summary() == (
        "Runtime.ExitError"
    )
