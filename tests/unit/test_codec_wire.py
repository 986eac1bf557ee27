"""hyperguard.store.codec's reads in DynamoDB's wire form: items decoded in one walk exactly as
boto3's deserializer and `plain` decode them, keys encoded as boto3's serializer encodes them,
and one low-level client per table client, beside it."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from boto3.dynamodb.types import Binary, TypeSerializer
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from hypothesis import given, settings
from hypothesis import strategies as st

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
