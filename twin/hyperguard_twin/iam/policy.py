"""IAM's policy evaluation logic for identity-based policies in one account: what a request
needs (`Authorization`), and the decision its identity's policies make."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Decision = Literal["allowed", "implicit deny", "explicit deny"]


class CannotJudge(Exception):
    """The twin cannot tell what AWS would decide for this request; the reason."""


@dataclass(frozen=True)
class Authorization:
    """One thing a request needs of IAM: `action` on `resource` ("*" where the action has no
    resource type), with the request's values of condition keys (`context`, keys in lower
    case). A key in `complete` (or under a prefix there ending in "/") that `context` lacks
    is absent from the request; any other key the twin cannot tell."""

    action: str
    resource: str
    context: Mapping[str, str] = field(default_factory=dict)
    complete: tuple[str, ...] = ()

    def knows(self, key: str) -> bool:
        return any(key == k or (k.endswith("/") and key.startswith(k)) for k in self.complete)


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


@functools.lru_cache(maxsize=1024)
def _wildcard(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    """IAM's wildcards: `*` any run of characters, `?` one character."""
    if "${" in pattern:
        raise CannotJudge(f"policy variable in {pattern!r}")
    text = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(text, re.IGNORECASE if ignore_case else 0)


def _like(pattern: str, value: str, ignore_case: bool = False) -> bool:
    return _wildcard(pattern, ignore_case).fullmatch(value) is not None


_OPERATORS: dict[str, Callable[[str, str], bool]] = {
    "StringEquals": lambda wanted, got: got == wanted,
    "StringEqualsIgnoreCase": lambda wanted, got: got.lower() == wanted.lower(),
    "StringLike": _like,
    "ArnEquals": lambda wanted, got: got == wanted,
    "ArnLike": _like,
    "Bool": lambda wanted, got: got.lower() == wanted.lower(),
}
_NEGATED = {
    "StringNotEquals": "StringEquals",
    "StringNotEqualsIgnoreCase": "StringEqualsIgnoreCase",
    "StringNotLike": "StringLike",
    "ArnNotEquals": "ArnEquals",
    "ArnNotLike": "ArnLike",
}


def _condition_holds(operator: str, key: str, wanted: Any, need: Authorization) -> bool:
    """One condition key of a statement. A key the request lacks makes a matching operator
    false and a negated one true (IAM's condition operators), `...IfExists` true."""
    base = operator.removesuffix("IfExists")
    key = key.lower()
    present = key in need.context
    if not present and not need.knows(key):
        raise CannotJudge(f"condition key {key}")
    values = [str(v) for v in _as_list(wanted)]
    if base == "Null":
        return (not present) == (values[0].lower() == "true")
    test = _OPERATORS.get(_NEGATED.get(base, base))
    if test is None:  # ForAnyValue:/ForAllValues:, numeric, date, IP address, binary
        raise CannotJudge(f"condition operator {operator}")
    if not present:
        return base in _NEGATED or operator.endswith("IfExists")
    matched = any(test(value, need.context[key]) for value in values)
    return not matched if base in _NEGATED else matched


def _names(statement: Mapping[str, Any], element: str, value: str, ignore_case: bool) -> bool:
    if element in statement:
        return any(_like(p, value, ignore_case) for p in _as_list(statement[element]))
    if f"Not{element}" in statement:
        return not any(_like(p, value, ignore_case) for p in _as_list(statement[f"Not{element}"]))
    return False


def _applies(statement: Mapping[str, Any], need: Authorization) -> bool:
    return (
        _names(statement, "Action", need.action, ignore_case=True)
        and _names(statement, "Resource", need.resource, ignore_case=False)
        and all(
            _condition_holds(operator, key, wanted, need)
            for operator, block in statement.get("Condition", {}).items()
            for key, wanted in block.items()
        )
    )


def decide(documents: Iterable[Mapping[str, Any]], need: Authorization) -> Decision:
    """IAM's answer for one identity's policies: an applying Deny wins, else an applying Allow
    allows, else the request is implicitly denied."""
    allowed = False
    for document in documents:
        for statement in _as_list(document.get("Statement", [])):
            if _applies(statement, need):
                if statement.get("Effect") == "Deny":
                    return "explicit deny"
                allowed = True
    return "allowed" if allowed else "implicit deny"
