"""Where the emulator's DynamoDB works differently from moto's own, with the same answers.

moto keeps DynamoDB correct by copying and by walking shapes: TransactWriteItems deep-copies
every table it touches before it starts (to restore them if it is cancelled), a Query of an
index converts and deep-copies each whole item before projecting it, and every answer is
serialised attribute by attribute. Once the jobs table holds thousands of items with their
histories, that is seconds of CPU per admission for the twin, the tests and
`bench/scheduler.py` alike. Here (one module each):

- the item operations' answers, already in wire form, are dumped as they are (`answers`);
- a transaction saves and, if cancelled, puts back only the items it names; moto's own logic
  decides everything else: conditions, order, errors (`transactions`);
- a Query of a keys-only global index by its partition key alone reads the index's entries,
  not the items: pages are filled by the entries' own size, as DynamoDB fills them (moto
  pages by whole items: 6 pages for a 3,000-job `Live` query where DynamoDB takes one), in
  moto's order and with moto's LastEvaluatedKey (`queries`);
- a projection of top-level attributes (GetItem, BatchGetItem) picks them from the item,
  where moto converts the whole item once per projected path (`projection`);
- an update of an existing item in a table without a stream copies neither the item (moto
  keeps the copy for the stream alone) nor the expression it has just parsed (`updates`,
  `copies`);
- a condition expression is parsed once for what it means (the expression, and the names
  and values it refers to) and its parse handed out again (`conditions`);
- a request is checked against its operation's input shape, as DynamoDB checks it and moto
  does not (`requests`: the service's wire client leaves the check to DynamoDB, D180);
- an update of the simple forms the service's job writes take (top-level SET, list_append
  to a list, ADD of a number, REMOVE) is applied directly after moto's own condition check,
  where moto parses it into a tree, walks it with ten validators and checks the whole
  item's size at every attribute it sets (`updates`; every other update and every error is
  moto's).

The first CHECKED_RESPONSES answers of each kind are compared with moto's own; one that
differs is logged and left to moto from then on (the bench, `strict`, stops instead). All are
installed for the process once (`install`: the twin's emulator, the tests' in-process moto);
the bench installs them per run (`replacements`) with its own index-lag model.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Callable
from typing import Any

from hyperguard_twin.dynamodb.answers import fast_dynamodb_responses, plain_answers
from hyperguard_twin.dynamodb.conditions import parsed_conditions
from hyperguard_twin.dynamodb.copies import TablesNotCopied, copy_unless_fresh_expression
from hyperguard_twin.dynamodb.projection import top_level_projection
from hyperguard_twin.dynamodb.queries import keys_only_index_query
from hyperguard_twin.dynamodb.requests import shape_checked_requests
from hyperguard_twin.dynamodb.transactions import item_level_transaction_rollback
from hyperguard_twin.dynamodb.updates import simple_updates, update_without_copies


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
    call_action = responses_module.DynamoHandler.call_action
    return [
        (
            responses_module.DynamoHandler,
            "call_action",
            shape_checked_requests(getattr(call_action, "unchecked", call_action)),
        ),
        (ActionResult, "execute_result", fast_dynamodb_responses(checks)),
        (
            responses_module,
            "dynamo_to_dict",
            plain_answers(getattr(convert, "__wrapped__", convert)),
        ),
        (backend_module, "copy", TablesNotCopied()),
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
        (validators_module, "deepcopy", copy_unless_fresh_expression),
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
