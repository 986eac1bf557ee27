"""botocore's JSON response parser, with DynamoDB's attribute values read directly.

botocore parses a response by walking the operation's output shape node by node. For
DynamoDB that walk visits every attribute value of every item as a tagged-union structure
(a dict copied and filtered to check it has one member, then each member looked up in the
shape): reading 14,000 job items of about 900 bytes took 2.5 s of CPU on this project's
benchmark machine, against 0.26 s to decode the same JSON. A scheduling pass reads every
active job strongly consistent, so that walk was most of a busy pass's CPU (BENCHMARKS.md).

`ResponseParsers` is a botocore ResponseParserFactory whose JSON parser reads a value of
DynamoDB's `AttributeValue` shape (and a map of them, an item) in one recursive function with
the same result as botocore's walk, for a value as DynamoDB sends it (one member set, not
null): strings, numbers (as strings), booleans and NULL as they are, blobs through
botocore's blob parser, sets and lists element by element (a null element kept as None),
maps recursively. Any other value (no member, two, one this code does not know, a null)
is walked by botocore, which decides what it means; so is every value of an
`AttributeValue` shape whose members are not the ten this code knows (a future botocore
adding a type). Every other shape, and every other protocol, is botocore's.
tests/unit/test_responses.py checks the two parsers agree on generated values and responses.
"""

from __future__ import annotations

from typing import Any

from botocore.model import Shape
from botocore.parsers import JSONParser, ResponseParser, ResponseParserFactory

ATTRIBUTE_VALUE_MEMBERS = frozenset({"S", "N", "B", "SS", "NS", "BS", "M", "L", "NULL", "BOOL"})
"""DynamoDB's AttributeValue members (botocore's dynamodb 2012-08-10 model)."""
_AS_IS = frozenset({"S", "N", "NULL", "BOOL"})
_LISTS = frozenset({"SS", "NS"})


def _is_attribute_value(shape: Shape) -> bool:
    return (
        shape.name == "AttributeValue"
        and shape.type_name == "structure"
        and set(shape.members) == ATTRIBUTE_VALUE_MEMBERS
        and all(m.serialization.get("name", n) == n for n, m in shape.members.items())
    )


class AttributeValueJSONParser(JSONParser):  # type: ignore[misc]  # botocore is untyped
    """JSONParser reading DynamoDB attribute values (and items) in one pass each."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._known: dict[int, tuple[Shape, bool]] = {}
        """Per shape seen (kept, so that its id is not reused): whether it is AttributeValue."""

    def _fast(self, shape: Shape) -> bool:
        known = self._known.get(id(shape))
        if known is None:
            known = self._known[id(shape)] = (shape, _is_attribute_value(shape))
        return known[1]

    def _parse_shape(self, shape: Shape, node: Any) -> Any:
        if shape.type_name == "map" and node is not None and self._fast(shape.value):
            value = shape.value
            return {key: self._attribute_value(value, item) for key, item in node.items()}
        if self._fast(shape):
            return self._attribute_value(shape, node)
        return super()._parse_shape(shape, node)

    def _attribute_value(self, shape: Shape, node: Any) -> Any:
        """A well-formed value (one known member, not null) read directly; anything else is
        left to botocore's walk, which decides what it means."""
        if node is None:
            return None
        if len(node) == 1:
            ((tag, value),) = node.items()
            if value is not None:
                if tag in _AS_IS:
                    return {tag: value}
                if tag == "M":
                    return {"M": {k: self._attribute_value(shape, v) for k, v in value.items()}}
                if tag == "L":
                    return {"L": [self._attribute_value(shape, item) for item in value]}
                if tag in _LISTS:
                    return {tag: list(value)}
                if tag == "B":
                    return {"B": self._blob_parser(value)}
                if tag == "BS":
                    return {"BS": [None if b is None else self._blob_parser(b) for b in value]}
        return self._handle_structure(shape, node)


class ResponseParsers(ResponseParserFactory):  # type: ignore[misc]
    """botocore's parser factory, with AttributeValueJSONParser for the JSON protocol."""

    def create_parser(self, protocol_name: str) -> ResponseParser:
        if protocol_name == "json":
            return AttributeValueJSONParser(**self._defaults)
        return super().create_parser(protocol_name)
