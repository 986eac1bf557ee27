"""The copies moto's DynamoDB makes that the emulator skips: a transaction's tables while it
saves its own items (`transactions`), an updated item and its fresh parse (`updates`)."""

from __future__ import annotations

import contextvars
import copy
from typing import Any

saving_items = contextvars.ContextVar("saving_items", default=False)
uncopied_update = contextvars.ContextVar("uncopied_update", default=False)


class TablesNotCopied:
    """`copy` for moto's DynamoDB backend module: while a transaction saves its own items, a
    Table's deep copy is the table itself; while an update needs no copy of its item
    (`update_without_copies`), the item's is the item (every other copy is a real one)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)

    @staticmethod
    def deepcopy(value: Any, memo: Any = None) -> Any:
        from moto.dynamodb.models.dynamo_type import Item
        from moto.dynamodb.models.table import Table

        if saving_items.get() and isinstance(value, Table):
            return value
        if uncopied_update.get() and isinstance(value, Item):
            return value  # the item before an update, kept only for a stream (none here)
        return copy.deepcopy(value, memo)


def copy_unless_fresh_expression(value: Any, memo: Any = None) -> Any:
    """`deepcopy` for moto's update-expression validators: while an update of an existing
    item validates the expression it has just parsed (once), the parse itself, not a copy;
    every other copy is a real one."""
    from moto.dynamodb.parsing.ast_nodes import UpdateExpression  # type: ignore[attr-defined]

    if uncopied_update.get() and isinstance(value, UpdateExpression):
        return value
    return copy.deepcopy(value, memo)
