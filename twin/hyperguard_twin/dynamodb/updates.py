"""UpdateItem without moto's copies, and the simple forms the service's job writes take
applied directly."""

from __future__ import annotations

import copy
import functools
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hyperguard_twin.dynamodb.copies import uncopied_update
from hyperguard_twin.dynamodb.projection import changed_by_moto

_CLAUSE = re.compile(r"\b(SET|REMOVE|ADD|DELETE)\s", re.IGNORECASE)
_NAME = r"#?[A-Za-z_][A-Za-z0-9_]*"
_VALUE = r":[A-Za-z0-9_]+"
_SET_VALUE = re.compile(rf"^({_NAME})\s*=\s*({_VALUE})$")
_SET_APPEND = re.compile(
    rf"^({_NAME})\s*=\s*list_append\(\s*if_not_exists\(\s*({_NAME})\s*,\s*({_VALUE})\s*\)"
    rf"\s*,\s*({_VALUE})\s*\)$"
)
_ADD_NUMBER = re.compile(rf"^({_NAME})\s+({_VALUE})$")
_REMOVE = re.compile(rf"^({_NAME})$")
SIMPLE_UPDATE_MAX_BYTES = 150_000
"""An item (before, and the values an update sets) above which the update is moto's, whose
item-size checks differ from a plain sum near DynamoDB's 400 KB."""


@dataclass(frozen=True)
class _SimpleUpdate:
    """An UpdateExpression of top-level attributes only: `SET a = :v`,
    `SET a = list_append(if_not_exists(a, :empty), :v)`, `ADD n :number`, `REMOVE a`."""

    sets: tuple[tuple[str, str], ...]
    appends: tuple[tuple[str, str, str], ...]
    """(attribute, the value if it is missing, the list to append)"""
    adds: tuple[tuple[str, str], ...]
    removes: tuple[str, ...]


_FORMS = {
    "SET": (("set", _SET_VALUE), ("append", _SET_APPEND)),
    "ADD": (("add", _ADD_NUMBER),),
    "REMOVE": (("remove", _REMOVE),),
}
"""Per clause, the forms of `_SimpleUpdate` its actions may take (DELETE: none)."""


@functools.lru_cache(maxsize=1024)
def _simple_update(expression: str) -> tuple[tuple[str, tuple[str, ...]], ...] | None:
    """The actions of an UpdateExpression, as (form, groups), when every one is of
    `_SimpleUpdate`'s forms (names still as written); None otherwise."""
    parts = _CLAUSE.split(expression)
    if parts[0].strip() or len(parts) < 3:
        return None
    actions: list[tuple[str, tuple[str, ...]]] = []
    for clause, body in zip(parts[1::2], parts[2::2], strict=True):
        for action in _split_top_level(body):
            found = next(
                (
                    (form, match.groups())
                    for form, pattern in _FORMS.get(clause.upper(), ())
                    if (match := pattern.match(action))
                ),
                None,
            )
            if found is None:
                return None
            actions.append(found)
    return tuple(actions)


def _split_top_level(body: str) -> list[str]:
    actions, depth, start = [], 0, 0
    for at, char in enumerate(body):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            actions.append(body[start:at].strip())
            start = at + 1
    actions.append(body[start:].strip())
    return actions


def _resolved(
    parsed: tuple[tuple[str, tuple[str, ...]], ...], names: dict[str, str], reserved: Any
) -> _SimpleUpdate | None:
    """The actions with their attribute names resolved; None when a name is undefined or a
    reserved word, an attribute is named twice, or a list_append reads another attribute."""

    def name(raw: str) -> str | None:
        if raw.startswith("#"):
            return names.get(raw)
        return None if raw.upper() in reserved else raw

    sets, appends, adds, removes, seen = [], [], [], [], []
    for kind, groups in parsed:
        target = name(groups[0])
        if target is None:
            return None
        seen.append(target)
        if kind == "set":
            sets.append((target, groups[1]))
        elif kind == "append":
            if name(groups[1]) != target:
                return None
            appends.append((target, groups[2], groups[3]))
        elif kind == "add":
            adds.append((target, groups[1]))
        else:
            removes.append(target)
    if len(set(seen)) != len(seen):
        return None
    return _SimpleUpdate(tuple(sets), tuple(appends), tuple(adds), tuple(removes))


def simple_updates(update: Callable[..., Any]) -> Callable[..., Any]:
    """A replacement for moto's `DynamoDBBackend.update_item` (`update`, already without its
    copies) for the updates the service makes of its job items: moto parses the expression
    into a tree, walks it with ten validators and executes it, checking the whole item's size
    at every attribute it sets; that was most of a transition's cost on the emulator. An
    update of an item, existing or created by it (its key alone first, as moto creates it),
    in a table without a stream, named by exactly the table's key, with no legacy `Expected` or
    `AttributeUpdates`, whose expression is of `_SimpleUpdate`'s forms, whose names and
    values are all defined, that changes no key of the table, sets an index's key only to a
    non-empty value of its type, names no attribute twice, whose ADD adds a number to a
    number (or to nothing) and whose list_append joins lists, on an
    item far below the size limit, is applied here after moto's own condition check, with
    moto's arithmetic. Anything else, and every error, is `update`'s: it decides what it
    means."""
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.parsing.reserved_keywords import ReservedKeywords

    reserved = frozenset(ReservedKeywords.get_reserved_keywords())
    signature = inspect.signature(inspect.unwrap(update))

    def planned(table: Any, item: Any, expression: Any, names: Any, values: Any) -> Any:
        parsed = _simple_update(expression) if isinstance(expression, str) else None
        plan = _resolved(parsed, names or {}, reserved) if parsed else None
        if plan is None or set(table.table_key_attrs) & {
            *(n for n, _ in plan.sets),
            *(n for n, _, _ in plan.appends),
            *(n for n, _ in plan.adds),
            *plan.removes,
        }:
            return None
        defined = {a["AttributeName"]: a["AttributeType"] for a in table.attr}
        if any(n in defined for n, _ in plan.adds):
            return None
        values = values or {}
        used = [v for _, v in plan.sets] + [v for _, v in plan.adds]
        used += [v for _, e, a in plan.appends for v in (e, a)]
        if any(v not in values or changed_by_moto(values[v]) for v in used):
            return None
        changes: dict[str, Any] = {}
        for target, value in plan.sets:
            changes[target] = DynamoType(values[value])
        for target, empty, appended in plan.appends:
            base = item.attrs.get(target) or DynamoType(values[empty])
            extra = DynamoType(values[appended])
            if base.type != "L" or extra.type != "L":
                return None
            changes[target] = DynamoType({"L": [*copy.deepcopy(base.value), *extra.value]})
        for target, value in plan.adds:
            amount = DynamoType(values[value])
            existing = item.attrs.get(target) or DynamoType({"N": "0"})
            if amount.type != "N" or existing.type != "N":
                return None
            changes[target] = existing + amount
        for target, value in changes.items():  # an index's key: its type, never empty
            if target in defined and (
                value.type != defined[target] or (value.type in ("S", "B") and not value.value)
            ):
                return None
        added = sum(len(k.encode()) + v.size() for k, v in changes.items())
        if item.size() + added > SIMPLE_UPDATE_MAX_BYTES:
            return None
        return changes, plan.removes

    def simple(self: Any, table_name: str, key: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        call = signature.bind(self, table_name, key, *args, **kwargs).arguments
        item: Any = None
        try:
            table, item, new = _unstreamed_item(self, table_name, key)
            target = item if item is not None else new
            ready = (
                target is not None
                and not call.get("attribute_updates")
                and not call.get("expected")
                and planned(
                    table,
                    target,
                    call.get("update_expression"),
                    call.get("expression_attribute_names"),
                    call.get("expression_attribute_values"),
                )
            )
        except Exception:  # moto's own validation answers what cannot be read here
            ready = None
        if not ready:
            return update(self, table_name, key, *args, **kwargs)
        _check_condition(call, item)
        if item is None:  # created as moto creates it: its key alone, then updated
            item = table.put_item(dict(key))
        changes, removes = ready
        for name, value in changes.items():
            dict.__setitem__(item.attrs, name, value)  # the size was checked above
        for name in removes:
            item.attrs.pop(name, None)
        return item

    simple.__wrapped__ = update  # type: ignore[attr-defined]
    return simple


def _check_condition(call: dict[str, Any], item: Any) -> None:
    """moto's condition check of an update (`item` None: there is none yet, and none to
    return)."""
    import moto.dynamodb.comparisons as comparisons
    from moto.dynamodb.exceptions import ConditionalCheckFailed

    condition = comparisons.create_condition_expression_parser(
        call.get("condition_expression"),
        call.get("expression_attribute_names"),
        call.get("expression_attribute_values"),
    ).parse()
    if condition.expr(item):
        return
    if item is not None and call.get("return_values_on_condition_check_failure") == "ALL_OLD":
        raise ConditionalCheckFailed(item=item.to_json()["Attributes"])
    raise ConditionalCheckFailed


def _unstreamed_item(backend: Any, table_name: str, key: dict[str, Any]) -> tuple[Any, Any, Any]:
    """The table, the item `key` names and, when there is none, the item an update would
    create (its key alone, unsaved), for a table without a stream (None, None for a streamed
    table); raises what a malformed request makes moto raise."""
    from moto.dynamodb.models.dynamo_type import DynamoType, Item

    table = backend.get_table(table_name)
    if table.stream_shard is not None:
        return table, None, None
    if set(key) != {table.hash_key_attr, table.range_key_attr} - {None}:
        raise ValueError("not the table's key")  # moto's to answer
    hash_key = DynamoType(key[table.hash_key_attr])
    range_key = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
    found = table.get_item(hash_key, range_key)
    return table, found, None if found is not None else Item(hash_key, range_key, dict(key))


def update_without_copies(update: Callable[..., Any]) -> Callable[..., Any]:
    """A replacement for moto's `DynamoDBBackend.update_item` (`update`), which deep-copies the
    item before it changes it (for the table's stream) and the update expression it has just
    parsed (before validating it): most of an update's CPU once an item holds a job's
    history. For an existing item of a table without a stream neither copy is read again, so
    neither is made; moto does everything else. A new item's update (its expression is
    validated twice) and a streamed table's are moto's whole."""

    def uncopied(self: Any, table_name: str, key: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        try:
            _, existing, _new = _unstreamed_item(self, table_name, key)
        except Exception:  # moto's own validation answers what cannot be read here
            existing = None
        if existing is None:
            return update(self, table_name, key, *args, **kwargs)
        token = uncopied_update.set(True)
        try:
            return update(self, table_name, key, *args, **kwargs)
        finally:
            uncopied_update.reset(token)

    uncopied.__wrapped__ = update  # type: ignore[attr-defined]
    return uncopied
