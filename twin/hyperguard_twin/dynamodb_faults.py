"""DynamoDB's errors, answered by the emulator in place of moto for the calls a test aims
them at (`Emulator.faults`), as DynamoDB answers them."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hyperguard_twin.iam.authorizations import peek_body

FaultMatch = Callable[[str, dict[str, Any]], bool]
"""Whether an injected fault applies to a request: (caller's access key id, JSON body)."""

_DYNAMODB = "com.amazonaws.dynamodb.v20120810#"
# DynamoDB's answers to the faults the twin injects: (HTTP status, `__type`, message), as
# the DynamoDB API reference's "Common Errors" and each operation's "Errors" give them.
DYNAMODB_FAULTS: dict[str, tuple[int, str, str]] = {
    "ProvisionedThroughputExceededException": (
        400,
        f"{_DYNAMODB}ProvisionedThroughputExceededException",
        "The level of configured provisioned throughput for the table was exceeded. "
        "Consider increasing your provisioning level with the UpdateTable API.",
    ),
    "ThrottlingException": (
        400,
        "com.amazon.coral.availability#ThrottlingException",
        "Rate of requests exceeds the allowed throughput.",
    ),
    "RequestLimitExceeded": (
        400,
        f"{_DYNAMODB}RequestLimitExceeded",
        "Throughput exceeds the current throughput limit for your account.",
    ),
    "ConditionalCheckFailedException": (
        400,
        f"{_DYNAMODB}ConditionalCheckFailedException",
        "The conditional request failed",
    ),
    "InternalServerError": (500, f"{_DYNAMODB}InternalServerError", "Internal server error"),
}
_TRANSACTIONS = ("dynamodb:TransactWriteItems", "dynamodb:TransactGetItems")


@dataclass
class _PendingFault:
    call: str
    error_code: str
    remaining: int
    match: FaultMatch | None


def _request_body(environ: dict[str, Any]) -> dict[str, Any]:
    """The request's JSON body (empty if it has none), put back for moto."""
    try:
        parsed = json.loads(peek_body(environ) or b"{}")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def dynamodb_error(call: str, error_code: str, request: dict[str, Any]) -> tuple[int, Any]:
    """DynamoDB's (status, body) for `error_code`. A transaction never answers with a
    ConditionalCheckFailedException: its first conditional item fails it, and the answer
    is a TransactionCanceledException with one cancellation reason per item."""
    status, kind, message = DYNAMODB_FAULTS[error_code]
    if call not in _TRANSACTIONS or error_code != "ConditionalCheckFailedException":
        return status, {"__type": kind, "message": message}
    reasons: list[dict[str, str]] = []
    for item in request.get("TransactItems", []):
        spec: dict[str, Any] = next(iter(item.values()), {}) if isinstance(item, dict) else {}
        conditional = "ConditionCheck" in item or "ConditionExpression" in spec
        if conditional and not any(r["Code"] != "None" for r in reasons):
            reasons.append({"Code": "ConditionalCheckFailed", "Message": message})
        else:
            reasons.append({"Code": "None"})
    codes = ", ".join(r["Code"] for r in reasons)
    return 400, {
        "__type": f"{_DYNAMODB}TransactionCanceledException",
        "Message": f"Transaction cancelled, please refer cancellation reasons for specific "
        f"reasons [{codes}]",
        "CancellationReasons": reasons,
    }


class DynamoDbFaults:
    """The DynamoDB errors waiting for their calls, and those answered."""

    def __init__(self) -> None:
        self.answered: Counter[tuple[str, str]] = Counter()
        """Calls answered with an injected error: ("service:Operation", error code)."""
        self._pending: list[_PendingFault] = []
        self._lock = threading.Lock()

    def inject(
        self, call: str, error_code: str, count: int = 1, match: FaultMatch | None = None
    ) -> None:
        """The next `count` calls of `call` ("dynamodb:UpdateItem") that `match` accepts
        (None: any caller, any request) are answered with DynamoDB's error `error_code`
        instead of reaching moto, as DynamoDB answers them (DYNAMODB_FAULTS). The callers'
        SDKs retry throttles and 5xx answers by themselves: each attempt takes one."""
        service = call.partition(":")[0]
        if service != "dynamodb" or error_code not in DYNAMODB_FAULTS:
            raise ValueError(
                f"the emulator injects DynamoDB errors only ({', '.join(DYNAMODB_FAULTS)}), "
                f"not {error_code!r} on {call!r}"
            )
        if count < 1:
            raise ValueError("count must be at least 1")
        with self._lock:
            self._pending.append(_PendingFault(call, error_code, count, match))

    @property
    def pending(self) -> int:
        """Injected answers not given yet."""
        with self._lock:
            return sum(f.remaining for f in self._pending)

    def take(self, environ: dict[str, Any], key: str, call: str) -> tuple[int, Any] | None:
        """The (status, body) of the fault this request from `key` takes, if one waits."""
        with self._lock:
            if not any(f.call == call for f in self._pending):
                return None
            request = _request_body(environ)
            for fault in self._pending:
                if fault.call == call and (fault.match is None or fault.match(key, request)):
                    fault.remaining -= 1
                    if not fault.remaining:
                        self._pending.remove(fault)
                    self.answered[(call, fault.error_code)] += 1
                    return dynamodb_error(call, fault.error_code, request)
        return None
