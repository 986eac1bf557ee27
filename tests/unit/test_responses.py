"""hyperguard.aws.responses: DynamoDB answers parsed as botocore parses them, for every value,
well-formed or not, and every other service's answers by botocore itself."""

from __future__ import annotations

import base64
import json
from typing import Any

import botocore.session
from botocore.parsers import JSONParser
from hypothesis import given, settings
from hypothesis import strategies as st

from hyperguard.aws import new_session
from hyperguard.aws.responses import AttributeValueJSONParser, ResponseParsers

MODEL = botocore.session.get_session().get_service_model("dynamodb")

text = st.text(max_size=12)
numbers = st.integers(-(10**12), 10**12).map(str)
blobs = st.binary(max_size=12).map(lambda b: base64.b64encode(b).decode())
scalars = st.one_of(
    text.map(lambda v: {"S": v}),
    numbers.map(lambda v: {"N": v}),
    blobs.map(lambda v: {"B": v}),
    st.booleans().map(lambda v: {"BOOL": v}),
    st.just({"NULL": True}),
    st.lists(text, max_size=3).map(lambda v: {"SS": v}),
    st.lists(numbers, max_size=3).map(lambda v: {"NS": v}),
    st.lists(st.one_of(blobs, st.none()), max_size=3).map(lambda v: {"BS": v}),
)
odd: st.SearchStrategy[dict[str, Any]] = st.one_of(
    st.just({}),  # no member
    st.just({"S": None}),  # a null member
    st.just({"X": "?"}),  # a member this botocore does not know
    st.just({"__type": "AttributeValue", "S": "a"}),
    st.tuples(text, numbers).map(lambda t: {"S": t[0], "N": t[1]}),  # two members
)
values = st.recursive(
    st.one_of(scalars, odd),
    lambda children: st.one_of(
        st.dictionaries(text, st.one_of(children, st.none()), max_size=3).map(lambda m: {"M": m}),
        st.lists(st.one_of(children, st.none()), max_size=3).map(lambda v: {"L": v}),
    ),
    max_leaves=12,
)
items = st.dictionaries(st.text(min_size=1, max_size=8), values, max_size=5)


def both(operation: str, body: dict[str, Any]) -> tuple[Any, Any]:
    shape = MODEL.operation_model(operation).output_shape
    response = {"body": json.dumps(body).encode(), "headers": {}, "status_code": 200}
    return JSONParser().parse(response, shape), AttributeValueJSONParser().parse(response, shape)


@settings(max_examples=300, deadline=None)
@given(items)
def test_an_item_is_parsed_as_botocore_parses_it(item: dict[str, Any]) -> None:
    stock, fast = both("GetItem", {"Item": item})
    assert fast == stock


@settings(max_examples=100, deadline=None)
@given(st.lists(items, max_size=4), st.one_of(st.none(), items))
def test_query_and_batch_answers_are_parsed_as_botocore_parses_them(
    found: list[dict[str, Any]], last: dict[str, Any] | None
) -> None:
    query = {"Items": found, "Count": len(found), "ScannedCount": len(found)}
    if last is not None:
        query["LastEvaluatedKey"] = last
    stock, fast = both("Query", query)
    assert fast == stock
    batch = {"Responses": {"Jobs": found}, "UnprocessedKeys": {"Jobs": {"Keys": found}}}
    stock, fast = both("BatchGetItem", batch)
    assert fast == stock


def test_a_blob_is_decoded_and_a_malformed_value_left_to_botocore() -> None:
    stock, fast = both(
        "GetItem",
        {"Item": {"b": {"B": base64.b64encode(b"\x00\xff").decode()}, "two": {"S": "a", "N": "1"}}},
    )
    assert fast == stock
    assert fast["Item"]["b"] == {"B": b"\x00\xff"}
    assert fast["Item"]["two"] == {"S": "a", "N": "1"}  # botocore keeps both members


def test_the_service_sessions_parse_json_with_it() -> None:
    session = new_session()
    factory = session._session.get_component("response_parser_factory")
    assert isinstance(factory, ResponseParsers)
    assert isinstance(factory.create_parser("json"), AttributeValueJSONParser)
    assert type(factory.create_parser("query")) is not AttributeValueJSONParser
