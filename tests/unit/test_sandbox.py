"""Each function ends its init by freezing what the init made out of the garbage collector's
walks (hyperguard.sandbox.init_done): after everything its top level builds. A scheduling pass
runs with the collector paused (hyperguard.sandbox.collector_paused, D190)."""

from __future__ import annotations

import ast
import gc
import threading
import weakref
from pathlib import Path

import pytest
from tests.conftest import ROOT

from hyperguard.sandbox import collector_paused, init_done

HANDLERS = sorted((ROOT / "functions").glob("*/app.py"))


def test_what_exists_at_the_call_is_left_out_of_later_collections() -> None:
    made: list[list[int]] = [[] for _ in range(1000)]  # containers the collector tracks
    assert all(gc.is_tracked(m) for m in made)
    before = gc.get_freeze_count()
    try:
        init_done()
        assert gc.get_freeze_count() >= before + len(made)
    finally:
        gc.unfreeze()


@pytest.mark.parametrize("handler", HANDLERS, ids=lambda p: p.parent.name)
def test_every_function_ends_its_init_with_it(handler: Path) -> None:
    body = ast.parse(handler.read_text()).body
    calls = [
        i
        for i, node in enumerate(body)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "init_done"
    ]
    assert len(calls) == 1, f"{handler}: init_done() is called once at the top level"
    after = body[calls[0] + 1 :]
    # After it only definitions: nothing the init still makes.
    assert all(isinstance(node, ast.FunctionDef) for node in after), handler


def test_the_handlers_are_found() -> None:
    assert {p.parent.name for p in HANDLERS} >= {"api", "scheduler", "recovery"}


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_a_paused_block_collects_nothing_and_its_cycles_go_as_it_ends() -> None:
    gone = threading.Event()
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        cycle = _Cycle()
        ref = weakref.ref(cycle, lambda _: gone.set())
        del cycle
        # Far past the young generation's threshold of allocations.
        made: list[list[int]] = [[] for _ in range(50_000)]
        assert ref() is not None  # no collection ran
        del made
    assert gc.isenabled()
    assert gone.is_set()  # the young collection at its end took the cycle


def test_nested_and_concurrent_blocks_resume_the_collector_after_the_last() -> None:
    inner_done, outer_may_end = threading.Event(), threading.Event()

    def other() -> None:
        with collector_paused():
            inner_done.set()
            outer_may_end.wait(5)

    with collector_paused():
        with collector_paused():
            pass
        assert not gc.isenabled()
        thread = threading.Thread(target=other)
        thread.start()
        assert inner_done.wait(5)
    assert not gc.isenabled()  # the other thread's block still runs
    outer_may_end.set()
    thread.join(5)
    assert gc.isenabled()


def test_a_collector_someone_disabled_stays_disabled() -> None:
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
