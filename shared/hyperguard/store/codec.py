"""Model ⇄ DynamoDB item conversion (floats travel as Decimal, None is left out)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError
from pydantic import BaseModel

from hyperguard.aws import dynamodb_table
from hyperguard.concurrency import bounded_map

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


def to_item(model: BaseModel, *, exclude: set[str] | None = None, **extra: Any) -> dict[str, Any]:
    """`model` as a plain item (None fields left out, those named in `exclude` too), with
    `extra` attributes added."""
    item: dict[str, Any] = json.loads(
        model.model_dump_json(exclude_none=True, exclude=exclude), parse_float=Decimal
    )
    item.update(extra)
    return item


def decimals(value: Any) -> Any:
    """`value` with every float a Decimal, as boto3 wants numbers."""
    if isinstance(value, float):
        return Decimal(str(value))
    if isinstance(value, dict):
        return {k: decimals(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decimals(v) for v in value]
    return value


def to_wire(item: dict[str, Any]) -> dict[str, Any]:
    """A plain item in the low-level client's attribute-value form (floats as Decimal)."""
    return {k: _serializer.serialize(decimals(v)) for k, v in item.items()}


def from_wire(item: dict[str, Any]) -> dict[str, Any]:
    return {k: _deserializer.deserialize(v) for k, v in item.items()}


def plain(value: Any) -> Any:
    """Decimals back to int/float so that pydantic and json see ordinary numbers."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | set):
        return [plain(v) for v in value]
    return value


class TableStore:
    """A repository over one DynamoDB table, opened on first use (nothing connects at import);
    tests hand in a table."""

    def __init__(self, table_name: str, table: Any | None = None) -> None:
        self.table_name = table_name
        self._table = table

    @property
    def table(self) -> Any:
        if self._table is None:
            self._table = dynamodb_table(self.table_name)
        return self._table


def condition_failed(exc: ClientError) -> bool:
    """A write refused because its ConditionExpression did not hold: nothing was written."""
    return bool(exc.response["Error"]["Code"] == "ConditionalCheckFailedException")


def _every_page(read: Callable[..., Any], request: dict[str, Any]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    kwargs = dict(request)
    while True:
        page = read(**kwargs)
        items.extend(plain(i) for i in page.get("Items", []))
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def query_all(table: Any, **query: Any) -> list[dict[str, Any]]:
    """Every item a Query returns (all pages), Decimals made plain."""
    return _every_page(table.query, query)


def count_all(table: Any, **query: Any) -> int:
    """How many items a Query matches (Select COUNT: no items read back; all pages)."""
    total = 0
    kwargs: dict[str, Any] = {**query, "Select": "COUNT"}
    while True:
        page = table.query(**kwargs)
        total += int(page.get("Count", 0))
        if "LastEvaluatedKey" not in page:
            return total
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


BATCH_GET_MAX = 100
"""BatchGetItem's limit of keys per request."""
BATCH_GET_ATTEMPTS = 8


def batch_get(
    table: Any, keys: list[dict[str, Any]], *, attributes: Collection[str] = ()
) -> list[dict[str, Any]]:
    """The items of `table` (a boto3 Table) with these keys, strongly consistent (missing
    ones left out), in batches of 100 issued together (`bounded_map`, D162), in the keys'
    batches' order; keys DynamoDB leaves unprocessed are asked again with backoff, never
    dropped. `attributes`: only these (top-level) attributes of each item (a
    ProjectionExpression); all of them when empty."""
    projection: dict[str, Any] = {}
    if attributes:
        names = {f"#p{i}": name for i, name in enumerate(attributes)}
        projection = {
            "ProjectionExpression": ", ".join(names),
            "ExpressionAttributeNames": names,
        }

    def one_batch(start: int) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        request: dict[str, Any] = {
            table.name: {
                "Keys": keys[start : start + BATCH_GET_MAX],
                "ConsistentRead": True,
                **projection,
            }
        }
        for attempt in range(BATCH_GET_ATTEMPTS):
            answer = table.meta.client.batch_get_item(RequestItems=request)
            items.extend(answer["Responses"].get(table.name, []))
            request = answer.get("UnprocessedKeys") or {}
            if not request:
                return [plain(i) for i in items]
            time.sleep(min(0.05 * 2**attempt, 1.0))
        raise RuntimeError(f"BatchGetItem on {table.name} left keys unprocessed")

    batches = bounded_map(one_batch, range(0, len(keys), BATCH_GET_MAX))
    return [item for batch in batches for item in batch]


def scan_all(table: Any, **scan: Any) -> list[dict[str, Any]]:
    """Every item of a (small, operator-scale) table that `scan`'s filter keeps (all pages),
    Decimals made plain."""
    return _every_page(table.scan, scan)
