"""bounded_map: independent calls issued together, a bounded number at a time (D162)."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hyperguard.concurrency import bounded_map


@given(st.lists(st.integers(), max_size=40), st.integers(min_value=1, max_value=8))
def test_the_results_come_in_the_items_order(items: list[int], limit: int) -> None:
    assert bounded_map(lambda x: x * 2, items, limit=limit) == [x * 2 for x in items]


def test_calls_are_in_flight_together_and_never_more_than_the_limit() -> None:
    lock, in_flight, most = threading.Lock(), [0], [0]
    # Three must be in flight at once for any to pass the barrier: serial calls would time out.
    barrier = threading.Barrier(3, timeout=10)

    def call(item: int) -> int:
        with lock:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
        barrier.wait()
        with lock:
            in_flight[0] -= 1
        return item

    assert bounded_map(call, range(9), limit=3) == list(range(9))
    assert most[0] == 3


def test_every_item_runs_and_the_first_failure_is_raised_after_all() -> None:
    done: list[int] = []

    def call(item: int) -> int:
        if item in (2, 5):
            raise ValueError(f"item {item}")
        done.append(item)
        return item

    with pytest.raises(ValueError, match="item 2"):
        bounded_map(call, range(8), limit=4)
    assert sorted(done) == [0, 1, 3, 4, 6, 7]


def test_inside_a_worker_it_runs_in_line() -> None:
    def threads_of(item: int) -> set[str]:
        return set(bounded_map(lambda _: threading.current_thread().name, [1, 2]))

    outer = bounded_map(threads_of, [1, 2], limit=2)
    # each inner map ran on its outer worker's own thread, no pool of its own
    assert all(len(names) == 1 for names in outer)


def test_a_limit_of_one_runs_in_line_and_below_one_is_refused() -> None:
    assert (
        bounded_map(lambda _: threading.current_thread().name, [1, 2], limit=1)
        == [threading.current_thread().name] * 2
    )
    with pytest.raises(ValueError, match="at least 1"):
        bounded_map(str, [1], limit=0)
