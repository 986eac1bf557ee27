"""Step Functions: moto sends no "Step Functions Execution Status Change" events (the twin
puts them on the default bus, in AWS's shape, when a Standard execution ends), and its
SendTaskFailure drops the cause."""

from __future__ import annotations

import json
from typing import Any


def install() -> None:
    _emit_execution_events()
    _keep_task_failure_cause()


def _epoch_ms(value: Any) -> int | None:
    return int(value.timestamp() * 1000) if value is not None else None


def status_change_event(execution: Any) -> dict[str, Any]:
    """The PutEvents entry Step Functions sends when a Standard execution ends (the detail
    fields of AWS's "Step Functions Execution Status Change")."""
    status = getattr(execution.exec_status, "value", execution.exec_status)
    output = execution.output
    detail = {
        "executionArn": execution.exec_arn,
        "stateMachineArn": execution.state_machine.arn,
        "name": execution.name,
        "status": status,
        "startDate": _epoch_ms(execution.start_date),
        "stopDate": _epoch_ms(execution.stop_date),
        "input": execution.execution_input,
        "output": json.dumps(output) if output is not None and status == "SUCCEEDED" else None,
        "inputDetails": {"included": True},
        "outputDetails": {"included": True} if status == "SUCCEEDED" else None,
    }
    return {
        "Source": "aws.states",
        "DetailType": "Step Functions Execution Status Change",
        "Detail": json.dumps(detail),
        "Resources": [execution.exec_arn],
        "EventBusName": "default",
    }


def _emit_execution_events() -> None:
    from moto.events.models import events_backends
    from moto.stepfunctions.parser.backend.execution import BaseExecutionWorkerCommunication

    original = BaseExecutionWorkerCommunication._reflect_execution_status
    if getattr(original, "emits_events", False):
        return

    def reflect_and_emit(self: Any) -> None:
        original(self)  # type: ignore[no-untyped-call]
        execution = self.execution
        backend = events_backends[execution.account_id][execution.region_name]
        backend.put_events([status_change_event(execution)])

    reflect_and_emit.emits_events = True  # type: ignore[attr-defined]
    BaseExecutionWorkerCommunication._reflect_execution_status = reflect_and_emit  # type: ignore[method-assign]


def _keep_task_failure_cause() -> None:
    """moto's SendTaskFailure drops `cause`; Step Functions passes it on to the Catch
    (`$.error.Cause`), where an operator's veto reason travels."""
    from moto.core.responses import EmptyResult
    from moto.stepfunctions.responses import StepFunctionResponse

    original = StepFunctionResponse.send_task_failure
    if getattr(original, "keeps_cause", False):
        return

    def send_task_failure(self: Any) -> Any:
        self.stepfunction_backend.send_task_failure(
            self._get_param("taskToken"),
            error=self._get_param("error"),
            cause=self._get_param("cause"),
        )
        return EmptyResult()

    send_task_failure.keeps_cause = True  # type: ignore[attr-defined]
    StepFunctionResponse.send_task_failure = send_task_failure  # type: ignore[method-assign]
