"""Model ⇄ DynamoDB item conversion (floats travel as Decimal, None is left out)."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from pydantic import BaseModel

from hyperguard.aws import dynamodb_table

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


def to_item(model: BaseModel, **extra: Any) -> dict[str, Any]:
    item: dict[str, Any] = json.loads(model.model_dump_json(exclude_none=True), parse_float=Decimal)
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


def scan_all(table: Any, **scan: Any) -> list[dict[str, Any]]:
    """Every item of a (small, operator-scale) table that `scan`'s filter keeps (all pages),
    Decimals made plain."""
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = dict(scan)
    while True:
        page = table.scan(**kwargs)
        items.extend(plain(i) for i in page.get("Items", []))
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
