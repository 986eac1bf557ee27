"""Where the emulator's DynamoDB works differently from moto's own, with the same answers.

moto keeps DynamoDB correct by copying and by walking shapes: TransactWriteItems deep-copies
every table it touches before it starts (to restore them if it is cancelled), a Query of an
index converts and deep-copies each whole item before projecting it, and every answer is
serialised attribute by attribute. Once the jobs table holds thousands of items with their
histories, that is seconds of CPU per admission for the twin, the tests and
`bench/scheduler.py` alike. Here:

- the item operations' answers, already in wire form, are dumped as they are
  (`fast_dynamodb_responses`);
- a transaction saves and, if cancelled, puts back only the items it names; moto's own logic
  decides everything else (conditions, order, errors);
- a Query of a keys-only global index by its partition key alone reads the index's entries,
  not the items: pages are filled by the entries' own size, as DynamoDB fills them (moto
  pages by whole items: 6 pages for a 3,000-job `Live` query where DynamoDB takes one), in
  moto's order and with moto's LastEvaluatedKey;
- a projection of top-level attributes (GetItem, BatchGetItem) picks them from the item,
  where moto converts the whole item once per projected path;
- an update of an existing item in a table without a stream copies neither the item (moto
  keeps the copy for the stream alone) nor the expression it has just parsed;
- a condition expression is parsed once for what it means (the expression, and the names
  and values it refers to) and its parse handed out again (`parsed_conditions`);
- an update of the simple forms the service's job writes take (top-level SET, list_append
  to a list, ADD of a number, REMOVE) is applied directly after moto's own condition check,
  where moto parses it into a tree, walks it with ten validators and checks the whole
  item's size at every attribute it sets (`simple_updates`; every other update and every
  error is moto's).

The first CHECKED_RESPONSES answers of each kind are compared with moto's own; one that
differs is logged and left to moto from then on (the bench, `strict`, stops instead). All are
installed for the process once (`install`: the twin's emulator, the tests' in-process moto);
the bench installs them per run (`replacements`) with its own index-lag model.
"""

from __future__ import annotations

import contextvars
import copy
import functools
import inspect
import json
import logging
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

FAST_SERIALISED = frozenset(
    {
        "GetItem",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "Query",
        "Scan",
        "BatchGetItem",
        "BatchWriteItem",
        "TransactWriteItems",
    }
)
"""DynamoDB operations whose answers moto already holds in wire form."""
CHECKED_RESPONSES = 5
"""Answers of each of them compared with moto's own serialisation before the fast path is
trusted."""


def _holds_none(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, dict):
        return any(_holds_none(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_none(v) for v in value)
    return False


def fast_dynamodb_responses(checked: Counter[str]) -> Callable[..., Any]:
    """A replacement for moto's `ActionResult.execute_result`. moto turns every answer into
    JSON by walking botocore's output shape attribute by attribute: most of the emulator's
    CPU once job items carry their histories. The answers of DynamoDB's item operations are
    already in wire form, so they are dumped as they are, keeping only the output shape's
    top-level members (moto adds a legacy `ConsumedCapacityUnits` to DeleteItem's answer,
    which the shape walk drops). The first CHECKED_RESPONSES of each operation (counted in
    `checked`) are compared with moto's own serialisation; an operation whose answer ever
    differs is logged and left to moto from then on. An answer holding a null, which the
    shape walk would leave out, is always serialised by moto. Every other service's answer
    is moto's."""
    from moto.core.responses import ActionResult

    current = ActionResult.execute_result
    serialise = getattr(current, "__wrapped__", current)  # moto's own, if already replaced
    headers: dict[str, dict[str, str]] = {}
    differed: set[str] = set()

    def execute_result(self: Any, context: Any) -> Any:
        operation = context.operation_model.name
        if (
            context.service_model.service_name != "dynamodb"
            or operation not in FAST_SERIALISED
            or isinstance(self.result, Exception)
            or _holds_none(self.result)
        ):
            return serialise(self, context)
        if operation in differed:
            return serialise(self, context)
        members = context.operation_model.output_shape.members
        body = json.dumps({k: v for k, v in self.result.items() if k in members})
        if checked[operation] < CHECKED_RESPONSES or operation not in headers:
            status, expected_headers, expected = serialise(self, context)
            if status != 200 or json.loads(expected) != json.loads(body):
                differed.add(operation)
                logger.warning("fast %s answer differs from moto's; moto serialises it", operation)
                return status, expected_headers, expected
            checked[operation] += 1
            headers[operation] = dict(expected_headers)
            return status, expected_headers, expected
        return 200, dict(headers[operation]), body

    execute_result.__wrapped__ = serialise  # type: ignore[attr-defined]
    return execute_result


_saving_items = contextvars.ContextVar("saving_items", default=False)
_uncopied_update = contextvars.ContextVar("uncopied_update", default=False)


class _TablesNotCopied:
    """`copy` for moto's DynamoDB backend module: while a transaction saves its own items, a
    Table's deep copy is the table itself; while an update needs no copy of its item
    (`update_without_copies`), the item's is the item (every other copy is a real one)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)

    @staticmethod
    def deepcopy(value: Any, memo: Any = None) -> Any:
        from moto.dynamodb.models.dynamo_type import Item
        from moto.dynamodb.models.table import Table

        if _saving_items.get() and isinstance(value, Table):
            return value
        if _uncopied_update.get() and isinstance(value, Item):
            return value  # the item before an update, kept only for a stream (none here)
        return copy.deepcopy(value, memo)


def _copy_unless_fresh_expression(value: Any, memo: Any = None) -> Any:
    """`deepcopy` for moto's update-expression validators: while an update of an existing
    item validates the expression it has just parsed (once), the parse itself, not a copy;
    every other copy is a real one."""
    from moto.dynamodb.parsing.ast_nodes import UpdateExpression  # type: ignore[attr-defined]

    if _uncopied_update.get() and isinstance(value, UpdateExpression):
        return value
    return copy.deepcopy(value, memo)


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
    update of an existing item, in a table without a stream, with no legacy `Expected` or
    `AttributeUpdates`, whose expression is of `_SimpleUpdate`'s forms, whose names and
    values are all defined, that changes no key of the table, sets an index's key only to a
    non-empty value of its type, names no attribute twice, whose ADD adds a number to a
    number (or to nothing) and whose list_append joins lists, on an
    item far below the size limit, is applied here after moto's own condition check, with
    moto's arithmetic. Anything else, and every error, is `update`'s: it decides what it
    means."""
    import moto.dynamodb.comparisons as comparisons
    from moto.dynamodb.exceptions import ConditionalCheckFailed
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
        if any(v not in values or _changed_by_moto(values[v]) for v in used):
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
            table, item = _unstreamed_item(self, table_name, key)
            ready = (
                item is not None
                and not call.get("attribute_updates")
                and not call.get("expected")
                and planned(
                    table,
                    item,
                    call.get("update_expression"),
                    call.get("expression_attribute_names"),
                    call.get("expression_attribute_values"),
                )
            )
        except Exception:  # moto's own validation answers what cannot be read here
            ready = None
        if not ready:
            return update(self, table_name, key, *args, **kwargs)
        condition = comparisons.create_condition_expression_parser(
            call.get("condition_expression"),
            call.get("expression_attribute_names"),
            call.get("expression_attribute_values"),
        ).parse()
        if not condition.expr(item):
            if call.get("return_values_on_condition_check_failure") == "ALL_OLD":
                raise ConditionalCheckFailed(item=item.to_json()["Attributes"])
            raise ConditionalCheckFailed
        changes, removes = ready
        for name, value in changes.items():
            dict.__setitem__(item.attrs, name, value)  # the size was checked above
        for name in removes:
            item.attrs.pop(name, None)
        return item

    simple.__wrapped__ = update  # type: ignore[attr-defined]
    return simple


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


def _unstreamed_item(backend: Any, table_name: str, key: dict[str, Any]) -> tuple[Any, Any]:
    """The table and the item `key` names, for a table without a stream (None: no such item,
    a streamed table); raises what a malformed request makes moto raise."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    table = backend.get_table(table_name)
    if table.stream_shard is not None:
        return table, None
    hash_key = DynamoType(key[table.hash_key_attr])
    range_key = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
    return table, table.get_item(hash_key, range_key)


def update_without_copies(update: Callable[..., Any]) -> Callable[..., Any]:
    """A replacement for moto's `DynamoDBBackend.update_item` (`update`), which deep-copies the
    item before it changes it (for the table's stream) and the update expression it has just
    parsed (before validating it): most of an update's CPU once an item holds a job's
    history. For an existing item of a table without a stream neither copy is read again, so
    neither is made; moto does everything else. A new item's update (its expression is
    validated twice) and a streamed table's are moto's whole."""

    def uncopied(self: Any, table_name: str, key: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        try:
            _, existing = _unstreamed_item(self, table_name, key)
        except Exception:  # moto's own validation answers what cannot be read here
            existing = None
        if not existing:
            return update(self, table_name, key, *args, **kwargs)
        token = _uncopied_update.set(True)
        try:
            return update(self, table_name, key, *args, **kwargs)
        finally:
            _uncopied_update.reset(token)

    uncopied.__wrapped__ = update  # type: ignore[attr-defined]
    return uncopied


def item_level_transaction_rollback(transact: Callable[..., Any]) -> Callable[..., Any]:
    """A replacement for moto's `DynamoDBBackend.transact_write_items` (`transact`): the
    items the transaction names are saved and put back if it is cancelled, instead of every
    table it touches. A request whose keys cannot be read here is left to moto whole."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    def saved_items(backend: Any, transact_items: list[dict[str, Any]]) -> list[Any] | None:
        saved = []
        for entry in transact_items:
            if not isinstance(entry, dict) or len(entry) != 1:
                return None
            (op,) = entry.values()
            table = backend.tables.get(op.get("TableName")) if isinstance(op, dict) else None
            if table is None:
                continue
            if table.stream_shard is not None:
                return None  # a cancelled write's stream records go back with moto's copy
            attrs = op.get("Key") or op.get("Item")
            names = [n for n in (table.hash_key_attr, table.range_key_attr) if n]
            if not isinstance(attrs, dict) or any(n not in attrs for n in names):
                return None
            hash_key = DynamoType(attrs[table.hash_key_attr])
            if table.range_key_attr:
                range_key = DynamoType(attrs[table.range_key_attr])
                before = table.items.get(hash_key, {}).get(range_key)
            else:
                range_key, before = None, table.items.get(hash_key)
            saved.append((table, hash_key, range_key, copy.deepcopy(before)))
        return saved

    def restore(saved: list[Any]) -> None:
        for table, hash_key, range_key, before in reversed(saved):
            if range_key is None:
                items = table.items
                at = hash_key
            else:
                items = table.items.setdefault(hash_key, {})
                at = range_key
            if before is None:
                items.pop(at, None)
                if range_key is not None and not items:
                    table.items.pop(hash_key, None)
            else:
                items[at] = before

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> Any:
        try:
            saved = saved_items(self, transact_items)
        except Exception:  # moto's own validation answers what cannot be read here
            saved = None
        if saved is None:
            return transact(self, transact_items)
        token = _saving_items.set(True)
        try:  # moto's rollback puts back its "copies": the tables themselves
            return transact(self, transact_items)
        except Exception:
            restore(saved)
            raise
        finally:
            _saving_items.reset(token)

    transact_write_items.__wrapped__ = transact  # type: ignore[attr-defined]
    return transact_write_items


def keys_only_index_query(
    query: Callable[..., Any],
    checks: Counter[str],
    *,
    indexed: Callable[[Any], bool] | None = None,
    strict: bool = False,
) -> Callable[..., Any]:
    """A replacement for moto's `Table.query` (`query`) for a keys-only global index queried
    by partition key alone (every other query is moto's). `indexed(item_hash_key_value)`
    says whether an item's entry has appeared in the index yet (the bench's propagation
    lag; default: at once). `checks` counts the answers compared with moto's."""
    from moto.dynamodb.comparisons import OpDefault
    from moto.dynamodb.models.dynamo_type import Item
    from moto.dynamodb.models.table import RESULT_SIZE_LIMIT

    signature = inspect.signature(query)
    differed: set[str] = set()

    def keys_only_query(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = signature.bind(self, *args, **kwargs).arguments
        name = call.get("index_name")
        index = next((i for i in self.global_indexes if i.name == name), None)
        if (
            index is None
            or name in differed
            or (index.projection or {}).get("ProjectionType") != "KEYS_ONLY"
            or len(call.get("hash_key_conditions") or ()) != 1
            or call.get("range_comparison")
            or call.get("projection_expressions")
            or not isinstance(call.get("filter_expression"), (type(None), OpDefault))
            or call.get("range_key_conditions")
            or call.get("filter_kwargs")
        ):
            return query(self, *args, **kwargs)
        limit, start = call["limit"], call["exclusive_start_key"]
        forward = call["scan_index_forward"]
        ((attr, value),) = call["hash_key_conditions"]
        index_keys = [k["AttributeName"] for k in index.schema]
        hash_attrs = [k["AttributeName"] for k in index.schema if k["KeyType"] == "HASH"]
        range_attrs: list[str | None] = [
            k["AttributeName"] for k in index.schema if k["KeyType"] == "RANGE"
        ]
        hash_attrs.append(self.hash_key_attr)
        range_attrs.append(self.range_key_attr)
        projected = list(dict.fromkeys([*index.table_key_attrs, *index_keys]))
        matches = [
            item
            for item in self.all_items()
            if all(item.attrs.get(k) for k in index_keys) and item.attrs[attr] == value
        ]
        appeared = [i for i in matches if indexed is None or indexed(i.hash_key.value)]
        hidden, matches = len(matches) - len(appeared), appeared
        matches = self.sorted_items(hash_attrs, range_attrs, matches)
        if forward is False:
            matches.reverse()
        results: list[Item] = []
        size = 0
        last = None
        for item in matches:
            if start is not None and self._item_comes_before_dct(
                item, start, hash_attrs, range_attrs, forward
            ):
                continue
            start = None
            entry = Item(
                item.hash_key,
                item.range_key,
                {k: item.attrs[k].to_json() for k in projected if k in item.attrs},
            )
            if len(results) == limit or size + entry.size() > RESULT_SIZE_LIMIT:
                last = self._get_last_evaluated_key(results[-1], name)
                break
            results.append(entry)
            size += entry.size()
        if checks["keys-only Query"] < CHECKED_RESPONSES and last is None and not hidden:
            expected, _, expected_last = query(self, *args, **kwargs)
            ours = [r.to_json() for r in results]
            theirs = [r.to_json() for r in expected]
            # moto pages by whole items: an answer it cut short is compared as far as it
            # goes (its first page is a prefix of ours), and counts as a check, or a large
            # table would be read whole by moto at every query
            if theirs != (ours if expected_last is None else ours[: len(theirs)]):
                if strict:
                    raise RuntimeError(f"keys-only Query of {name} differs from moto's")
                differed.add(str(name))
                logger.warning("keys-only Query of %s differs from moto's; moto answers it", name)
                return expected, len(expected), expected_last
            checks["keys-only Query"] += 1
        return results, len(results), last

    keys_only_query.__wrapped__ = query  # type: ignore[attr-defined]
    return keys_only_query


def plain_answers(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A replacement for moto's `dynamo_to_dict` (`convert`), which turns an answer's stored
    values into plain ones for the serialiser: the same result, with exact type checks for
    what an answer is made of (DynamoType, dicts, lists, strings, numbers, booleans) before
    moto's isinstance and `hasattr(to_json)` tests, which cost most of a large BatchGetItem
    (every attribute of every item). Binary values and anything else are `convert`'s."""
    from moto.dynamodb.models.dynamo_type import DynamoType, LimitedSizeDict

    scalars = (str, int, bool, float, type(None))
    mappings = (dict, LimitedSizeDict)

    def plain(obj: Any) -> Any:
        kind = type(obj)
        if kind is DynamoType:
            if obj.type in ("B", "BS"):
                return convert(obj)
            return {obj.type: plain(obj.value)}
        if kind in mappings:
            return {k: plain(v) for k, v in obj.items()}
        if kind is list:
            return [plain(v) for v in obj]
        if kind in scalars:
            return obj
        return convert(obj)

    plain.__wrapped__ = convert  # type: ignore[attr-defined]
    return plain


def top_level_projection(project: Callable[..., Any]) -> Callable[..., Any]:
    """A replacement for moto's `Item.project` (`project`), which converts the whole item to
    plain values and back once per projected path: the same item, for a projection of
    top-level attribute names only, made of those attributes alone (a scheduling pass reads
    the revisions of thousands of job items so: D122). A projection with a nested path or
    an index, or of a value holding binary data or a set, is `project`'s."""
    from moto.dynamodb.models.dynamo_type import Item

    def projected(self: Any, projection_expressions: list[list[str]]) -> Any:
        names = [path[0] for path in projection_expressions if len(path) == 1]
        if len(names) != len(projection_expressions) or not all(map(_plain_name, names)):
            return project(self, projection_expressions)
        picked = {name: self.attrs[name].to_json() for name in names if name in self.attrs}
        if _changed_by_moto(picked):
            return project(self, projection_expressions)
        return Item(hash_key=self.hash_key, range_key=self.range_key, attrs=picked)

    projected.__wrapped__ = project  # type: ignore[attr-defined]
    return projected


_ROUND_TRIPPED = frozenset({"B", "BS", "SS", "NS"})
"""Types moto's projection changes on the way through plain values: a binary value becomes
bytes, a set may change its order (and an empty one its type)."""


def _changed_by_moto(value: Any) -> bool:
    if hasattr(value, "type") and hasattr(value, "value"):  # a DynamoType inside a map or list
        return value.type in _ROUND_TRIPPED or _changed_by_moto(value.value)
    if isinstance(value, dict):
        return bool(_ROUND_TRIPPED & value.keys()) or any(map(_changed_by_moto, value.values()))
    if isinstance(value, list):
        return any(map(_changed_by_moto, value))
    return False


def _plain_name(name: str) -> bool:
    return bool(name) and "[" not in name and "." not in name


def replacements(
    checks: Counter[str], *, indexed: Callable[[Any], bool] | None = None, strict: bool = False
) -> list[tuple[Any, str, Any]]:
    """(owner, attribute, value) of each replacement, around moto's own functions (also
    when these are installed already)."""
    import moto.dynamodb.comparisons as comparisons_module
    import moto.dynamodb.models as backend_module
    import moto.dynamodb.parsing.validators as validators_module
    import moto.dynamodb.responses as responses_module
    from moto.core.responses import ActionResult
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.dynamo_type import Item
    from moto.dynamodb.models.table import Table

    transact = DynamoDBBackend.transact_write_items
    update = DynamoDBBackend.update_item
    query = Table.query
    project = Item.project
    conditions = parsed_conditions(
        inspect.unwrap(comparisons_module.create_condition_expression_parser)
    )
    convert = responses_module.dynamo_to_dict  # type: ignore[attr-defined]
    return [
        (ActionResult, "execute_result", fast_dynamodb_responses(checks)),
        (
            responses_module,
            "dynamo_to_dict",
            plain_answers(getattr(convert, "__wrapped__", convert)),
        ),
        (backend_module, "copy", _TablesNotCopied()),
        (
            DynamoDBBackend,
            "transact_write_items",
            item_level_transaction_rollback(getattr(transact, "__wrapped__", transact)),
        ),
        (Item, "project", top_level_projection(getattr(project, "__wrapped__", project))),
        (
            DynamoDBBackend,
            "update_item",
            simple_updates(update_without_copies(inspect.unwrap(update))),
        ),
        (validators_module, "deepcopy", _copy_unless_fresh_expression),
        (comparisons_module, "create_condition_expression_parser", conditions),
        (responses_module, "create_condition_expression_parser", conditions),
        (backend_module, "create_condition_expression_parser", conditions),
        (
            Table,
            "query",
            keys_only_index_query(
                getattr(query, "__wrapped__", query), checks, indexed=indexed, strict=strict
            ),
        ),
    ]


_installed = False


def install() -> None:
    """The replacements for moto in this process, once (the twin's emulator and the tests'
    in-process moto)."""
    global _installed
    if _installed:
        return
    _installed = True
    for owner, name, value in replacements(Counter()):
        setattr(owner, name, value)
