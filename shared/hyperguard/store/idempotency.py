"""IdempotencyTable: which deliveries were fully processed (pk `id`, TTL `expiration`).

A key is marked only after every effect of its event succeeded, and every effect is
itself idempotent, so a crash between effect and mark only costs a harmless redo.
"""

from __future__ import annotations

import time
from typing import Any

from hyperguard.store.codec import TableStore


class IdempotencyStore(TableStore):
    def __init__(self, table_name: str, ttl_s: int = 86_400, table: Any | None = None) -> None:
        super().__init__(table_name, table)
        self.ttl_s = ttl_s

    def seen(self, key: str) -> bool:
        item = self.table.get_item(Key={"id": key}, ConsistentRead=True).get("Item")
        return bool(item) and int(item.get("expiration", 0)) > time.time()

    def mark(self, key: str, **attributes: Any) -> None:
        self.table.put_item(
            Item={"id": key, "expiration": int(time.time()) + self.ttl_s, **attributes}
        )
