"""The twin's execution environments: a function without reserved concurrency that has all
its workers busy makes its callers wait, first come first served; one with reserved
concurrency throttles instead."""

from __future__ import annotations

import functools
import threading
from typing import cast

from hyperguard_twin.lambda_pool import Pool, Worker
from hyperguard_twin.plane.kube import wait_for


class _Environment:
    """A worker without a process: the pool asks only whether it is alive, and closes it."""

    def alive(self) -> bool:
        return True

    def close(self) -> None:
        pass


def _start() -> Worker:
    return cast(Worker, _Environment())


def test_callers_that_come_back_at_once_wait_behind_those_already_waiting() -> None:
    """Five callers wait for the one worker, each invoking twice in a row. Each second call
    joins the line behind the callers already in it, so every caller's first call is served
    before any caller's second: none is passed over by one that came later."""
    pool = Pool(cap=1, throttle_when_full=False)
    held = pool.acquire(_start)
    assert held is not None and held[1]  # a cold start
    served: list[int] = []

    def caller(n: int) -> None:
        for _ in range(2):
            acquired = pool.acquire(_start)
            assert acquired is not None
            served.append(n)
            pool.release(acquired[0], keep=True)

    def waiting(n: int) -> bool:
        return len(pool.line) == n

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(5)]
    for n, thread in enumerate(threads, start=1):
        thread.start()
        wait_for(functools.partial(waiting, n), 10, f"caller {n} to wait")
    pool.release(held[0], keep=True)
    for thread in threads:
        thread.join(10)
    assert served == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]
    assert pool.size == 1 and not pool.line


def test_a_pool_with_reserved_concurrency_throttles_when_full_and_queues_no_one() -> None:
    pool = Pool(cap=1, throttle_when_full=True)
    held = pool.acquire(_start)
    assert held is not None
    assert pool.acquire(_start) is None
    assert not pool.line
    pool.release(held[0], keep=True)
    again = pool.acquire(_start)
    assert again is not None and again[0] is held[0] and not again[1]  # the warm one
