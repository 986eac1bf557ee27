"""RateLimitTable (pk `pk`, TTL `expires_at`): the API's per-caller request counters, one
item per caller and one-second window (hyperguard.api.rate_limits names them).

A request is counted by one conditional `ADD`: it succeeds while the window holds fewer
than the limit, so a full window is refused by DynamoDB itself, atomically across every
execution environment. Counters are written once and never read; TTL deletes them.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from hyperguard.aws import dynamodb_table
from hyperguard.store.codec import TableStore, condition_failed

THROTTLED = frozenset(
    {"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"}
)
"""DynamoDB's throttling codes: a counter key written over 1,000 times a second (a
partition's limit), or the table past its throughput."""


class CounterThrottledError(Exception):
    """DynamoDB throttled a counter's write: its window is being written far beyond any
    limit."""


class RateCounterStore(TableStore):
    """Counters written once each (no retry: `take` is on every request's path, and its
    caller decides what a failure means)."""

    @property
    def table(self) -> Any:
        if self._table is None:
            self._table = dynamodb_table(self.table_name, retry=False)
        return self._table

    def take(self, key: str, limit: int, expires_at: int) -> bool:
        """Count one request on the counter `key` if it holds fewer than `limit`; False when
        it is full (nothing counted). Raises CounterThrottledError when DynamoDB throttled
        the write, and DynamoDB's own error for anything else."""
        try:
            self.table.update_item(
                Key={"pk": key},
                UpdateExpression="ADD #calls :one SET expires_at = :expires",
                ConditionExpression="attribute_not_exists(#calls) OR #calls < :limit",
                ExpressionAttributeNames={"#calls": "calls"},
                ExpressionAttributeValues={":one": 1, ":limit": limit, ":expires": expires_at},
            )
        except ClientError as exc:
            if condition_failed(exc):
                return False
            if exc.response["Error"]["Code"] in THROTTLED:
                raise CounterThrottledError(key) from exc
            raise
        return True
