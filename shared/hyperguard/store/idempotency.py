"""IdempotencyTable: which deliveries were fully processed (pk `id`, TTL `expiration`).

A key is marked only after every effect of its event succeeded, and every effect is
itself idempotent, so a crash between effect and mark only costs a harmless redo.
"""

from __future__ import annotations

import time
from typing import Any

from hyperguard.aws import dynamodb_table


class IdempotencyStore:
    def __init__(self, table_name: str, ttl_s: int = 86_400, table: Any | None = None) -> None:
        self.table_name = table_name
        self.ttl_s = ttl_s
        self._table = table

    @property
    def table(self) -> Any:
        if self._table is None:
            self._table = dynamodb_table(self.table_name)
        return self._table

    def seen(self, key: str) -> bool:
        item = self.table.get_item(Key={"id": key}, ConsistentRead=True).get("Item")
        return bool(item) and int(item.get("expiration", 0)) > time.time()

    def mark(self, key: str, **attributes: Any) -> None:
        self.table.put_item(
            Item={"id": key, "expiration": int(time.time()) + self.ttl_s, **attributes}
        )
