"""hyperguard.store.codec's reads in DynamoDB's wire form: items decoded in one walk exactly as
boto3's deserializer and `plain` decode them, keys encoded as boto3's serializer encodes them,
one low-level client per table client, beside it, and its bulk reads taken as DynamoDB sent
them with the same result as the parser's."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
import pytest
from boto3.dynamodb.types import Binary, TypeSerializer
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.wsgi_client import aws_response

from hyperguard.aws import new_session
from hyperguard.store.codec import (
    decimals,
    from_wire,
    plain,
    plain_item,
    to_wire,
    wire_actions,
    wire_client,
)

text = st.text(max_size=12)
numbers = st.one_of(  # DynamoDB keeps up to 38 significant digits
    st.integers(-(10**30), 10**30).map(str),
    st.decimals(-(10**30), 10**30, allow_nan=False, allow_infinity=False, places=4).map(str),
    st.sampled_from(["1E+2", "-0", "0.0", "12.500", "1e-3", "-7.25E+1"]),
)
scalars = st.one_of(
    text.map(lambda v: {"S": v}),
    numbers.map(lambda v: {"N": v}),
    st.binary(max_size=8).map(lambda v: {"B": v}),
    st.booleans().map(lambda v: {"BOOL": v}),
    st.just({"NULL": True}),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.dictionaries(text, children, max_size=3).map(lambda m: {"M": m}),
        st.lists(children, max_size=3).map(lambda v: {"L": v}),
    ),
    max_leaves=12,
)
items = st.dictionaries(st.text(min_size=1, max_size=8), values, max_size=5)


@settings(max_examples=400, deadline=None)
@given(items)
def test_an_item_is_decoded_as_boto3_and_plain_decode_it(item: dict[str, Any]) -> None:
    expected = plain(from_wire(item))
    decoded = plain_item(item)
    assert decoded == expected
    assert repr(decoded) == repr(expected)  # int stays int, float float: 1 == 1.0 hides it


def test_sets_come_back_as_lists_in_the_order_dynamodb_sent_them() -> None:
    item = {"s": {"SS": ["b", "a"]}, "n": {"NS": ["2", "1.5"]}, "b": {"BS": [b"y", b"x"]}}
    assert plain_item(item) == {"s": ["b", "a"], "n": [2, 1.5], "b": [Binary(b"y"), Binary(b"x")]}


def test_a_value_that_is_not_an_attribute_value_is_refused() -> None:
    for odd in ({"X": "?"}, {}, {"S": "a", "N": "1"}):
        try:
            plain_item({"a": odd})
        except (TypeError, ValueError):
            continue
        raise AssertionError(f"{odd} was decoded")


plain_values = st.recursive(
    st.one_of(
        text,
        st.integers(-(10**20), 10**20),
        st.floats(allow_nan=False, allow_infinity=False, width=32),
        st.booleans(),
        st.none(),
    ),
    lambda children: st.one_of(
        st.dictionaries(text, children, max_size=3), st.lists(children, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=8), plain_values, max_size=5))
def test_a_plain_item_is_encoded_as_boto3_encodes_it(item: dict[str, Any]) -> None:
    serializer = TypeSerializer()
    assert to_wire(item) == {k: serializer.serialize(decimals(v)) for k, v in item.items()}


def test_a_table_client_has_one_wire_client_beside_it() -> None:
    resource = boto3.resource("dynamodb", region_name="eu-west-1", endpoint_url="http://h:1")
    table, same = resource.Table("a"), resource.Table("b")
    other = boto3.resource("dynamodb", region_name="eu-west-1").Table("a")
    client = wire_client(table)
    assert wire_client(same) is client
    assert wire_client(other) is not client
    assert client.meta.region_name == "eu-west-1"
    assert client.meta.endpoint_url == "http://h:1"
    assert client.meta.config.retries == table.meta.client.meta.config.retries
    # a low-level client: values go out and come back as they travel
    key = {"k": {"S": "x"}}
    with Stubber(client) as stub:
        stub.add_response(
            "get_item", {"Item": {"n": {"N": "1"}}}, expected_params={"TableName": "a", "Key": key}
        )
        assert client.get_item(TableName="a", Key=key)["Item"] == {"n": {"N": "1"}}


plain_values = st.recursive(
    st.one_of(
        st.text(max_size=12),
        st.integers(-(10**12), 10**12),
        st.integers(-(10**9), 10**9).map(lambda n: n / 1000),  # the stores' floats
        st.booleans(),
        st.none(),
    ),
    lambda children: st.one_of(
        st.dictionaries(st.text(max_size=6), children, max_size=3),
        st.lists(children, max_size=3),
    ),
    max_leaves=10,
)


@settings(max_examples=60, deadline=None)
@given(
    values=st.dictionaries(st.text(min_size=1, max_size=6).map(":{}".format), plain_values),
    item=st.dictionaries(st.text(min_size=1, max_size=6), plain_values, max_size=4),
)
def test_transaction_actions_in_wire_form_are_what_botocore_validates(
    values: dict[str, Any], item: dict[str, Any]
) -> None:
    """The wire client sends without botocore's parameter validation (D180), so what
    `wire_actions` builds must pass it: an Update, a ConditionCheck and a Put, with the plain
    values the stores write (floats, nested maps and lists, None), validated against
    TransactWriteItems' input shape, and each value as boto3's serializer makes it."""
    from botocore.validate import ParamValidator

    update: dict[str, Any] = {
        "TableName": "jobs",
        "Key": {"job_id": "a"},
        "UpdateExpression": "SET #r = :r",
        "ConditionExpression": "attribute_exists(job_id)",
        "ExpressionAttributeNames": {"#r": "reason"},
        "ExpressionAttributeValues": {":r": "x", **values},
    }
    check: dict[str, Any] = {
        "TableName": "teams",
        "Key": {"team": "t"},
        "ConditionExpression": "v = :v",
        "ExpressionAttributeValues": {":v": 3},
    }
    actions = [
        {"ConditionCheck": check},
        {"Update": update},
        {"Put": {"TableName": "jobs", "Item": {"job_id": "b", **item}}},
    ]
    client = boto3.client("dynamodb", region_name="us-east-1")
    shape = client.meta.service_model.operation_model("TransactWriteItems").input_shape
    wire = wire_actions(actions)
    report = ParamValidator().validate({"TransactItems": wire}, shape)
    assert not report.has_errors(), report.generate_report()
    serializer = TypeSerializer()
    assert wire[1]["Update"]["ExpressionAttributeValues"] == {
        k: serializer.serialize(decimals(v)) for k, v in update["ExpressionAttributeValues"].items()
    }
    assert wire[0]["ConditionCheck"]["ConditionExpression"] == "v = :v"  # the rest as it was


def test_the_wire_client_leaves_parameter_validation_to_dynamodb(aws_env: None) -> None:
    """D180: botocore's client-side walk is off on the wire client, and only there: a
    malformed request reaches the wire (where DynamoDB would refuse it), while the table's
    own client still refuses it before sending."""
    from botocore.exceptions import ParamValidationError

    table = boto3.resource("dynamodb", region_name="us-east-1").Table("jobs")
    sent: list[str] = []

    def send(request: Any, **_: Any) -> None:
        sent.append(request.url)

    malformed: dict[str, Any] = {"jobs": {"Keys": [{"job_id": {"S": "a"}}], "ConsistentRead": 1}}
    for client in (wire_client(table), table.meta.client):
        client.meta.events.register("request-created.dynamodb.BatchGetItem", send)
    with pytest.raises(ParamValidationError):
        table.meta.client.batch_get_item(RequestItems=malformed)
    assert sent == []
    with pytest.raises(ClientError) as refused:  # by the emulator, as DynamoDB refuses it
        wire_client(table).batch_get_item(RequestItems=malformed)
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert len(sent) == 1


def _as_sent_by_dynamodb(value: dict[str, Any]) -> dict[str, Any]:
    """An attribute value as it travels in DynamoDB's JSON: binaries base64 text."""
    ((tag, inner),) = value.items()
    if tag == "B":
        return {"B": base64.b64encode(inner).decode()}
    if tag == "M":
        return {"M": {k: _as_sent_by_dynamodb(v) for k, v in inner.items()}}
    if tag == "L":
        return {"L": [_as_sent_by_dynamodb(v) for v in inner]}
    return value


@contextmanager
def _answering(client: Any, operation: str, status: int, body: bytes) -> Iterator[Any]:
    """`client`, its every `operation` answered with this status and body, as sent."""

    def send(request: Any, **_: Any) -> Any:
        headers = {"x-amzn-RequestId": "r", "Content-Type": "application/x-amz-json-1.0"}
        return aws_response(request.url, status, headers, body)

    event = f"before-send.dynamodb.{operation}"
    client.meta.events.register(event, send, unique_id="answer")
    try:
        yield client
    finally:
        client.meta.events.unregister(event, unique_id="answer")


keys = st.dictionaries(
    st.sampled_from(["job_id", "k", "b"]),
    st.one_of(
        text.map(lambda v: {"S": v}),
        numbers.map(lambda v: {"N": v}),
        st.binary(max_size=8).map(lambda v: {"B": v}),
    ),
    min_size=1,
)


@pytest.fixture(scope="module")
def clients() -> Iterator[tuple[Any, Any]]:
    """A wire client, and a plain client with the project's parser, of one endpoint, with
    credentials to sign with (nothing is sent: each answer is given at `before-send`)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AWS_ACCESS_KEY_ID", "testing")
        env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        resource = boto3.resource("dynamodb", region_name="us-east-1", endpoint_url="http://h:1")
        parsed = new_session().client(
            "dynamodb", region_name="us-east-1", endpoint_url="http://h:1"
        )
        yield wire_client(resource.Table("jobs")), parsed


def _decoded(answer: dict[str, Any], decode: Any) -> dict[str, Any]:
    """An answer with its items decoded to plain values."""
    out = {k: v for k, v in answer.items() if k not in ("Items", "Responses")}
    if "Items" in answer:
        out["Items"] = [decode(i) for i in answer["Items"]]
    if "Responses" in answer:
        out["Responses"] = {t: [decode(i) for i in v] for t, v in answer["Responses"].items()}
    return out


@settings(max_examples=150, deadline=None)
@given(items=st.lists(items, max_size=4), start=st.none() | keys, left=st.lists(keys, max_size=3))
def test_bulk_reads_taken_as_sent_are_what_the_parser_gives(
    clients: tuple[Any, Any],
    items: list[dict[str, Any]],
    start: dict[str, Any] | None,
    left: list[dict[str, Any]],
) -> None:
    """D192: the wire client takes a successful BatchGetItem or Query answer as DynamoDB's
    JSON sent it, without the parser's walk. What the caller reads of it is what it reads
    of the parser's answer, binaries and numbers included, and what it sends back (a next
    page's start, the keys left unprocessed) is the parser's exactly."""
    sent = [{k: _as_sent_by_dynamodb(v) for k, v in item.items()} for item in items]
    answers: dict[str, dict[str, Any]] = {
        "Query": {"Items": sent, "Count": len(sent), "ScannedCount": len(sent)},
        "BatchGetItem": {"Responses": {"jobs": sent}, "UnprocessedKeys": {}},
    }
    if start is not None:
        answers["Query"]["LastEvaluatedKey"] = {
            k: _as_sent_by_dynamodb(v) for k, v in start.items()
        }
    if left:
        answers["BatchGetItem"]["UnprocessedKeys"] = {
            "jobs": {
                "Keys": [{k: _as_sent_by_dynamodb(v) for k, v in key.items()} for key in left],
                "ConsistentRead": True,
            }
        }
    wire, parsed = clients
    query = {
        "TableName": "jobs",
        "KeyConditionExpression": "k = :k",
        "ExpressionAttributeValues": {":k": {"S": "x"}},
    }
    batch = {"RequestItems": {"jobs": {"Keys": [{"job_id": {"S": "a"}}]}}}
    for operation, request in (("Query", query), ("BatchGetItem", batch)):
        body = json.dumps(answers[operation]).encode()
        method = "query" if operation == "Query" else "batch_get_item"
        with _answering(wire, operation, 200, body) as client:
            fast = getattr(client, method)(**request)
        with _answering(parsed, operation, 200, body) as client:
            slow = getattr(client, method)(**request)
        # the items as DynamoDB sent them (the parser makes bytes of binaries), read as the
        # parser's are read
        assert fast.get("Items", fast.get("Responses", {}).get("jobs")) == sent
        assert _decoded(fast, plain_item) == _decoded(slow, lambda i: plain(from_wire(i)))
        assert fast.get("LastEvaluatedKey") == slow.get("LastEvaluatedKey")
        assert fast.get("UnprocessedKeys") == slow.get("UnprocessedKeys")


def test_a_refused_bulk_read_is_left_to_the_parser(clients: tuple[Any, Any]) -> None:
    """An error answer is botocore's to parse: the same ClientError, code and message."""
    body = json.dumps(
        {
            "__type": "com.amazonaws.dynamodb.v20120810#ResourceNotFoundException",
            "message": "Requested resource not found",
        }
    ).encode()
    with (
        _answering(clients[0], "Query", 400, body) as client,
        pytest.raises(ClientError) as refused,
    ):
        client.query(
            TableName="jobs",
            KeyConditionExpression="k = :k",
            ExpressionAttributeValues={":k": {"S": "x"}},
        )
    assert refused.value.response["Error"] == {
        "Code": "ResourceNotFoundException",
        "Message": "Requested resource not found",
    }
