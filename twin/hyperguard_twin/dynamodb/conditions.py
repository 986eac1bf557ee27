"""Condition expressions parsed once for what they mean."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

_PLACEHOLDER = re.compile(r"[#:][A-Za-z0-9_]+")
CONDITIONS_KEPT = 4096
"""Parsed condition expressions the emulator keeps (least recently used go first)."""


def parsed_conditions(create: Callable[..., Any]) -> Callable[..., Any]:
    """A replacement for moto's `create_condition_expression_parser` (`create`): a parser
    whose parse is kept, by the expression and the names and values it refers to, and handed
    out again (with the names and values it found) for the same expression with the same
    meaning. Every conditional write parses its condition, and the lease's, a quota's and a
    transition's are the same expressions over the same values all through a scheduling pass:
    moto's lexer and parser were a sixth of a pass once it admits 600 jobs. moto evaluates a
    parsed condition against an item without changing it; its `get_filter_expression` finds
    this replacement in its module, as the backend and the responses do. An expression that
    refers to a name or value not given, or that fails to parse, is parsed anew each time
    (moto raises)."""
    kept: dict[tuple[Any, ...], tuple[Any, list[str], list[str]]] = {}

    class KeptParser:
        def __init__(self, expression: Any, names: Any, values: Any) -> None:
            self.parser = create(expression, names, values)
            self.key = _condition_key(expression, names, values)
            self.expr_attr_names_found: list[str] = []
            self.expr_attr_values_found: list[str] = []

        def parse(self) -> Any:
            found = kept.pop(self.key, None) if self.key is not None else None
            if found is None:
                op = self.parser.parse()
                found = (
                    op,
                    list(self.parser.expr_attr_names_found),
                    list(self.parser.expr_attr_values_found),
                )
            if self.key is not None:
                kept[self.key] = found  # the newest last
                if len(kept) > CONDITIONS_KEPT:
                    del kept[next(iter(kept))]
            op, names_found, values_found = found
            self.expr_attr_names_found = list(names_found)
            self.expr_attr_values_found = list(values_found)
            return op

    def kept_parser(expression: Any, names: Any, values: Any) -> Any:
        return KeptParser(expression, names, values)

    kept_parser.__wrapped__ = create  # type: ignore[attr-defined]
    return kept_parser


def _condition_key(expression: Any, names: Any, values: Any) -> tuple[Any, ...] | None:
    """What a condition means: the expression, and the names and values it refers to (None:
    not a plain one, or one that refers to something not given)."""
    if not isinstance(expression, str) or not expression:
        return None
    names, values = names or {}, values or {}
    meaning: list[Any] = [expression]
    for placeholder in sorted(set(_PLACEHOLDER.findall(expression))):
        given = (names if placeholder[0] == "#" else values).get(placeholder)
        if given is None:
            return None
        meaning.append((placeholder, json.dumps(given, sort_keys=True)))
    return tuple(meaning)
