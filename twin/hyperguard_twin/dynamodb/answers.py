"""DynamoDB's answers on the wire: the item operations' answers dumped as moto holds them,
and stored values made plain without moto's generic walk."""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

FAST_SERIALISED = frozenset(
    {
        "GetItem",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "Query",
        "Scan",
        "BatchGetItem",
        "BatchWriteItem",
        "TransactWriteItems",
    }
)
"""DynamoDB operations whose answers moto already holds in wire form."""
CHECKED_RESPONSES = 5
"""Answers of each of them compared with moto's own serialisation before the fast path is
trusted."""
CHECKED_ITEMS = 20
"""Items of a checked answer's list (a Scan or Query page, a table's BatchGetItem answer) that
are compared: moto's walk of a whole page of a megabyte took seconds, and every item goes
through the same code in both serialisations."""


def _sample(result: dict[str, Any]) -> dict[str, Any]:
    """The answer with at most CHECKED_ITEMS items in each list of items it holds."""
    sample = dict(result)
    if isinstance(sample.get("Items"), list):
        sample["Items"] = sample["Items"][:CHECKED_ITEMS]
    if isinstance(sample.get("Responses"), dict):
        sample["Responses"] = {t: items[:CHECKED_ITEMS] for t, items in sample["Responses"].items()}
    return sample


def _holds_none(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, dict):
        return any(_holds_none(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_none(v) for v in value)
    return False


def _dumped(result: dict[str, Any], members: Any) -> str | None:
    """The answer's members as JSON; None when a value is not JSON's (a binary attribute's
    bytes, which moto's shape walk base64-encodes)."""
    try:
        return json.dumps({k: v for k, v in result.items() if k in members})
    except TypeError:
        return None


def fast_dynamodb_responses(checked: Counter[str]) -> Callable[..., Any]:
    """A replacement for moto's `ActionResult.execute_result`. moto turns every answer into
    JSON by walking botocore's output shape attribute by attribute: most of the emulator's
    CPU once job items carry their histories. The answers of DynamoDB's item operations are
    already in wire form, so they are dumped as they are, keeping only the output shape's
    top-level members (moto adds a legacy `ConsumedCapacityUnits` to DeleteItem's answer,
    which the shape walk drops). The first CHECKED_RESPONSES of each operation (counted in
    `checked`) are compared with moto's own serialisation (of their first CHECKED_ITEMS items
    when they hold more); an operation whose answer ever differs is logged and left to moto
    from then on. An answer holding a null, which the shape walk would leave out, or a binary
    value (B, BS: bytes, which the shape walk base64-encodes) is always serialised by moto.
    Every other service's answer is moto's."""
    from moto.core.responses import ActionResult

    current = ActionResult.execute_result
    serialise = getattr(current, "__wrapped__", current)  # moto's own, if already replaced
    headers: dict[str, dict[str, str]] = {}
    differed: set[str] = set()

    def execute_result(self: Any, context: Any) -> Any:
        operation = context.operation_model.name
        if (
            context.service_model.service_name != "dynamodb"
            or operation not in FAST_SERIALISED
            or isinstance(self.result, Exception)
            or _holds_none(self.result)
        ):
            return serialise(self, context)
        if operation in differed:
            return serialise(self, context)
        body = _dumped(self.result, context.operation_model.output_shape.members)
        if body is None:
            return serialise(self, context)
        if checked[operation] < CHECKED_RESPONSES or operation not in headers:
            sample = _sample(self.result)
            whole = sample == self.result
            status, expected_headers, expected = serialise(
                self if whole else ActionResult(sample), context
            )
            fast = body if whole else _dumped(sample, context.operation_model.output_shape.members)
            if status != 200 or fast is None or json.loads(expected) != json.loads(fast):
                differed.add(operation)
                logger.warning("fast %s answer differs from moto's; moto serialises it", operation)
                return (status, expected_headers, expected) if whole else serialise(self, context)
            checked[operation] += 1
            headers[operation] = dict(expected_headers)
            return status, expected_headers, expected if whole else body
        return 200, dict(headers[operation]), body

    execute_result.__wrapped__ = serialise  # type: ignore[attr-defined]
    return execute_result


def plain_answers(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A replacement for moto's `dynamo_to_dict` (`convert`), which turns an answer's stored
    values into plain ones for the serialiser: the same result, with exact type checks for
    what an answer is made of (DynamoType, dicts, lists, strings, numbers, booleans) before
    moto's isinstance and `hasattr(to_json)` tests, which cost most of a large BatchGetItem
    (every attribute of every item). Binary values and anything else are `convert`'s."""
    from moto.dynamodb.models.dynamo_type import DynamoType, LimitedSizeDict

    scalars = (str, int, bool, float, type(None))
    mappings = (dict, LimitedSizeDict)

    def plain(obj: Any) -> Any:
        kind = type(obj)
        if kind is DynamoType:
            if obj.type in ("B", "BS"):
                return convert(obj)
            return {obj.type: plain(obj.value)}
        if kind in mappings:
            return {k: plain(v) for k, v in obj.items()}
        if kind is list:
            return [plain(v) for v in obj]
        if kind in scalars:
            return obj
        return convert(obj)

    plain.__wrapped__ = convert  # type: ignore[attr-defined]
    return plain
