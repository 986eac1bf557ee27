"""TransactWriteItems rolled back item by item."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from hyperguard_twin.dynamodb.copies import saving_items


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
        token = saving_items.set(True)
        try:  # moto's rollback puts back its "copies": the tables themselves
            return transact(self, transact_items)
        except Exception:
            restore(saved)
            raise
        finally:
            saving_items.reset(token)

    transact_write_items.__wrapped__ = transact  # type: ignore[attr-defined]
    return transact_write_items
