"""bounded_map: independent calls issued together, a bounded number at a time (D162); beside: a
chain of dependent calls with the independent ones in flight meanwhile (D193)."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hyperguard.concurrency import beside, bounded_map


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


@pytest.mark.parametrize("limit", [1, 4])  # in line too
def test_every_item_runs_and_the_first_failure_is_raised_after_all(limit: int) -> None:
    done: list[int] = []

    def call(item: int) -> int:
        if item in (2, 5):
            raise ValueError(f"item {item}")
        done.append(item)
        return item

    with pytest.raises(ValueError, match="item 2"):
        bounded_map(call, range(8), limit=limit)
    assert sorted(done) == [0, 1, 3, 4, 6, 7]


def test_inside_a_worker_it_runs_in_line() -> None:
    def threads_of(item: int) -> set[str]:
        return set(bounded_map(lambda _: threading.current_thread().name, [1, 2]))

    outer = bounded_map(threads_of, [1, 2], limit=2)
    # each inner map ran on its outer worker's own thread, no pool of its own
    assert all(len(names) == 1 for names in outer)


def test_the_chain_runs_on_this_thread_while_the_others_are_in_flight() -> None:
    # The chain passes the barrier only while one of the others waits at it: in line, or
    # with the others after the chain, it would time out.
    barrier = threading.Barrier(2, timeout=10)

    def chain() -> str:
        barrier.wait()
        return threading.current_thread().name

    first, rest = beside(chain, [barrier.wait, lambda: 7])
    assert first == threading.current_thread().name
    assert rest[1] == 7


def test_the_chains_own_calls_issued_together_get_a_pool_of_their_own() -> None:
    # Three of the chain's calls must be in flight at once, beside the other's one.
    barrier = threading.Barrier(4, timeout=10)
    first, rest = beside(lambda: bounded_map(lambda _: barrier.wait(), range(3)), [barrier.wait])
    assert sorted([*first, *rest]) == [0, 1, 2, 3]  # each arrival at the barrier


@pytest.mark.parametrize("limit", [1, 4])
def test_beside_runs_every_call_and_raises_the_chains_failure_first(limit: int) -> None:
    done: list[str] = []

    def fails(name: str) -> None:
        done.append(name)
        raise ValueError(name)

    with pytest.raises(ValueError, match="chain"):
        beside(lambda: fails("chain"), [lambda: fails("a"), lambda: done.append("b")], limit=limit)
    assert sorted(done) == ["a", "b", "chain"]
    with pytest.raises(ValueError, match=r"^a$"):
        beside(lambda: 1, [lambda: done.append("c"), lambda: fails("a"), lambda: fails("b")])


def test_beside_inside_a_worker_runs_in_line() -> None:
    def names(_: int) -> set[str]:
        first, rest = beside(
            lambda: threading.current_thread().name,
            [lambda: threading.current_thread().name] * 2,
        )
        return {first, *rest}

    assert all(len(found) == 1 for found in bounded_map(names, [1, 2], limit=2))


def test_a_limit_of_one_runs_in_line_and_below_one_is_refused() -> None:
    assert (
        bounded_map(lambda _: threading.current_thread().name, [1, 2], limit=1)
        == [threading.current_thread().name] * 2
    )
    with pytest.raises(ValueError, match="at least 1"):
        bounded_map(str, [1], limit=0)
    with pytest.raises(ValueError, match="at least 1"):
        beside(str, [str], limit=0)
