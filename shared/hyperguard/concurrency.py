"""Independent calls of one invocation issued together, a bounded number at a time (D162).

A scheduling pass waits on the network, not the CPU: its BatchGetItems of the active jobs,
its admission transactions and the runs it creates are each independent of the others, so
issued one after another they cost the sum of their latencies, issued together about the
longest of them. `bounded_map` runs a function over items on at most `limit` threads and
returns the results in the items' order. Every item is run, whatever the others do; the
first exception (in the items' order) is raised once all have finished, so what the others
did stands and is never half-known. Inside a worker it runs in line: no pool of pools.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

IO_CONCURRENCY = 16
"""How many calls a function has in flight at most: well under DynamoDB's and the API
server's per-client limits, and the connection pool of every boto3 client (hyperguard.aws)."""

_worker = threading.local()


def bounded_map[T, R](
    fn: Callable[[T], R], items: Iterable[T], *, limit: int = IO_CONCURRENCY
) -> list[R]:
    """`[fn(item) for item in items]`, at most `limit` at a time (1: in line)."""
    work = list(items)
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    if limit == 1 or len(work) <= 1 or getattr(_worker, "busy", False):
        return [fn(item) for item in work]

    def run(item: T) -> R:
        _worker.busy = True
        try:
            return fn(item)
        finally:
            _worker.busy = False

    with ThreadPoolExecutor(
        max_workers=min(limit, len(work)), thread_name_prefix="hyperguard-io"
    ) as pool:
        futures = [pool.submit(run, item) for item in work]
    return [future.result() for future in futures]
