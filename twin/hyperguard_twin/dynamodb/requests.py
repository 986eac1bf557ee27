"""DynamoDB refuses a request that does not fit its operation's input shape before doing
anything; moto does not check shapes. The service's wire client sends without botocore's
client-side check (D180), so the emulator makes it, as DynamoDB does: each request's
parameters, as moto parsed them, against botocore's model of the operation, and a request
that fails is answered ValidationException with botocore's report."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache, wraps
from typing import Any


@cache
def _input_shape(action: str) -> Any:
    from moto.core.utils import get_service_model

    return get_service_model("dynamodb").operation_model(action).input_shape


def shape_checked_requests(call_action: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`DynamoHandler.call_action`, after the request's parameters are checked against the
    operation's input shape."""
    from botocore.validate import ParamValidator
    from moto.dynamodb.exceptions import MockValidationException

    validator = ParamValidator()

    @wraps(call_action)
    def checked(self: Any) -> Any:
        shape = _input_shape(self._get_action())
        report = validator.validate(getattr(self, "params", None) or {}, shape)
        if report.has_errors():
            raise MockValidationException(report.generate_report())
        return call_action(self)

    checked.unchecked = call_action  # type: ignore[attr-defined]  # what a second install wraps
    return checked
