"""Independent calls of one invocation issued together, a bounded number at a time (D162).

A scheduling pass waits on the network, not the CPU: its BatchGetItems of the active jobs,
its admission transactions and the runs it creates are each independent of the others, so
issued one after another they cost the sum of their latencies, issued together about the
longest of them. `bounded_map` runs a function over items on at most `limit` threads and
returns the results in the items' order. Every item is run, whatever the others do; the
first exception (in the items' order) is raised once all have finished, so what the others
did stands and is never half-known. Inside a worker it runs in line: no pool of pools.

`beside` runs a chain of calls that depend on each other on the calling thread while the
calls that depend on none of them are in flight: the pass's jobs and then its runs, beside
its policies, nodes and instance groups (D193). The chain's own calls issued together get a
pool of their own, the one place two pools are in flight at once (`CONNECTIONS`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

IO_CONCURRENCY = 16
"""How many calls a function has in flight at most: well under DynamoDB's and the API
server's per-client limits."""

CONNECTIONS = 2 * IO_CONCURRENCY
"""The connection pool of every boto3 client (hyperguard.aws): a bounded map's calls in flight
beside another's (`beside`), each keeping its connection."""

_worker = threading.local()


def bounded_map[T, R](
    fn: Callable[[T], R], items: Iterable[T], *, limit: int = IO_CONCURRENCY
) -> list[R]:
    """`[fn(item) for item in items]`, at most `limit` at a time (1: in line)."""
    work = list(items)
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    if limit == 1 or len(work) <= 1 or getattr(_worker, "busy", False):
        return _in_line(fn, work)
    with ThreadPoolExecutor(
        max_workers=min(limit, len(work)), thread_name_prefix="hyperguard-io"
    ) as pool:
        futures = [pool.submit(_as_worker, fn, item) for item in work]
    return [future.result() for future in futures]


def beside[R](
    main: Callable[[], R], others: Sequence[Callable[[], Any]], *, limit: int = IO_CONCURRENCY
) -> tuple[R, list[Any]]:
    """`(main(), [call() for call in others])`, `main` on this thread while the others are in
    flight, at most `limit` at a time. Every call runs, whatever the others do; the first
    exception (main's, then the others' in their order) is raised once all have finished.
    Inside a worker, in line: main first."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    if limit == 1 or not others or getattr(_worker, "busy", False):
        both = _in_line(_call, [main, *others])
        return both[0], both[1:]
    with ThreadPoolExecutor(
        max_workers=min(limit, len(others)), thread_name_prefix="hyperguard-io"
    ) as pool:
        futures = [pool.submit(_as_worker, _call, call) for call in others]
        first = main()  # if it raises, the pool's exit still waits for the others
    return first, [future.result() for future in futures]


def _in_line[T, R](fn: Callable[[T], R], work: list[T]) -> list[R]:
    """`[fn(item) for item in work]` on this thread, every item run; the first exception
    raised after the last."""
    results: list[R] = []
    failure: Exception | None = None
    for item in work:
        try:
            results.append(fn(item))
        except Exception as error:
            failure = failure or error
    if failure is not None:
        raise failure
    return results


def _call[R](call: Callable[[], R]) -> R:
    return call()


def _as_worker[T, R](fn: Callable[[T], R], item: T) -> R:
    """`fn(item)` on a pool's thread: a bounded map there runs in line."""
    _worker.busy = True
    try:
        return fn(item)
    finally:
        _worker.busy = False
