"""Model ⇄ DynamoDB item conversion (floats travel as Decimal, None is left out)."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Collection, Iterator
from decimal import Decimal
from typing import Any
from weakref import WeakKeyDictionary

from boto3.dynamodb.types import Binary, TypeDeserializer, TypeSerializer
from botocore.config import Config
from botocore.exceptions import ClientError
from pydantic import BaseModel

from hyperguard.aws import dynamodb_table, new_session
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
    return {
        k: {"S": v} if type(v) is str else _serializer.serialize(decimals(v))
        for k, v in item.items()
    }


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


_WIRE_CLIENTS: WeakKeyDictionary[Any, Any] = WeakKeyDictionary()
_WIRE_CLIENTS_LOCK = threading.Lock()


_UNVALIDATED = Config(parameter_validation=False)
"""botocore's client-side walk of every request against the service model, off for the
wire client (D180): its requests are built here, from typed values, and DynamoDB checks what
it receives; on a pass's transactions of 100 updates the walk was most of the client's CPU."""


def wire_client(table: Any) -> Any:
    """A low-level DynamoDB client beside `table`'s own (the same region, endpoint and
    configuration, less botocore's parameter validation: D180), made once per table client.
    It takes and returns attribute values as they travel. The bulk reads and the
    transactions use it instead of the boto3 resource's client, whose layer deep-copies
    every request and walks it, and every answer, to convert Python values: on a
    scheduling pass's BatchGetItems of thousands of keys that layer cost more CPU than
    botocore itself (BENCHMARKS.md, "Reads in DynamoDB's wire form")."""
    owner = table.meta.client
    with _WIRE_CLIENTS_LOCK:
        found = _WIRE_CLIENTS.get(owner)
        if found is None:
            found = _WIRE_CLIENTS[owner] = new_session().client(
                "dynamodb",
                region_name=owner.meta.region_name,
                endpoint_url=owner.meta.endpoint_url,
                config=owner.meta.config.merge(_UNVALIDATED),
            )
            for operation in _READ_AS_SENT:
                found.meta.events.register(f"before-parse.dynamodb.{operation}", _as_sent)
        return found


_READ_AS_SENT = ("BatchGetItem", "Query", "Scan")
"""The bulk reads whose answers the wire client takes as DynamoDB sent them (D192)."""

_NO_BODY = b"{}"


def _as_sent(
    response_dict: dict[str, Any], customized_response_dict: dict[str, Any], **_: Any
) -> None:
    """A successful bulk read's answer as DynamoDB sent it (D192): its JSON is already the
    wire form this module reads (attribute values as tagged JSON, numbers as strings), so
    it is decoded by `json.loads` alone, and botocore's parser, which would visit every
    attribute value of every item to build the same dicts, is given an empty body (it
    still adds `ResponseMetadata`). An error answer, or a body that is not one JSON object,
    is botocore's to parse as before."""
    if response_dict.get("status_code") != 200:
        return
    try:
        answer = json.loads(response_dict["body"])
    except ValueError:
        return
    if not isinstance(answer, dict):
        return
    # What the client sends back (the next page's start, the keys left unprocessed) as the
    # parser gives it: a binary key part as bytes, which botocore base64-encodes on the way
    # out. (An item's binaries stay base64 text: `plain_item` reads both forms.)
    if "LastEvaluatedKey" in answer:
        answer["LastEvaluatedKey"] = _key_bytes(answer["LastEvaluatedKey"])
    for unprocessed in (answer.get("UnprocessedKeys") or {}).values():
        unprocessed["Keys"] = [_key_bytes(key) for key in unprocessed.get("Keys", [])]
    customized_response_dict.update(answer)
    response_dict["body"] = _NO_BODY


def _key_bytes(key: dict[str, Any]) -> dict[str, Any]:
    return {
        name: {"B": base64.b64decode(value["B"])} if "B" in value else value
        for name, value in key.items()
    }


_WIRE_VALUES = ("Key", "Item", "ExpressionAttributeValues")
"""The parts of a transaction's action that carry attribute values."""


def wire_actions(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """TransactWriteItems' actions with plain values (as the resource's client takes them)
    in the wire client's form: the same request at a third of the client's CPU (D180), and
    refused as the resource's client's is (ClientError, CancellationReasons)."""
    wire = []
    for action in items:
        ((kind, body),) = action.items()
        wire.append({kind: {k: to_wire(v) if k in _WIRE_VALUES else v for k, v in body.items()}})
    return wire


def plain_item(item: dict[str, Any]) -> dict[str, Any]:
    """An item as the low-level client returns it, made what `plain(from_wire(item))` makes
    it, in one walk: numbers int or float, sets lists (in the order DynamoDB sent them),
    binaries boto3's Binary (from bytes, as botocore's parser gives them, or from base64
    text, as a bulk read taken as sent has them: D192)."""
    return {name: _plain_value(value) for name, value in item.items()}


def _plain_value(value: dict[str, Any]) -> Any:
    ((tag, inner),) = value.items()
    if tag == "S" or tag == "BOOL":
        return inner
    if tag == "N":
        return _number(inner)
    if tag == "M":
        return {name: _plain_value(v) for name, v in inner.items()}
    if tag == "L":
        return [_plain_value(v) for v in inner]
    if tag == "NULL":
        return None
    if tag == "SS":
        return list(inner)
    if tag == "NS":
        return [_number(n) for n in inner]
    if tag == "B":
        return Binary(_bytes(inner))
    if tag == "BS":
        return [Binary(_bytes(b)) for b in inner]
    raise TypeError(f"{tag!r} is not a DynamoDB attribute value type")


def _bytes(value: str | bytes) -> bytes:
    """A binary value: bytes as botocore's parser gives it, base64 text as DynamoDB sends it."""
    return base64.b64decode(value) if isinstance(value, str) else value


def _number(text: str) -> int | float:
    """`plain(Decimal(text))`: an integral number as int, any other as float."""
    try:
        return int(text)
    except ValueError:
        number = Decimal(text)
        return int(number) if number == number.to_integral_value() else float(number)


def _wire_request(table: Any, request: dict[str, Any]) -> dict[str, Any]:
    """A Query or Scan of `table` with plain values, in the low-level client's form."""
    wire = {"TableName": table.name, **request}
    for plain_values in ("ExpressionAttributeValues", "ExclusiveStartKey"):
        if plain_values in wire:
            wire[plain_values] = to_wire(wire[plain_values])
    return wire


def _pages(table: Any, operation: str, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every page of a Query or Scan of `table` (plain values in `request`), in wire form."""
    read = getattr(wire_client(table), operation)
    kwargs = _wire_request(table, request)
    while True:
        page: dict[str, Any] = read(**kwargs)
        yield page
        if "LastEvaluatedKey" not in page:
            return
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _every_item(table: Any, operation: str, request: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        plain_item(item)
        for page in _pages(table, operation, request)
        for item in page.get("Items", [])
    ]


def query_all(table: Any, **query: Any) -> list[dict[str, Any]]:
    """Every item a Query returns (all pages), as plain values."""
    return _every_item(table, "query", query)


def count_all(table: Any, **query: Any) -> int:
    """How many items a Query matches (Select COUNT: no items read back; all pages)."""
    return sum(
        int(page.get("Count", 0)) for page in _pages(table, "query", {**query, "Select": "COUNT"})
    )


BATCH_GET_MAX = 100
"""BatchGetItem's limit of keys per request."""
BATCH_GET_ATTEMPTS = 8


def projection_of(attributes: Collection[str]) -> dict[str, Any]:
    """A read's ProjectionExpression of these top-level attributes (none: the whole item)."""
    if not attributes:
        return {}
    names = {f"#p{i}": name for i, name in enumerate(attributes)}
    return {"ProjectionExpression": ", ".join(names), "ExpressionAttributeNames": names}


def batch_get(
    table: Any, keys: list[dict[str, Any]], *, attributes: Collection[str] = ()
) -> list[dict[str, Any]]:
    """The items of `table` (a boto3 Table) with these (plain) keys, strongly consistent
    (missing ones left out), as plain values, in batches of 100 issued together
    (`bounded_map`, D162), in the keys' batches' order; keys DynamoDB leaves unprocessed are
    asked again with backoff, never dropped. `attributes`: only these (top-level) attributes
    of each item (a ProjectionExpression); all of them when empty."""
    projection = projection_of(attributes)
    client, name = wire_client(table), table.name
    wire_keys = [to_wire(key) for key in keys]

    def one_batch(start: int) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        request: dict[str, Any] = {
            name: {
                "Keys": wire_keys[start : start + BATCH_GET_MAX],
                "ConsistentRead": True,
                **projection,
            }
        }
        for attempt in range(BATCH_GET_ATTEMPTS):
            answer = client.batch_get_item(RequestItems=request)
            items.extend(answer["Responses"].get(name, []))
            request = answer.get("UnprocessedKeys") or {}
            if not request:
                return [plain_item(i) for i in items]
            time.sleep(min(0.05 * 2**attempt, 1.0))
        raise RuntimeError(f"BatchGetItem on {name} left keys unprocessed")

    batches = bounded_map(one_batch, range(0, len(keys), BATCH_GET_MAX))
    return [item for batch in batches for item in batch]


def scan_all(table: Any, **scan: Any) -> list[dict[str, Any]]:
    """Every item of a (small, operator-scale) table that `scan`'s filter keeps (all pages),
    as plain values."""
    return _every_item(table, "scan", scan)
